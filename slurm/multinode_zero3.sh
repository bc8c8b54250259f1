#!/usr/bin/env bash
# ZeRO-3 over N nodes × G GPUs (defaults 2 × 8), bf16, the 7b preset, full checkpointing.
#   sbatch --nodes=4 --ntasks-per-node=8 --gpus-per-node=8 slurm/multinode_zero3.sh
# Overrides: any sbatch flag, and the ZEROTRAIN_* variables of slurm/common.sh. Set
# NCCL_SOCKET_IFNAME / NCCL_IB_HCA for your fabric when NCCL's choice is wrong.
# On SIGUSR1 (120 s before the time limit) zerotrain checkpoints, exits 124 and the job requeues.
#SBATCH --job-name=zero3-multinode
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=outputs/slurm-%x-%j.out
set -euo pipefail

# sbatch runs a copy of this file: find the repository through the submit directory.
ZEROTRAIN_ROOT=${ZEROTRAIN_ROOT:-${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}}
# shellcheck source=slurm/common.sh
source "$ZEROTRAIN_ROOT/slurm/common.sh" || { echo "set ZEROTRAIN_ROOT to the zerotrain checkout" >&2; exit 2; }

: "${ZEROTRAIN_PRESET:=7b}" "${ZEROTRAIN_STAGE:=3}" "${ZEROTRAIN_CHECKPOINTING:=full}"
: "${ZEROTRAIN_MICRO_BATCH:=1}" "${ZEROTRAIN_SEQ_LEN:=4096}"
zt_train_job "$@"
