#!/usr/bin/env bash
# GPU validation and figures for issues 6 and 8 in as few device calls as possible, run from the
# relocatable bundle (the lent GPU host has the CUDA toolkit and NCCL but not the Debian
# packages zerotrain links: Open MPI, HDF5, OpenBLAS, Boost).
#
#   here:   bench/gpu_session.sh --pack .gpu
#           builds the bundle and zt_gpu_tests, puts them with bench/ under .gpu (add .gpu to
#           .git/info/exclude; about 26 MiB to carry)
#   there:  bash .gpu/bench/gpu_session.sh --run .gpu "$OUT" PARTS
#           PARTS, comma-separated (default tests,train): each part fits one 10-minute call
#     tests    nvidia-smi, bench_gpu_ceilings (copy GB/s; GEMM TFLOP/s, square and the presets'
#              shapes), then zt_gpu_tests by group (kernels, gemm_attention, engine, comm) and
#              the groups with 2 ranks sharing the GPU, under the bundle's mpirun
#     train    `train --backend cuda` for each preset of ZT_PRESETS (default "125m 1b") at stage 0:
#              tokens/s, TFLOP/s, MFU, peak device memory (mean of the steps after the first)
#     offload  bench_offload.py for ZT_OFFLOAD_PRESET (default 1b): no offload vs optimizer cpu
#     big      ZT_BIG_PRESET (default 6b) on one GPU, stage 2, full activation checkpointing,
#              optimizer offload to cpu (DeepSpeed's single-GPU 6B recipe): the same figures plus
#              host memory; then, on a GPU with >= 120 GB (or ZT_BIG_REFERENCE=1), the same
#              model without offload at stage 0 as the throughput reference
# Every part logs to OUT/<part>.log and appends its figures to OUT/summary.txt; a failing part
# does not stop the next one. ZT_BACKEND=cpu ZT_PRESETS=tiny ZT_OFFLOAD_PRESET=tiny
# ZT_BIG_PRESET=tiny runs the same steps on a CPU host (a dry run of this script).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

pack() {
  local dest=$1 root
  root=$(cd "$here/.." && pwd)
  cmake --build "$root/build" --target bundle zt_gpu_tests bench_gpu_ceilings -j "$(nproc)" || exit 1
  rm -rf "$dest" && mkdir -p "$dest"
  tar -C "$root/build" -czf "$dest/zerotrain-bundle.tar.gz" bundle || exit 1
  cp "$root/build/tests/gpu/zt_gpu_tests" "$root/build/bench_gpu_ceilings" "$dest/" || exit 1
  cp -r "$root/bench" "$root/inputs" "$dest/" || exit 1
  du -sh "$dest"
}

# CUDA runtime, cuBLASLt and NCCL on the GPU host: the toolkit's lib64 and pip's nvidia-* wheels.
cuda_library_path() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && dirs+=("$d")
  done
  # pip's nvidia-nccl-cu13 / nvidia-cublas wheels (PyTorch's), else a search of the root fs.
  while IFS= read -r d; do [ -d "$d" ] && dirs+=("$d"); done < <(
    python3 - 2>/dev/null <<'PY'
import importlib, os
for name in ("nvidia.nccl", "nvidia.cublas", "nvidia.cuda_runtime"):
    try:
        for p in importlib.import_module(name).__path__:
            print(os.path.join(p, "lib"))
    except Exception:
        pass
PY
  )
  local have_nccl=0
  for d in "${dirs[@]}"; do [ -e "$d/libnccl.so.2" ] && have_nccl=1; done
  if [ "$have_nccl" = 0 ]; then
    while IFS= read -r d; do dirs+=("$(dirname "$d")"); done < <(
      find / -xdev \( -name 'libnccl.so.2' -o -name 'libcublasLt.so.13' \) 2>/dev/null | head -n 4)
  fi
  local IFS=:
  echo "${dirs[*]}"
}

# Mean figures of metrics.jsonl over the steps after the first: one summary line.
figures() {
  local label=$1 metrics=$2
  python3 - "$label" "$metrics" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
steps = [json.loads(l) for l in open(path)]
timed = steps[1:] or steps
mean = lambda f: sum(f(s) for s in timed) / len(timed)
gib = 1024.0 ** 3
device = max(sum(v for k, v in s["peak_memory_bytes"].items() if k not in ("host", "nvme"))
             for s in steps)
host = max(s["peak_memory_bytes"].get("host", 0) for s in steps)
mfu = mean(lambda s: s["mfu"] or 0.0)
print(f"{label}: {mean(lambda s: s['tokens_per_s']):.0f} tokens/s, "
      f"{mean(lambda s: s['tflops_per_device']):.1f} TFLOP/s per device, MFU {100 * mfu:.1f}%, "
      f"step {mean(lambda s: s['step_time_s']):.3f} s, loss {steps[-1]['loss']:.4f}, peak device "
      f"{device / gib:.2f} GiB, host {host / gib:.2f} GiB ({len(steps)} steps)")
PY
}

