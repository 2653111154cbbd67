#!/bin/bash
#SBATCH --job-name=mgpu-eval
#SBATCH -p gpu
#SBATCH --ntasks=2
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=512M
#SBATCH --time=30
#SBATCH --output=logs/%x-%j.out

echo "SLURM_NTASKS=$SLURM_NTASKS SLURM_GPUS_ON_NODE=$SLURM_GPUS_ON_NODE"
srun -l bash -c 'echo "task $SLURM_PROCID sees $CUDA_VISIBLE_DEVICES"'
