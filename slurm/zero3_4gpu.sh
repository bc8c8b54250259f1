#!/usr/bin/env bash
# ZeRO-3 + full activation checkpointing, bf16, the 6b preset on one node with 4 GPUs.
#   sbatch slurm/zero3_4gpu.sh
# Overrides: any sbatch flag, and the ZEROTRAIN_* variables of slurm/common.sh, e.g. on a CPU node
#   ZEROTRAIN_BACKEND=cpu ZEROTRAIN_PRESET=tiny ZEROTRAIN_SEQ_LEN=64 ZEROTRAIN_STEPS=20 \
#     sbatch --gpus-per-node=0 --cpus-per-task=1 slurm/zero3_4gpu.sh
# On SIGUSR1 (120 s before the time limit) zerotrain checkpoints, exits 124 and the job requeues.
#SBATCH --job-name=zero3-4gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=outputs/slurm-%x-%j.out
set -euo pipefail

# sbatch runs a copy of this file: find the repository through the submit directory.
ZEROTRAIN_ROOT=${ZEROTRAIN_ROOT:-${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}}
# shellcheck source=slurm/common.sh
source "$ZEROTRAIN_ROOT/slurm/common.sh" || { echo "set ZEROTRAIN_ROOT to the zerotrain checkout" >&2; exit 2; }

: "${ZEROTRAIN_PRESET:=6b}" "${ZEROTRAIN_STAGE:=3}" "${ZEROTRAIN_CHECKPOINTING:=full}"
: "${ZEROTRAIN_PRECISION:=bf16}" "${ZEROTRAIN_MICRO_BATCH:=1}" "${ZEROTRAIN_SEQ_LEN:=2048}"
zt_train_job "$@"
