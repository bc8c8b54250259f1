#!/usr/bin/env bash
# The `slurm` test cases, run against the cluster of slurm_cluster.sh with the CPU backend:
#   slurm_cases.sh CASE CLUSTER_LINK SOURCE_DIR ZEROTRAIN_BINARY
# CASE: zero3_4rank | requeue_resume | cancel_saves | sweep_report | bad_inputs. Exit 0 pass, 1 fail,
# 77 skip.
set -euo pipefail

CASE=${1:?case}
CLUSTER=${2:?cluster link}
SRC=${3:?source dir}
BIN=${4:?zerotrain binary}

fail() {
  printf '[slurm test %s] FAIL: %s\n' "$CASE" "$*" >&2
  exit 1
}
note() { printf '[slurm test %s] %s\n' "$CASE" "$*" >&2; }

[ -r "$CLUSTER/env.sh" ] || {
  note "SKIP: no test cluster at $CLUSTER (slurm_cluster_start skipped or failed)"
  exit 77
}
# shellcheck source=/dev/null
source "$CLUSTER/env.sh"

WORK=$(mktemp -d "/tmp/zt-slurm-$CASE.XXXXXX")
trap '[ -n "${ZT_SLURM_KEEP:-}" ] || rm -rf "$WORK"' EXIT
cd "$WORK"
# What every job inherits (sbatch exports the environment): CPU backend, tiny model, few steps.
export ZEROTRAIN_ROOT=$SRC ZEROTRAIN_BIN=$BIN ZEROTRAIN_OUTPUT_ROOT=$WORK/outputs
export ZEROTRAIN_BACKEND=cpu ZEROTRAIN_PRESET=tiny ZEROTRAIN_SEQ_LEN=32 ZEROTRAIN_MICRO_BATCH=2
export ZEROTRAIN_EXTRA_ARGS="--lr 5e-3 --seed 7 --log-every 1"
export OMP_NUM_THREADS=1
# CPU node: no GPUs, one CPU per rank.
CPU_NODE=(--gpus-per-node=0 --cpus-per-task=1 --output="$WORK/%x-%j.out")

