# The `big` part of bench/gpu_session.sh (sourced by it; it uses the session's say, step,
# train_run and figures, and its B, backend, seq, steps, python, summary and work): 6b with and
# without optimizer offload, each micro-batch from `estimate --max-micro-batch`, and 1b's
# micro-batch-1 losses with and without offload compared.
# shellcheck shell=bash disable=SC2154  # the session script assigns B, backend, seq and the rest

# Host bytes the offloaded run needs (zerotrain estimate), against MemAvailable. Without the
# overlap's kept copy: the run's --offload-optimizer-overlap auto fits that in what is left.
host_memory_suffices() {
  local preset=$1 need avail
  need=$(timeout 60 "$B/libexec/zerotrain" estimate --preset "$preset" --world 1 --zero-stage 2 \
    --micro-batch 1 --seq-len "$seq" --activation-checkpointing full --offload-optimizer cpu \
    --offload-optimizer-overlap off --backend "$backend" --json | "$python" -c 'import json, sys
j = json.load(sys.stdin)
print(max(s["host"] for s in j["stages"] if s["stage"] == 2))') || return 1
  avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
  say "big: host memory needed $((need >> 30)) GiB (estimate), available $((avail >> 30)) GiB"
  [ "$((need + (8 << 30)))" -le "$avail" ]
}

# The GPU's memory in GiB (nvidia-smi's total), ZT_BIG_DEVICE_GIB where given (the CPU dry
# run); empty where there is neither.
gpu_memory_gib() {
  local mib
  if [ -n "${ZT_BIG_DEVICE_GIB:-}" ]; then
    echo "$ZT_BIG_DEVICE_GIB"
    return
  fi
  mib=$(timeout 60 nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null |
    head -n 1)
  [ -n "$mib" ] && echo $((mib / 1024))
}

# big_micro_batch PRESET STAGE CHECKPOINTING [ESTIMATE ARGS...]: the largest micro-batch
# `estimate --max-micro-batch` fits at that stage with that activation checkpointing in 90% of the
# GPU's memory (the rest for the CUDA context and fragmentation), capped by ZT_BIG_MAX_MICRO_BATCH
# (default 16); 1 where estimate cannot say.
big_micro_batch() {
  local preset=$1 stage=$2 checkpointing=$3 gib mb cap=${ZT_BIG_MAX_MICRO_BATCH:-16}
  shift 3
  [ "$cap" -ge 1 ] 2>/dev/null || cap=1
  gib=$(gpu_memory_gib)
  [ -n "$gib" ] && gib=$((gib * 9 / 10))
  [ "${gib:-0}" -ge 1 ] 2>/dev/null || gib=${gib:+1}
  mb=$(timeout 60 "$B/libexec/zerotrain" estimate --preset "$preset" --world 1 \
    --zero-stage "$stage" --seq-len "$seq" --activation-checkpointing "$checkpointing" \
    --backend "$backend" ${gib:+--device-memory-gib "$gib"} --max-micro-batch --json "$@" |
    "$python" -c 'import json, sys
stage = int(sys.argv[1])
rows = [r for r in json.load(sys.stdin).get("max_micro_batch", []) if r["stage"] == stage]
print(rows[0]["micro_batch"] if rows and rows[0]["micro_batch"] else 1)' "$stage") || mb=1
  [ "$mb" -ge 1 ] 2>/dev/null || mb=1
  echo $((mb < cap ? mb : cap))
}

# big_run LABEL DIR PRESET STAGE CHECKPOINTING [ARGS...]: a run with the recipe the offload spike
# asked for: micro-batch from big_micro_batch, at least 8192 tokens per step (grad-accum), lr 3e-5
# with a linear warmup; its losses on one summary line.
big_run() {
  local label=$1 run=$2 preset=$3 stage=$4 checkpointing=$5 mb accum
  shift 5
  mb=$(big_micro_batch "$preset" "$stage" "$checkpointing" "$@")
  accum=$(((8192 + mb * seq - 1) / (mb * seq)))
  train_run "$label, micro-batch $mb x $accum" "$run" --preset "$preset" --zero-stage "$stage" \
    --activation-checkpointing "$checkpointing" --micro-batch "$mb" --grad-accum "$accum" \
    --seq-len "$seq" --steps "${ZT_BIG_STEPS:-6}" --lr 3e-5 --warmup-steps 2 "$@"
  say "$label losses: $(losses_of "$run/metrics.jsonl")"
}

# 6b (issue 43's "6b without offload", issue 48's "6b with offload"): the offloaded run at stage 2
# where host memory allows; without offload at stages 0 and 2 where the GPU holds it (an H200);
# then 1b at micro-batch 1 with and without offload, whose losses must be the same.
run_part_big() {
  local preset=${ZT_BIG_PRESET:-6b} small=${ZT_OFFLOAD_PRESET:-1b} stage offload
  timeout 60 "$B/libexec/zerotrain" estimate --preset "$preset" --world 1 --zero-stage 2 \
    --micro-batch 1 --seq-len "$seq" --activation-checkpointing full --offload-optimizer cpu \
    --backend "$backend" | tee -a "$summary"
  if host_memory_suffices "$preset"; then
    big_run "$preset stage 2 + full checkpointing + optimizer cpu ($backend)" "$work/big" \
      "$preset" 2 full --offload-optimizer cpu
  else
    say "big: skipped the offloaded run (host memory, above, leaves less than 8 GiB spare)"
  fi
  if [ "${ZT_BIG_REFERENCE:-0}" = 1 ] || [ "$(gpu_memory_gib)" -ge 120 ] 2>/dev/null; then
    # An H200 (141 GB), not an H100 (80 GB): 6b's states alone are about 100 GiB. Selective
    # checkpointing (ZT_BIG_CHECKPOINTING): MFU leaves recompute out, and full checkpointing's
    # extra forward would cap it at about 3/4 of the device's rate; on 125 GiB the estimate fits
    # 4 sequences of 2048 at stage 0 with it (3 without any, 21 with full).
    local checkpointing=${ZT_BIG_CHECKPOINTING:-selective}
    for stage in 0 2; do
      big_run "$preset stage $stage + $checkpointing checkpointing, no offload ($backend)" \
        "$work/big_s$stage" "$preset" "$stage" "$checkpointing"
    done
  fi
  # fp32 gradient copies: the bitwise mode (auto would copy in bf16 on a GPU: other losses).
  for offload in none cpu; do
    train_run "$small stage 2 micro-batch 1, optimizer $offload ($backend)" \
      "$work/big_mb1_$offload" --preset "$small" --zero-stage 2 --micro-batch 1 --seq-len "$seq" \
      --steps "$steps" --offload-optimizer "$offload" --offload-gradient-copies fp32
  done
  same_losses "big: $small micro-batch 1 with and without optimizer offload" \
    "$work/big_mb1_none" "$work/big_mb1_cpu"
}
