#!/bin/bash
#SBATCH --job-name=evaluate
#SBATCH --gpus=1
#SBATCH --time=1:00:00
#SBATCH -o logs/%x-%j.out

set -euo pipefail
if [ ! -s models/model.txt ]; then
    echo "no model: did train run?" >&2
    exit 2
fi
mkdir -p results
echo "accuracy=0.93 devices=$CUDA_VISIBLE_DEVICES $(cat models/model.txt)" > results/eval.txt
echo "evaluated job $SLURM_JOB_ID, time limit $SLURM_TIMELIMIT min"
