#!/usr/bin/env bash
# ZeRO-Offload on one GPU: ZeRO-2 with the optimizer state in CPU memory, full activation
# checkpointing, bf16, the 1b preset.
#   sbatch slurm/offload_1gpu.sh
# Offload: ZEROTRAIN_OFFLOAD=cpu|nvme|none (default cpu), or ZEROTRAIN_OFFLOAD_ARGS="..." passed
# verbatim. The script detects `train --offload-optimizer`; with a zerotrain built before the
# offload issue landed, a CPU run (ZEROTRAIN_BACKEND=cpu) goes on without offload (warning) and a
# GPU run stops with a clear error.
# On SIGUSR1 (120 s before the time limit) zerotrain checkpoints, exits 124 and the job requeues.
#SBATCH --job-name=offload-1gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=16
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

: "${ZEROTRAIN_PRESET:=1b}" "${ZEROTRAIN_STAGE:=2}" "${ZEROTRAIN_CHECKPOINTING:=full}"
: "${ZEROTRAIN_OFFLOAD:=cpu}" "${ZEROTRAIN_MICRO_BATCH:=4}" "${ZEROTRAIN_SEQ_LEN:=2048}"
zt_train_job "$@"
