# The `profile` part of bench/gpu_session.sh (sourced by it; it uses the session's say, step,
# train_run and pack_evidence, and its B, backend, dir, evidence, python, seq, step_seconds,
# summary and work).
# shellcheck shell=bash disable=SC2154  # the session script assigns B, backend, seq and the rest

# Kernel-time profiles (train --profile-steps, CUPTI): each preset of ZT_PROFILE_PRESETS (default
# "125m 1b"; set and empty for none) on its stage-0 defaults, steps 3..5 of 6 recorded; then each configuration of
# ZT_PROFILE_CONFIGS (default "Llama-3.2-1B": configs/ of the pack, initialised at random), whose
# Llama-3 vocabulary (V = 128256) makes the head a fifth of the FLOPs (its chunk size:
# bench/GPU_NOTES.md, "Head chunks sized for the weight gradient"); and each preset of
# ZT_PROFILE_NONDETERMINISTIC (default "1b") with --deterministic false, and each of
# ZT_PROFILE_GRAPHS (default "125m") with --cuda-graphs on. kernel_profile.json into the
# evidence and one line of shares per run into the summary. CUDA only.
profile_run() {  # profile_run NAME OUTDIR MODEL-ARGS...
  local name=$1 run=$2
  shift 2
  train_run "$name stage 0 defaults, kernel profile $backend" "$run" "$@" \
    --zero-stage 0 --steps 6 --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" \
    --profile-steps 3:5
  if [ ! -f "$run/kernel_profile.json" ]; then
    say "$name kernel profile: none written"
    return
  fi
  cp "$run/kernel_profile.json" "$evidence/runs/$(basename "$run")/"
  "$python" - "$name" "$run/kernel_profile.json" <<'PY' | tee -a "$summary"
import json, sys
p = json.load(open(sys.argv[2]))
shares = ", ".join(f"{k} {100 * v['share']:.1f}%" for k, v in p["categories"].items())
print(f"{sys.argv[1]} kernel profile: {p['per_step_ms']:.1f} ms/step; {shares}; "
      f"{p['distinct_kernels']} kernels, dropped {p['dropped_records']}")
sizes = ", ".join(f"{b['from_us']:g}-{b['to_us']:g} us" if b["to_us"] is not None
                  else f">= {b['from_us']:g} us" for b in p.get("idle_gap_sizes", []))
if sizes:
    print(f"  idle by gap length ({sizes}): " + ", ".join(
        f"{b['ms'] / p['steps']:.3f} ms in {b['count'] / p['steps']:.0f}"
        for b in p["idle_gap_sizes"]) + " a step")
for g in p.get("idle_gaps", [])[:5]:
    steps = p["steps"]
    print(f"  idle {g['ms'] / steps:.3f} ms/step in {g['count'] / steps:.1f} gap(s)/step: "
          f"{g['after'][:70]} -> {g['before'][:70]}")
PY
  pack_evidence
}

run_part_profile() {
  local preset config
  if [ "$backend" != cuda ]; then
    say "profile: skipped (the kernel profiler needs the CUDA backend)"
    return 0
  fi
  for preset in ${ZT_PROFILE_PRESETS-125m 1b}; do
    profile_run "$preset" "$work/profile_${preset}" --preset "$preset"
  done
  # The same with --deterministic false for each preset of ZT_PROFILE_NONDETERMINISTIC (default
  # "1b"; set and empty for none): the attention backward's kernels without dP in cuDNN's
  # workspace (bench/GPU_NOTES.md's prediction: no matmul_dq).
  for preset in ${ZT_PROFILE_NONDETERMINISTIC-1b}; do
    profile_run "$preset --deterministic false," "$work/profile_${preset}_nondeterministic" \
      --preset "$preset" --deterministic false
  done
  # The same with --cuda-graphs on for each preset of ZT_PROFILE_GRAPHS (default "125m"; set and
  # empty for none): where the idle between kernels goes when a pass is one launch
  # (bench/GPU_NOTES.md, "CUDA graphs").
  for preset in ${ZT_PROFILE_GRAPHS-125m}; do
    profile_run "$preset --cuda-graphs on," "$work/profile_${preset}_graphs" \
      --preset "$preset" --cuda-graphs on
  done
  for config in ${ZT_PROFILE_CONFIGS-Llama-3.2-1B}; do
    if ! step "$config init" "$step_seconds" "$B/libexec/zerotrain" init --config-json \
      "$dir/configs/$config.json" --seed 1 --out "$work/model_$config" --overwrite; then
      say "$config init: FAILED"
      continue
    fi
    profile_run "$config" "$work/profile_$config" --model "$work/model_$config"
    rm -rf "$work/model_$config"
  done
}
