#!/bin/bash
#SBATCH --job-name=ddp-train
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=256M
#SBATCH --gpus-per-node=1
#SBATCH --time=00:10:00
#SBATCH -o logs/%x-%j.out
#SBATCH -e logs/%x-%j.err

# Multi-node data-parallel training, launched the way the PyTorch examples do: one task per
# GPU slot, every task told its rank, the world size and where rank 0 listens.
set -euo pipefail

echo "job $SLURM_JOB_ID: $SLURM_NNODES nodes ($SLURM_JOB_NODELIST), $SLURM_NTASKS tasks"
export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
run=results/ddp-$SLURM_JOB_ID
mkdir -p "$run"

srun --ntasks-per-node=2 bash -c '
  out='"$run"'/rank-$SLURM_PROCID.env
  {
    echo "SLURM_PROCID=$SLURM_PROCID"
    echo "SLURM_LOCALID=$SLURM_LOCALID"
    echo "SLURM_NODEID=$SLURM_NODEID"
    echo "SLURM_NTASKS=$SLURM_NTASKS"
    echo "RANK=$RANK"
    echo "LOCAL_RANK=$LOCAL_RANK"
    echo "WORLD_SIZE=$WORLD_SIZE"
    echo "MASTER_PORT=$MASTER_PORT"
    echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"
    echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
    echo "PWD=$(pwd)"
    echo "SLURM_SUBMIT_DIR=$SLURM_SUBMIT_DIR"
    echo "SLURM_JOB_PARTITION=$SLURM_JOB_PARTITION"
    echo "SLURM_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"
  } > "$out"
  echo "rank $SLURM_PROCID of $WORLD_SIZE ready"
'
echo "all ranks done" >&2
