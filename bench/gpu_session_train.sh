# The `train` part of bench/gpu_session.sh (sourced by it; it uses the session's say, step,
# train_run, same_losses and figures, and its B, backend, seq, steps, python, evidence and work):
# `train --backend cuda` for each preset of ZT_PRESETS, the rows its header lists.
# shellcheck shell=bash disable=SC2154  # the session script assigns B, backend, seq and the rest

# ran_attention KERNEL DIR [ACTIVATIONS]: whether the run in DIR finished its steps on the attention
# KERNEL (gemm | fused), with ACTIVATIONS storage when given (run.json, written before the first
# step, says what ran; metrics.jsonl that every step did).
ran_attention() {
  [ -f "$2/run.json" ] && [ -f "$2/metrics.jsonl" ] &&
    [ "$(wc -l <"$2/metrics.jsonl")" -ge "$steps" ] && "$python" -c 'import json, sys
c = json.load(open(sys.argv[1]))["config"]
ok = c.get("attention_kernel") == sys.argv[2] and sys.argv[3] in ("", c.get("activations"))
sys.exit(0 if ok else 1)' "$2/run.json" "$1" "${3:-}"
}

# same_bits_row PRESET NAME LABEL ARGS...: PRESET's stage-0 defaults with ARGS beside the defaults
# row, which they must not change: tokens/s, report.json, and the defaults' losses bit for bit.
same_bits_row() {
  local preset=$1 run="$work/train_${1}_s0_$2" label=$3
  shift 3
  train_run "$preset stage 0 defaults, $label $backend" "$run" --preset "$preset" \
    --zero-stage 0 --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" "$@"
  same_losses "$preset $label vs the defaults" "$work/train_${preset}_s0_defaults" "$run"
  cp "$run/report.json" "$evidence/runs/$(basename "$run")/" 2>/dev/null
}

