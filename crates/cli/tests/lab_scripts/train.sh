#!/bin/bash
#SBATCH --job-name=train
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=10:00
#SBATCH --output=logs/%x-%j.out

set -euo pipefail
if [ ! -s data/prepared.txt ]; then
    echo "no prepared data: did preprocess run?" >&2
    exit 2
fi
mkdir -p models
echo "weights=$(cat data/prepared.txt) gpus=$SLURM_GPUS_ON_NODE devices=$CUDA_VISIBLE_DEVICES" > models/model.txt
echo "trained on $SLURM_GPUS_ON_NODE GPUs ($CUDA_VISIBLE_DEVICES)"
