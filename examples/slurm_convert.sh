#!/bin/bash
# Convert a dataset with a Slurm job array: task i of K converts planned shards j % K == i.
#
#   sbatch --array=0-15 examples/slurm_convert.sh SRC DEST          # K = the array size
#   sbatch --dependency=afterok:<array job id> --wrap "shardkit merge DEST"   # the one-line merge, once all tasks are done
#
# A failed task can be resubmitted alone (sbatch --array=7 ...): it resumes, and the result is byte-identical
# to a single-task run. Extra arguments after DEST go to `shardkit convert` (e.g. --short-side 320 --shard-size 1000).
#SBATCH --job-name=shardkit-convert
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=shardkit-convert-%A_%a.log
set -euo pipefail

SRC=${1:?usage: sbatch --array=0-K examples/slurm_convert.sh SRC DEST [convert options]}
DEST=${2:?usage: sbatch --array=0-K examples/slurm_convert.sh SRC DEST [convert options]}
shift 2
SHARDKIT=${SHARDKIT:-shardkit}
NUM_TASKS=${SLURM_ARRAY_TASK_COUNT:?run as a job array: sbatch --array=0-15 ...}
TASK_INDEX=${SLURM_ARRAY_TASK_ID:?run as a job array: sbatch --array=0-15 ...}

$SHARDKIT convert "$SRC" "$DEST" --num-tasks "$NUM_TASKS" --task-index "$TASK_INDEX" \
    --workers "${SLURM_CPUS_PER_TASK:-1}" --quiet "$@"
