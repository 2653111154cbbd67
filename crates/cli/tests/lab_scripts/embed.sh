#!/bin/bash
#SBATCH --job-name=embed
#SBATCH -p gpu
#SBATCH -N 2
#SBATCH --gpus=2
#SBATCH --cpus-per-task=1
#SBATCH --mem=256M
#SBATCH -t 20
#SBATCH -o logs/%x-%j.out

# Embeds a corpus with two GPUs in all, spread over two nodes: one task per node.
srun bash -c 'echo "node $SLURM_NODEID: $SLURM_GPUS_ON_NODE GPU $CUDA_VISIBLE_DEVICES"'
