#!/bin/bash
# Two shards, then one job after both, however they ended; prints the three ids.
set -euo pipefail
mkdir -p logs
a=$(sbatch --parsable --export=ALL,SHARD=0 shard.sh)
b=$(sbatch --parsable --export=ALL,SHARD=1 shard.sh)
c=$(sbatch --parsable --dependency=afterany:$a:$b collect.sh)
echo "$a $b $c"