# submit NAME EXPECTED_RC SBATCH_ARGS... : sbatch --wait, checks the exit code, prints the logs
# on a mismatch. Leaves the job id in JOB.
submit() {
  local name=$1 expected=$2 rc=0
  shift 2
  local started=$SECONDS
  JOB=$(sbatch --parsable --wait --job-name="$name" "$@") || rc=$?
  JOB=${JOB%%;*}
  note "$name: job ${JOB:-?} exit $rc after $((SECONDS - started)) s"
  if [ "$rc" -ne "$expected" ]; then
    cat "$WORK"/*.out >&2 2>/dev/null || true
    fail "$name: sbatch --wait returned $rc, expected $expected"
  fi
}

# The "loss" values of a metrics file as written (to compare runs bit for bit).
losses() { python3 -c 'import json,sys; [print(json.dumps(json.loads(l)["loss"])) for l in open(sys.argv[1]) if l.strip()]' "$1"; }

case_zero3_4rank() {
  # The length as epochs (ZEROTRAIN_EPOCHS, train --epochs): 13042 windows of 33 tokens in the
  # sample text at seq-len 32, 8 a step over 4 ranks, so 0.0049 epochs are ceil(7.99) = 8 steps.
  # ZEROTRAIN_EXTRA_ARGS names an option the script passes itself: it wins (zerotrain refuses
  # an option given twice), and the log says so.
  ZEROTRAIN_EPOCHS=0.0049 ZEROTRAIN_SAVE_EVERY=4 ZEROTRAIN_EXTRA_ARGS="$ZEROTRAIN_EXTRA_ARGS --save-every=2" \
    submit zero3 0 "${CPU_NODE[@]}" "$SRC/slurm/zero3_4gpu.sh"
  local run=$WORK/outputs/zero3-$JOB
  grep -q "set --save-every: leaving out the script's own --save-every 4" "$WORK/zero3-$JOB.out" ||
    fail "no note that ZEROTRAIN_EXTRA_ARGS's --save-every replaced the script's"
  ! grep -q -- "--save-every 4" "$run/launch.attempt-0.txt" || fail "--save-every given twice"
  local f
  for f in run.json metrics.jsonl report.json report.md trace.json loss.svg step_time.svg \
    slurm-env.attempt-0.txt slurm-job.attempt-0.txt launch.attempt-0.txt final/config.json; do
    [ -s "$run/$f" ] || fail "missing $run/$f"
  done
  grep -q "^SLURM_JOB_ID=$JOB$" "$run/slurm-env.attempt-0.txt" || fail "env capture lacks SLURM_JOB_ID"
  grep -q "JobId=$JOB" "$run/slurm-job.attempt-0.txt" || fail "scontrol capture lacks JobId"
  grep -q -- "--mpi=pmix" "$run/launch.attempt-0.txt" || fail "not launched with srun --mpi=pmix"
  python3 - "$run" <<'PY' || fail "run outputs are wrong"
import json, sys
run = sys.argv[1]
cfg = json.load(open(f"{run}/run.json"))
assert cfg["world_size"] == 4, cfg["world_size"]
assert cfg["config"]["epochs"] == 0.0049 and cfg["config"]["steps"] == 8, cfg["config"]
assert cfg["config"]["zero_stage"] == 3 and cfg["config"]["activation_checkpointing"] == "full"
m = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert [x["step"] for x in m] == list(range(1, 9)), [x["step"] for x in m]
assert m[-1]["loss"] < m[0]["loss"] - 0.2, (m[0]["loss"], m[-1]["loss"])
for key in ("forward_s", "backward_s", "optimizer_s", "comm_wait_s", "data_s", "checkpoint_s"):
    assert key in m[0]["time"], key
assert m[1]["time"]["checkpoint_s"] > 0  # ZEROTRAIN_EXTRA_ARGS's --save-every=2
assert cfg["config"]["save_every"] == 2, cfg["config"]
trace = json.load(open(f"{run}/trace.json"))["traceEvents"]
assert {e["pid"] for e in trace if e["ph"] == "X"} == {0, 1, 2, 3}
report = json.load(open(f"{run}/report.json"))
assert report["rank_skew"]["mean_slowest_over_median"] >= 1.0
print(f"loss {m[0]['loss']:.4f} -> {m[-1]['loss']:.4f}")
PY
}

case_requeue_resume() {
  local steps=150
  export ZEROTRAIN_STEPS=$steps ZEROTRAIN_SAVE_EVERY=1000 ZEROTRAIN_STAGE=3
  # The reference: the same job, never interrupted.
  submit reference 0 "${CPU_NODE[@]}" --ntasks-per-node=2 "$SRC/slurm/zero3_4gpu.sh"
  local reference=$WORK/outputs/reference-$JOB
  # The interrupted job: SIGUSR1 to the batch shell once a few steps are logged.
  local rc=0 started=$SECONDS
  sbatch --parsable --wait --job-name=requeue "${CPU_NODE[@]}" --ntasks-per-node=2 \
    "$SRC/slurm/zero3_4gpu.sh" >"$WORK/job.id" &
  local waiter=$!
  local job="" i
  for ((i = 0; i < 600; i++)); do
    job=$(cut -d';' -f1 "$WORK/job.id" 2>/dev/null || true)
    [ -n "$job" ] && [ -s "$WORK/outputs/requeue-$job/metrics.jsonl" ] &&
      [ "$(wc -l <"$WORK/outputs/requeue-$job/metrics.jsonl")" -ge 5 ] && break
    sleep 0.1
  done
  [ -n "$job" ] || fail "no job id from sbatch"
  local run=$WORK/outputs/requeue-$job
  [ "$(wc -l <"$run/metrics.jsonl")" -lt "$steps" ] || fail "the run finished before the signal"
  scancel --signal=USR1 --batch "$job"
  note "SIGUSR1 sent to job $job after $(wc -l <"$run/metrics.jsonl") logged steps"
  # Slurm holds a requeued job back for about two minutes (BeginTime); an operator's
  # `scontrol update StartTime=now+10` keeps this test short while leaving slurmd the seconds it
  # needs to finish the first run (a step launched at once can fail to start).
  for ((i = 0; i < 600; i++)); do
    state=$(scontrol show job "$job" 2>/dev/null) || state=""
    if grep -q "Restarts=1" <<<"$state" && grep -q "JobState=PENDING" <<<"$state"; then
      scontrol update JobId="$job" StartTime=now+10 || true
      break
    fi
    sleep 0.1
  done
  wait "$waiter" || rc=$?
  note "requeued job $job finished with $rc after $((SECONDS - started)) s"
  if [ "$rc" -ne 0 ]; then
    cat "$WORK"/*.out >&2 || true
    fail "sbatch --wait returned $rc"
  fi
  local log=$WORK/requeue-$job.out
  grep -q "exit 124" "$log" || fail "zerotrain did not stop with exit 124"
  grep -q "requeueing job $job" "$log" || fail "the job was not requeued"
  grep -q "resumed from" "$log" || fail "the second run did not resume from a checkpoint"
  [ -s "$run/slurm-env.attempt-1.txt" ] || fail "no second attempt (SLURM_RESTART_COUNT=1)"
  grep -q "^SLURM_RESTART_COUNT=1$" "$run/slurm-env.attempt-1.txt" || fail "restart count not 1"
  ls -d "$run"/checkpoints/step-* >/dev/null 2>&1 || fail "no checkpoint in $run/checkpoints"
  python3 - "$run" <<'PY' || fail "metrics not continuous"
import json, sys
steps = [json.loads(l)["step"] for l in open(f"{sys.argv[1]}/metrics.jsonl")]
assert steps == list(range(1, len(steps) + 1)), steps
PY
  diff <(losses "$reference/metrics.jsonl") <(losses "$run/metrics.jsonl") >&2 ||
    fail "losses of the requeued run differ from the uninterrupted run"
  note "$steps losses bitwise equal to the uninterrupted run; stopped at step" \
    "$(grep -o 'stopped after step [0-9]*' "$log" | sed -n 1p)"
}

# scancel without --signal, as preemption and a time limit without the USR1 lead do: Slurm sends
# SIGTERM to every process of the job, during a stop-save that takes 3 s here. Under srun the
# ranks save. Under mpirun (ZEROTRAIN_MPIRUN_KILL_WAIT=2) mpirun relays its own SIGTERM 2 s later,
# inside the save, and kills the ranks 2 s after that: the relay is the same request and the save
# completes; with the relay window closed (ZT_SIGTERM_RELAY_SECONDS=0, every SIGTERM after the
# first "exit now", as zerotrain once took them) the relay ends the ranks and nothing is saved.
case_cancel_saves() {
  export ZEROTRAIN_STEPS=100000 ZEROTRAIN_SAVE_EVERY=100000 ZEROTRAIN_REQUEUE=0
  export ZEROTRAIN_EXTRA_ARGS="$ZEROTRAIN_EXTRA_ARGS --debug-stall-checkpoint 3"
  local setting job run i saved want
  for setting in srun mpirun mpirun_closed; do
    unset ZT_SIGTERM_RELAY_SECONDS ZEROTRAIN_MPIRUN_KILL_WAIT
    export ZEROTRAIN_LAUNCHER=${setting%_closed}
    [ "$setting" = srun ] || export ZEROTRAIN_MPIRUN_KILL_WAIT=2
    [ "$setting" != mpirun_closed ] || export ZT_SIGTERM_RELAY_SECONDS=0
    job=$(sbatch --parsable --job-name="cancel_$setting" "${CPU_NODE[@]}" --ntasks-per-node=2 \
      "$SRC/slurm/zero3_4gpu.sh")
    job=${job%%;*}
    run=$WORK/outputs/cancel_$setting-$job
    for ((i = 0; i < 1200; i++)); do
      [ -s "$run/metrics.jsonl" ] && [ "$(wc -l <"$run/metrics.jsonl")" -ge 5 ] && break
      sleep 0.1
    done
    [ -s "$run/metrics.jsonl" ] || fail "$setting: job $job logged no steps"
    scancel "$job"
    for ((i = 0; i < 1200; i++)); do
      squeue -h -j "$job" 2>/dev/null | grep -q . || break
      sleep 0.1
    done
    saved=no
    [ -e "$run/checkpoints/latest" ] && saved=yes
    want=yes
    [ "$setting" != mpirun_closed ] || want=no
    note "$setting: scancel after $(wc -l <"$run/metrics.jsonl") steps; checkpoint saved: $saved"
    [ "$saved" = "$want" ] || {
      cat "$WORK/cancel_$setting-$job.out" >&2
      fail "$setting: checkpoint saved: $saved, expected $want"
    }
  done
  unset ZT_SIGTERM_RELAY_SECONDS ZEROTRAIN_MPIRUN_KILL_WAIT ZEROTRAIN_LAUNCHER
}

case_sweep_report() {
  export ZEROTRAIN_STEPS=6
  submit sweep 0 "${CPU_NODE[@]}" --ntasks-per-node=4 --array=1-3 "$SRC/slurm/sweep.sh" \
    "$SRC/inputs/sweeps/example.csv"
  local runs=()
  local t
  for t in 1 2 3; do runs+=("$WORK/outputs/sweep-${JOB}_$t"); done
  "$BIN" report "${runs[@]}" --out "$WORK/report" || fail "zerotrain report failed"
  python3 - "$WORK/report" <<'PY' || fail "scaling table is wrong"
import csv, sys
rows = list(csv.DictReader(open(f"{sys.argv[1]}/scaling.csv")))
assert len(rows) == 3, len(rows)
assert sorted((int(r["stage"]), int(r["ranks"])) for r in rows) == [(2, 2), (3, 2), (3, 4)], rows
for r in rows:
    assert float(r["tokens_per_s"]) > 0 and float(r["peak_params_bytes"]) > 0, r
    assert int(r["comm_bytes_per_step"]) > 0, r
    assert r["mfu"] == "", r  # CPU: no MFU
stage3 = {int(r["ranks"]): r for r in rows if r["stage"] == "3"}
assert float(stage3[2]["scaling_efficiency"]) == 1.0
md = open(f"{sys.argv[1]}/scaling.md").read()
assert md.count("\n| sweep-") == 3, md
PY
  command -v rsvg-convert >/dev/null || {
    apt-get install -y -qq --no-install-recommends librsvg2-bin >/dev/null 2>&1 || true
  }
  command -v rsvg-convert >/dev/null || fail "rsvg-convert (librsvg2-bin) is not installed"
  local svg size
  for svg in "$WORK"/report/*.svg "${runs[0]}/loss.svg" "${runs[0]}/step_time.svg"; do
    rsvg-convert -o "${svg%.svg}.png" "$svg" || fail "rsvg-convert failed on $svg"
    size=$(stat -c %s "${svg%.svg}.png")
    [ "$size" -gt 5000 ] || fail "${svg%.svg}.png is only $size bytes"
    note "$(basename "$svg") -> PNG of $size bytes"
  done
}

# expect_failure NAME LOGFILE PATTERN: the job/command failed and said PATTERN.
expect_message() {
  grep -q -- "$3" "$2" || {
    cat "$2" >&2
    fail "$1: no message matching '$3'"
  }
  note "$1: rejected with: $(grep -m1 -- "$3" "$2")"
}

case_bad_inputs() {
  local header=stage,nodes,gpus,micro_batch,grad_accum,checkpointing,offload
  printf '%s,colour\n2,1,2,2,1,none,none,red\n' "$header" >"$WORK/unknown_column.csv"
  printf '%s\n5,1,2,2,1,none,none\n' "$header" >"$WORK/bad_stage.csv"
  printf '%s\n2,1,2,2,1,sometimes,none\n' "$header" >"$WORK/bad_checkpointing.csv"
  local pids=() name
  # Three failing jobs at once (each sbatch --wait polls).
  for name in unknown_column bad_stage bad_checkpointing; do
    sbatch --wait --job-name="$name" "${CPU_NODE[@]}" --ntasks-per-node=2 --array=1-1 \
      --output="$WORK/$name.log" "$SRC/slurm/sweep.sh" "$WORK/$name.csv" >/dev/null 2>&1 &
    pids+=($!)
  done
  CUDA_VISIBLE_DEVICES=0,1 ZEROTRAIN_BACKEND=cuda sbatch --wait --job-name=gpu_mismatch \
    "${CPU_NODE[@]}" --ntasks-per-node=4 --output="$WORK/gpu_mismatch.log" \
    "$SRC/slurm/zero3_4gpu.sh" >/dev/null 2>&1 &
  pids+=($!)
  local pid
  for pid in "${pids[@]}"; do
    if wait "$pid"; then fail "a job with bad input succeeded (see $WORK/*.log)"; fi
  done
  expect_message "unknown column" "$WORK/unknown_column.log" "unknown column 'colour'"
  expect_message "bad stage" "$WORK/bad_stage.log" "line 2: stage must be 0, 1, 2 or 3, got '5'"
  expect_message "bad checkpointing" "$WORK/bad_checkpointing.log" \
    "checkpointing must be none, selective, full or every:K, got 'sometimes'"
  expect_message "GPU mismatch" "$WORK/gpu_mismatch.log" \
    "GPU count mismatch: 2 GPU(s) per node but 4 task(s) per node"

  if env -u SLURM_JOB_ID bash "$SRC/slurm/zero3_4gpu.sh" >"$WORK/outside.log" 2>&1; then
    fail "the script ran outside Slurm"
  fi
  expect_message "outside Slurm" "$WORK/outside.log" "submit it with sbatch (no SLURM_JOB_ID)"

  mkdir -p "$WORK/empty" "$WORK/foreign"
  echo "not a run" >"$WORK/foreign/notes.txt"
  if "$BIN" report "$WORK/empty" --out "$WORK/r1" >"$WORK/empty.log" 2>&1; then
    fail "report accepted an empty directory"
  fi
  expect_message "report over an empty dir" "$WORK/empty.log" "'$WORK/empty' is empty"
  if "$BIN" report "$WORK/foreign" --out "$WORK/r2" >"$WORK/foreign.log" 2>&1; then
    fail "report accepted a foreign directory"
  fi
  expect_message "report over a foreign dir" "$WORK/foreign.log" "'$WORK/foreign' has no run.json"
}

"case_$CASE"
note PASS
