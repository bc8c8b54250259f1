#!/usr/bin/env bash
# ZeRO-2, bf16, the 1b preset on one node with 8 GPUs (gradients and optimizer state sharded).
#   sbatch slurm/zero2_8gpu.sh
# Overrides: any sbatch flag, and the ZEROTRAIN_* variables of slurm/common.sh.
# On SIGUSR1 (120 s before the time limit) zerotrain checkpoints, exits 124 and the job requeues.
#SBATCH --job-name=zero2-8gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
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

: "${ZEROTRAIN_PRESET:=1b}" "${ZEROTRAIN_STAGE:=2}" "${ZEROTRAIN_CHECKPOINTING:=none}"
: "${ZEROTRAIN_MICRO_BATCH:=2}" "${ZEROTRAIN_SEQ_LEN:=2048}"
zt_train_job "$@"
