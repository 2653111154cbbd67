#!/bin/bash
#SBATCH --job-name=shard
#SBATCH --ntasks=1
#SBATCH -c 1
#SBATCH --mem-per-cpu=100M
#SBATCH -t 5
#SBATCH -o logs/%x-%j.out

# Scores one shard of the data set; a shard whose input is missing fails.
set -euo pipefail
mkdir -p results
wc -l < "data/shard-$SHARD.txt" > "results/shard-$SHARD.count"
echo "shard $SHARD done"