# graphs_line LABEL REPORT: report.json's cuda_graphs on one summary line (whether they ran, and
# why not; micro-batches replayed and op by op).
graphs_line() {
  local line
  line=$("$python" -c 'import json, sys
g = json.load(open(sys.argv[1])).get("cuda_graphs")
if g is None:
    print("no cuda_graphs in report.json")
else:
    state = "on" if g["on"] else "off (%s)" % g["off_reason"]
    failed = g.get("failed_recordings", 0)
    print("%s; %d micro-batches replayed, %d op by op, %d recorded, %d dropped%s" % (
        state, g["replayed_micro_batches"], g["eager_micro_batches"], g["recorded"],
        g["dropped"], "; %d recording(s) failed, the last: %s" % (failed, g["last_failure"])
        if failed else ""))' "$2" 2>/dev/null) || line="no report.json"
  say "$1: graphs $line"
}

run_part_train() {
  local preset
  for preset in ${ZT_PRESETS:-125m 1b}; do
    # The defaults first (on CUDA: --attention auto, bf16 activations), as a user's run gets them.
    train_run "$preset stage 0 defaults $backend" "$work/train_${preset}_s0_defaults" \
      --preset "$preset" --zero-stage 0 --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" \
      --seq-len "$seq"
    train_run "$preset stage 0 $backend" "$work/train_${preset}_s0" --preset "$preset" \
      --zero-stage 0 --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" \
      --attention gemm --activations fp32
    # The fused attention (cuDNN SDPA) beside it: same seed, so the losses compare.
    if [ "$backend" = cuda ]; then
      # cuBLASLt's algorithms timed on the run's own GEMMs (issue 43's lever): report.json's
      # tally.
      same_bits_row "$preset" gemm_timed "timed GEMM algorithms" --gemm-algorithms timed
      # Each micro-batch's passes recorded once and replayed (issue 43's "CUDA graphs where
      # launches show up"): report.json's cuda_graphs (on, and micro-batches replayed).
      same_bits_row "$preset" graphs "--cuda-graphs on" --cuda-graphs on
      graphs_line "$preset --cuda-graphs on" "$work/train_${preset}_s0_graphs/report.json"
      # --deterministic false (cuDNN's attention backward with atomic dQ, no dP workspace) beside
      # the defaults: tokens/s and peak memory; the losses differ in their low bits.
      train_run "$preset stage 0 defaults, --deterministic false $backend" \
        "$work/train_${preset}_s0_nondeterministic" --preset "$preset" --zero-stage 0 \
        --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" \
        --deterministic false
      # Compared only where both ran fused: the flag changes the fused backward alone (and on
      # Blackwell the defaults cannot run it; a failed run has its FAILED line above).
      if ran_attention fused "$work/train_${preset}_s0_defaults" &&
        ran_attention fused "$work/train_${preset}_s0_nondeterministic"; then
        same_losses "$preset --deterministic false vs the defaults (expected to differ)" \
          "$work/train_${preset}_s0_defaults" "$work/train_${preset}_s0_nondeterministic"
      else
        say "$preset --deterministic false: not compared (a run failed, or one ran gemm: run.json)"
      fi
      cp "$work/train_${preset}_s0_nondeterministic/report.json" \
        "$evidence/runs/train_${preset}_s0_nondeterministic/" 2>/dev/null
      train_run "$preset stage 0 fused attention $backend" "$work/train_${preset}_s0_fused" \
        --preset "$preset" --zero-stage 0 --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" \
        --seq-len "$seq" --attention fused --activations fp32
      # The fast path: fused attention with bf16 activations (half the activation memory),
      # unless the defaults row above already ran exactly that (its run.json says what ran).
      if ran_attention fused "$work/train_${preset}_s0_defaults" bf16; then
        say "$preset stage 0 fused attention + bf16 activations: the defaults row above"
      else
        train_run "$preset stage 0 fused attention + bf16 activations $backend" \
          "$work/train_${preset}_s0_fused_bf16" --preset "$preset" --zero-stage 0 \
          --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" \
          --attention fused --activations bf16
      fi
    fi
    # fp16 with the dynamic loss scaler (V100/T4-class path) on its defaults: fp16 activations
    # and --attention auto (cuDNN's fp16 graph where it runs); loss_scale and skipped per step in
    # its metrics. (The 2026-11-27 H100 session ran this row with --attention gemm.)
    train_run "$preset stage 0 fp16 defaults $backend" "$work/train_${preset}_s0_fp16" \
      --preset "$preset" --zero-stage 0 --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" \
      --seq-len "$seq" --precision fp16
    train_run "$preset stage 3 + full checkpointing $backend" "$work/train_${preset}_s3" \
      --preset "$preset" --zero-stage 3 --activation-checkpointing full --steps "$steps" \
      --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" --attention gemm --activations fp32
    # Selective checkpointing (the norms and SwiGLU recomputed, the GEMM outputs kept) at stage 3
    # on the defaults: issue 43's 1b target row.
    train_run "$preset stage 3 + selective checkpointing defaults $backend" \
      "$work/train_${preset}_s3_selective" --preset "$preset" --zero-stage 3 \
      --activation-checkpointing selective --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" \
      --seq-len "$seq"
    # LoRA r 16 on every projection beside the stage-0 defaults row above (full fine-tuning):
    # issue 44's target (>= 1.3x its tokens/s, under half its peak memory).
    train_run "$preset stage 0 LoRA r16 all-linear defaults $backend" \
      "$work/train_${preset}_s0_lora16" --preset "$preset" --zero-stage 0 --steps "$steps" \
      --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq" --lora-rank 16 --lora-alpha 32 \
      --lora-targets all-linear
    if [ "$backend" = cuda ]; then
      train_run \
        "$preset stage 3 + full checkpointing, fused attention + bf16 activations $backend" \
        "$work/train_${preset}_s3_fused_bf16" --preset "$preset" --zero-stage 3 \
        --activation-checkpointing full --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" \
        --seq-len "$seq" --attention fused --activations bf16
    fi
  done
}
