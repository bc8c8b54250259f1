#!/usr/bin/env bash
# A job array over the rows of a sweep file: task i trains the configuration of data row i.
#   sbatch --array=1-N slurm/sweep.sh inputs/sweeps/FILE.csv      (N = rows; default file and
#                                                                  --array: example.csv, 1-3)
# The file is CSV with a header naming exactly these columns, in any order:
#   stage (0-3), nodes, gpus (ranks per node), micro_batch, grad_accum (positive integers),
#   checkpointing (none | selective | full | every:K), offload (none | cpu | nvme)
# Blank lines and lines starting with # are ignored. The allocation must hold the largest row
# (sbatch --nodes / --ntasks-per-node / --gpus-per-node); each task starts a job step of its
# row's nodes × gpus ranks. Every task checks the whole file first: an unknown column or value
# fails the task with a message naming the line. Other settings: ZEROTRAIN_* (slurm/common.sh).
# Results: outputs/<job name>-<array job id>_<task id>/; compare them with `zerotrain report`.
#SBATCH --job-name=sweep
#SBATCH --array=1-3
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=02:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=outputs/slurm-%x-%A_%a.out
set -euo pipefail

# sbatch runs a copy of this file: find the repository through the submit directory.
ZEROTRAIN_ROOT=${ZEROTRAIN_ROOT:-${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}}
# shellcheck source=slurm/common.sh
source "$ZEROTRAIN_ROOT/slurm/common.sh" || { echo "set ZEROTRAIN_ROOT to the zerotrain checkout" >&2; exit 2; }

readonly SWEEP_COLUMNS=(stage nodes gpus micro_batch grad_accum checkpointing offload)

# sweep_die LINE MESSAGE
sweep_die() { zt_die "$SWEEP_FILE line $1: $2"; }

check_value() {  # check_value LINE COLUMN VALUE
  local line=$1 column=$2 value=$3
  case "$column" in
    stage) [[ $value =~ ^[0-3]$ ]] || sweep_die "$line" "stage must be 0, 1, 2 or 3, got '$value'" ;;
    nodes | gpus | micro_batch | grad_accum)
      zt_is_positive_int "$value" || sweep_die "$line" "$column must be a positive integer, got '$value'" ;;
    checkpointing)
      [[ $value =~ ^(none|selective|full|every:[1-9][0-9]*)$ ]] ||
        sweep_die "$line" "checkpointing must be none, selective, full or every:K, got '$value'" ;;
    offload)
      [[ $value =~ ^(none|cpu|nvme)$ ]] || sweep_die "$line" "offload must be none, cpu or nvme, got '$value'" ;;
  esac
}

