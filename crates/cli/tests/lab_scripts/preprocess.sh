#!/bin/bash
#SBATCH --job-name=preprocess
#SBATCH -c 2
#SBATCH --mem=512M
#SBATCH --time=0-00:05
#SBATCH --output=logs/%x-%j.out

set -euo pipefail
mkdir -p data
# Stands in for tokenising a corpus: a number the next step checks.
seq 1 1000 | awk '{ s += $1 } END { print s }' > data/prepared.txt
echo "preprocessed with $SLURM_CPUS_PER_TASK CPUs on $SLURM_JOB_NODELIST"
