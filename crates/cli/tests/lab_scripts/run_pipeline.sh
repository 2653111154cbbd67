#!/bin/bash
# Submits preprocess → train → evaluate, each after the one before it succeeded, and prints
# their ids.
set -euo pipefail
mkdir -p logs
pre=$(sbatch --parsable preprocess.sh)
train=$(sbatch --parsable --dependency=afterok:$pre train.sh)
eval=$(sbatch --parsable --dependency=afterok:$train evaluate.sh)
echo "$pre $train $eval"