# Validates the whole file and sets ROW[column]=value for data row number $1 (1-based).
declare -A ROW
load_sweep_row() {
  local wanted=$1 line_no=0 data_rows=0 raw
  local -a header=() fields
  [ -r "$SWEEP_FILE" ] || zt_die "sweep file '$SWEEP_FILE' not found"
  while IFS= read -r raw || [ -n "$raw" ]; do
    line_no=$((line_no + 1))
    raw=${raw%$'\r'}
    raw=${raw//[[:space:]]/}
    [ -z "$raw" ] || [[ $raw == \#* ]] && continue
    IFS=, read -ra fields <<<"$raw"
    if [ ${#header[@]} -eq 0 ]; then
      header=("${fields[@]}")
      local c known seen=" "
      for c in "${header[@]}"; do
        known=0
        for k in "${SWEEP_COLUMNS[@]}"; do [ "$c" = "$k" ] && known=1; done
        [ "$known" = 1 ] || sweep_die "$line_no" "unknown column '$c' (columns: ${SWEEP_COLUMNS[*]})"
        [[ $seen == *" $c "* ]] && sweep_die "$line_no" "column '$c' appears twice"
        seen+="$c "
      done
      for k in "${SWEEP_COLUMNS[@]}"; do
        [[ $seen == *" $k "* ]] || sweep_die "$line_no" "missing column '$k'"
      done
      continue
    fi
    [ ${#fields[@]} -eq ${#header[@]} ] ||
      sweep_die "$line_no" "${#fields[@]} values for ${#header[@]} columns"
    data_rows=$((data_rows + 1))
    local i
    for i in "${!header[@]}"; do
      check_value "$line_no" "${header[$i]}" "${fields[$i]}"
      [ "$data_rows" -eq "$wanted" ] && ROW[${header[$i]}]=${fields[$i]}
    done
  done <"$SWEEP_FILE"
  [ ${#header[@]} -gt 0 ] || zt_die "$SWEEP_FILE: empty sweep file (no header)"
  [ "$wanted" -le "$data_rows" ] ||
    zt_die "array task $wanted but $SWEEP_FILE has $data_rows row(s): submit with --array=1-$data_rows"
}

zt_require_slurm
SWEEP_FILE=${1:-${ZEROTRAIN_SWEEP_FILE:-$ZEROTRAIN_ROOT/inputs/sweeps/example.csv}}
[ -n "${SLURM_ARRAY_TASK_ID:-}" ] || zt_die "sweep.sh runs as a job array: sbatch --array=1-N"
load_sweep_row "$SLURM_ARRAY_TASK_ID"

ZEROTRAIN_STAGE=${ROW[stage]}
ZEROTRAIN_MICRO_BATCH=${ROW[micro_batch]}
ZEROTRAIN_GRAD_ACCUM=${ROW[grad_accum]}
ZEROTRAIN_CHECKPOINTING=${ROW[checkpointing]}
ZEROTRAIN_OFFLOAD=${ROW[offload]}
ZEROTRAIN_LAUNCH_NODES=${ROW[nodes]}
ZEROTRAIN_LAUNCH_TASKS=$((ROW[nodes] * ROW[gpus]))
: "${ZEROTRAIN_PRESET:=1b}" "${ZEROTRAIN_SEQ_LEN:=2048}" "${ZEROTRAIN_STEPS:=50}"
zt_setup
if [ "${ROW[nodes]}" -gt "${SLURM_JOB_NUM_NODES:-1}" ] || [ "$ZEROTRAIN_LAUNCH_TASKS" -gt "${SLURM_NTASKS:-1}" ]; then
  zt_die "row $SLURM_ARRAY_TASK_ID needs ${ROW[nodes]} node(s) × ${ROW[gpus]} rank(s) but the" \
    "allocation has ${SLURM_JOB_NUM_NODES:-1} node(s) and ${SLURM_NTASKS:-1} task(s)"
fi
if [ "$ZEROTRAIN_BACKEND" != cpu ] && [ "$(zt_gpus_per_node)" -gt 0 ]; then
  [ "${ROW[gpus]}" -le "$(zt_gpus_per_node)" ] ||
    zt_die "row $SLURM_ARRAY_TASK_ID needs ${ROW[gpus]} GPU(s) per node, the allocation has $(zt_gpus_per_node)"
  ZEROTRAIN_STEP_GPUS=${ROW[gpus]}
fi
printf '%s\n' "sweep_file=$SWEEP_FILE" "row=$SLURM_ARRAY_TASK_ID" \
  "$(for k in "${SWEEP_COLUMNS[@]}"; do printf '%s=%s ' "$k" "${ROW[$k]}"; done)" \
  >"$ZEROTRAIN_RUN_DIR/sweep-row.txt"
# The row's own settings, which ZEROTRAIN_EXTRA_ARGS may not override for every row.
ZT_ROW_OPTIONS="--zero-stage --micro-batch --grad-accum --activation-checkpointing"
ZT_ROW_OPTIONS+=" --offload-optimizer --offload-param"
rc=0
zt_launch_training || rc=$?
exit "$rc"
