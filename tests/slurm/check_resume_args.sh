#!/usr/bin/env bash
# slurm/common.sh's zt_resume_own_checkpoints without a cluster (label "unit"): a --resume DIR in
# ZEROTRAIN_EXTRA_ARGS (another run's checkpoint) starts the run and stays while the run directory
# holds no checkpoint; once it holds one (a requeued job), it becomes --resume auto, with a line
# in the log; --resume auto and --resume none stay as given.
set -euo pipefail
ZEROTRAIN_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=slurm/common.sh
source "$ZEROTRAIN_ROOT/slurm/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ZEROTRAIN_RUN_DIR=$work/run
mkdir -p "$ZEROTRAIN_RUN_DIR"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
extra=(--lr 5e-3 --resume /elsewhere/checkpoints/step-00000010 --seed 7)
zt_resume_own_checkpoints 2>"$work/log"
[ "${extra[*]}" = "--lr 5e-3 --resume /elsewhere/checkpoints/step-00000010 --seed 7" ] ||
  fail "the first attempt's --resume DIR changed: ${extra[*]}"
[ ! -s "$work/log" ] || fail "a line for the first attempt: $(cat "$work/log")"
mkdir -p "$ZEROTRAIN_RUN_DIR/checkpoints/step-00000004"
echo step-00000004 >"$ZEROTRAIN_RUN_DIR/checkpoints/latest"
zt_resume_own_checkpoints 2>"$work/log"
[ "${extra[*]}" = "--lr 5e-3 --resume auto --seed 7" ] || fail "a requeue kept: ${extra[*]}"
grep -q "holds checkpoints of its own: --resume auto continues them, in place of --resume /elsewhere" \
  "$work/log" || fail "no line saying so: $(cat "$work/log")"
extra=(--resume=/elsewhere/step-00000010)
zt_resume_own_checkpoints 2>/dev/null
[ "${extra[*]}" = "--resume=auto" ] || fail "--resume=DIR kept: ${extra[*]}"
extra=(--resume none)
zt_resume_own_checkpoints 2>/dev/null
[ "${extra[*]}" = "--resume none" ] || fail "--resume none changed: ${extra[*]}"
echo "ok: --resume DIR starts the run, and a requeue continues its own checkpoints"
