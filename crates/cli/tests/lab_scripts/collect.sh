#!/bin/bash
#SBATCH --job-name=collect
#SBATCH -c 1
#SBATCH --mem=100M
#SBATCH -t 5
#SBATCH -o logs/%x-%j.out

# Runs after every shard, whatever became of them, and reports what it found.
done_shards=$(ls results/shard-*.count 2>/dev/null | wc -l)
echo "$done_shards of 2 shards" > results/collected.txt
echo "collected $done_shards shards"
