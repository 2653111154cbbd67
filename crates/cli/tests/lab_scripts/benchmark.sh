#!/bin/bash
#SBATCH --job-name=bench
#SBATCH --partition=gpu
#SBATCH --exclusive
#SBATCH -c 1
#SBATCH --mem=256M
#SBATCH --time=15:00
#SBATCH --output=logs/%x-%j.out

# Timings are only worth something alone on the node.
echo "SLURM_CPUS_ON_NODE=$SLURM_CPUS_ON_NODE"
echo "SLURM_GPUS_ON_NODE=$SLURM_GPUS_ON_NODE"
echo "SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
