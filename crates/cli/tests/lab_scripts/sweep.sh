#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --partition=gpu
#SBATCH --array=0-9%3
#SBATCH --output=logs/%x_%A_%a.out
#SBATCH --cpus-per-task=1
#SBATCH --mem=200M
#SBATCH --time=5

# Learning-rate sweep: one array task per value, at most three at a time.
LRS=(0.1 0.05 0.02 0.01 0.005 0.002 0.001 0.0005 0.0002 0.0001)
LR=${LRS[$SLURM_ARRAY_TASK_ID]}

mkdir -p results/sweep
span=results/sweep/span-$SLURM_ARRAY_TASK_ID.txt
date +%s%N > "$span"
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT (array $SLURM_ARRAY_JOB_ID, job $SLURM_JOB_ID): lr=$LR"
sleep 0.5
echo "lr=$LR loss=$(awk -v lr="$LR" 'BEGIN { printf "%.4f", (lr - 0.01) ^ 2 }')" > results/sweep/lr-$SLURM_ARRAY_TASK_ID.txt
date +%s%N >> "$span"
