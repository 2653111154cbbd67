#!/bin/bash
#SBATCH --job-name=long-train
#SBATCH --time=1
#SBATCH --signal=B:USR1@55
#SBATCH --chdir=runs
#SBATCH --output=train.log
#SBATCH --open-mode=append
#SBATCH --export=ALL,WANDB_MODE=offline
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=lab@example.org
#SBATCH -c 1 --mem=256M

# A run longer than its time limit: told 55 s before the limit, it saves a checkpoint and
# exits cleanly; the next run appends to the same log.
step=0
checkpoint() {
    echo "USR1 at step $step: checkpointing"
    echo "$step" > checkpoint.txt
    exit 0
}
trap checkpoint USR1

{
    echo "SLURM_SUBMIT_DIR=$SLURM_SUBMIT_DIR"
    echo "PWD=$(pwd)"
    echo "WANDB_MODE=$WANDB_MODE"
    echo "LAB_DATASET=${LAB_DATASET:-unset}"
    echo "SLURM_JOB_NAME=$SLURM_JOB_NAME"
    echo "SLURM_JOB_PARTITION=$SLURM_JOB_PARTITION"
    echo "SLURM_JOB_ACCOUNT=$SLURM_JOB_ACCOUNT"
    echo "SLURM_TIMELIMIT=$SLURM_TIMELIMIT"
} > env.txt
echo "run of job $SLURM_JOB_ID starts"
while [ $step -lt 1000 ]; do
    step=$((step + 1))
    sleep 0.1 &
    wait
done
echo "finished without a signal"