run_part_tests() {
  nvidia-smi || true
  # The copy and GEMM ceilings the training figures are read against (bench_gpu_ceilings.cpp).
  if [ -x "$dir/bench_gpu_ceilings" ]; then
    echo "== bench_gpu_ceilings"
    "$dir/bench_gpu_ceilings" >"$work/ceilings.txt" 2>&1
    local rc=$?
    cat "$work/ceilings.txt"
    { echo "bench_gpu_ceilings: exit $rc"; cat "$work/ceilings.txt"; } >>"$summary"
  fi
  local t=$dir/zt_gpu_tests group
  if [ ! -x "$t" ]; then
    echo "zt_gpu_tests: absent (a build without CUDA)" | tee -a "$summary"
    return
  fi
  for group in 'CudaKernels.*' '*CudaGemm.*:*CudaAttention.*' 'CudaEngine.*' 'NcclComm.*:StagedComm.*'; do
    echo "== zt_gpu_tests --gtest_filter=$group"
    "$t" --gtest_filter="$group" --gtest_brief=1
    echo "$group: exit $?" >>"$summary"
  done
  for group in 'StagedComm.*' 'CudaEngineShared.*' 'CudaEngineNccl.*'; do
    echo "== mpirun -np 2 zt_gpu_tests --gtest_filter=$group"
    "$B/bin/mpirun" --oversubscribe -np 2 -x LD_LIBRARY_PATH "$t" --gtest_filter="$group" \
      --gtest_brief=1
    echo "np2 $group: exit $?" >>"$summary"
  done
}

train_run() {  # train_run LABEL OUTDIR ARGS...
  local label=$1 out=$2
  shift 2
  rm -rf "$out"
  echo "== $label: zerotrain train $*"
  if "$B/bin/zerotrain" train --backend "$backend" --data "$data" --out "$out" --log-every 1 \
    --seed 1 "$@"; then
    figures "$label" "$out/metrics.jsonl" | tee -a "$summary"
  else
    echo "$label: FAILED (exit $?)" | tee -a "$summary"
  fi
}

run_part_train() {
  local preset
  for preset in ${ZT_PRESETS:-125m 1b}; do
    train_run "$preset stage 0 $backend" "$work/train_$preset" --preset "$preset" --zero-stage 0 \
      --steps "$steps" --micro-batch "${ZT_MICRO_BATCH:-4}" --seq-len "$seq"
  done
}

run_part_offload() {
  python3 "$dir/bench/bench_offload.py" --zerotrain "$B/bin/zerotrain" --mpirun "$B/bin/mpirun" \
    --backend "$backend" --preset "${ZT_OFFLOAD_PRESET:-1b}" --steps "$steps" --seq-len "$seq" \
    --micro-batch "${ZT_MICRO_BATCH:-4}" --threads "$(nproc)" --rows none,opt-cpu \
    --data "$dir/inputs/data/sample.txt" | tee -a "$summary"
}

run_part_big() {
  local preset=${ZT_BIG_PRESET:-6b}
  "$B/bin/zerotrain" estimate --preset "$preset" --world 1 --zero-stage 2 --micro-batch 1 \
    --seq-len "$seq" --activation-checkpointing full --offload-optimizer cpu | tee -a "$summary"
  train_run "$preset stage 2 + full checkpointing + optimizer cpu ($backend)" "$work/big" \
    --preset "$preset" --zero-stage 2 --activation-checkpointing full --offload-optimizer cpu \
    --steps "${ZT_BIG_STEPS:-4}" --micro-batch 1 --seq-len "$seq"
  # The no-offload reference where it fits (6b: ~102 GiB, an H200 but not an H100).
  local mib
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
  if [ "${ZT_BIG_REFERENCE:-0}" = 1 ] || [ "${mib:-0}" -ge 120000 ]; then
    train_run "$preset stage 0 + full checkpointing, no offload ($backend)" "$work/big_ref" \
      --preset "$preset" --zero-stage 0 --activation-checkpointing full \
      --steps "${ZT_BIG_STEPS:-4}" --micro-batch 1 --seq-len "$seq"
  fi
}

case "${1:-}" in
  --pack)
    pack "${2:?--pack DIR}"
    exit 0
    ;;
  --run) ;;
  *)
    echo "usage: $0 --pack DIR | --run DIR OUT [tests,train,offload,big]" >&2
    exit 2
    ;;
esac

dir=$(cd "${2:?--run DIR}" && pwd)
out=${3:?--run DIR OUT}
parts=${4:-tests,train}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
work=$(mktemp -d /tmp/zt-gpu-session.XXXXXX)
backend=${ZT_BACKEND:-cuda}
steps=${ZT_STEPS:-6}
seq=${ZT_SEQ_LEN:-2048}
tar -C "$work" -xzf "$dir/zerotrain-bundle.tar.gz" || exit 1
B=$work/bundle
export LD_LIBRARY_PATH="$B/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
data=$work/data.h5
"$B/bin/zerotrain" prepare-data --text "$dir/inputs/data/sample.txt" --out "$data" >/dev/null ||
  exit 1
echo "gpu_session $(date -u +%FT%TZ) parts=$parts backend=$backend" >>"$summary"
for part in ${parts//,/ }; do
  case $part in
    tests | train | offload | big) "run_part_$part" >"$out/$part.log" 2>&1 ;;
    *) echo "unknown part '$part'" | tee -a "$summary" ;;
  esac
done
rm -rf "$work"
cat "$summary"
