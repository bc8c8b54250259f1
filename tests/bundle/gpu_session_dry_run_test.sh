#!/usr/bin/env bash
# gpu_session_dry_run (label mpi): bench/gpu_session.sh, the script a session with a lent GPU runs,
# packed by its own --pack (from what is built) and run here on the CPU backend with tiny
# presets, every part, so that it cannot rot between GPU sessions. Where a private mount
# namespace is allowed (root), the run happens with the system copies of Open MPI, PMIx, HDF5 and
# Boost hidden, as on a GPU host without those Debian packages: a binary run outside the
# bundle or without its env.sh then fails here, not there (a negative control shows the raw
# build binary no longer starts). Checks: the preflight's ldd, every part's figures, the exit
# codes of the GPU test groups (77: no GPU here), no step failed or timed out, every train run has
# --comm-timeout 60, and OUT holds at most 8 files, the evidence tarball among them.
#   gpu_session_dry_run_test.sh BUILD_DIR SOURCE_DIR
# Exit 0 pass, 1 fail, 77 skip (patchelf not installed).
set -euo pipefail
fail() {
  printf '[gpu_session dry run] FAIL: %s\n' "$*" >&2
  exit 1
}
note() { printf '[gpu_session dry run] %s\n' "$*" >&2; }
HERE=$(dirname "$(readlink -f "$0")")

run_session() {  # run_session PACK OUT
  ZT_BACKEND=cpu ZT_PRESETS=tiny ZT_PYTORCH_PRESET=tiny ZT_OFFLOAD_PRESET=tiny ZT_BIG_PRESET=tiny \
    ZT_MASKING_PRESET=tiny ZT_BIG_DEVICE_GIB=1 ZT_BIG_MAX_MICRO_BATCH=2 \
    ZT_BIG_REFERENCE=1 ZT_SEQ_LEN=32 ZT_STEPS=2 ZT_BIG_STEPS=2 ZT_MICRO_BATCH=2 \
    ZT_PYTHON=/usr/bin/python3 ZT_CALL_SECONDS=540 ZT_STEP_SECONDS=240 \
    bash "$1/bench/gpu_session.sh" --run "$1" "$2" \
    preflight,tests,sanitize,train,profile,pytorch,masking,offload,big
}

if [ "${1:-}" = "--hidden" ]; then  # inside `unshare -m`: hide, check the control, run
  PACK=$2 OUT=$3 WORK=$4 RAW=$5
  # shellcheck source=hide_system_copies.sh
  . "$HERE/hide_system_copies.sh"
  tar -C "$WORK" -xzf "$PACK/zerotrain-bundle.tar.gz" bundle/MANIFEST
  # Open MPI, PMIx, hwloc, libevent, HDF5 and Boost: the Debian packages the GPU host lacks (the
  # system python's torch needs OpenBLAS and zlib, which that host has in its own forms).
  hidden=$(hide_system_copies "$WORK/bundle" "$WORK" \
    'libmpi|libopen-|libompi|libmca|libpmix|libhwloc|libevent|libhdf5|libboost|orterun|orted|ompi_info') ||
    exit 1
  if "$RAW" --version >/dev/null 2>&1; then
    fail "negative control: $RAW still starts with the system copies hidden"
  fi
  note "hidden: $hidden; the unbundled $RAW no longer starts"
  run_session "$PACK" "$OUT"
  exit
fi

BUILD=$(readlink -f "${1:?build dir}") SRC=$(readlink -f "${2:?source dir}")
# The session runs the GPU test groups CMake defines (tests/gpu/CMakeLists.txt), each with the
# same filter: a suite added there and not here would never run on a lent GPU.
cmake_groups=$(grep -oE '"[a-z_]+=[^"]+"|zt_add_gpu_np2_test\([a-z_]+ "[^"]+"\)' \
  "$SRC/tests/gpu/CMakeLists.txt" | sed -E 's/^zt_add_gpu_np2_test\(([a-z_]+) "([^"]+)"\)$/\1_np2=\2/; s/"//g' |
  sort)
session_np2=$(sed -n '/^gpu_test_np2_groups=(/,/)$/p' "$SRC/bench/gpu_session.sh" |
  grep -oE "'[a-z_]+=[^']+'" | tr -d "'" | sed -E 's/^([a-z_]+)=/\1_np2=/')
session_one=$(sed -n '/^gpu_test_groups=(/,/)$/p' "$SRC/bench/gpu_session.sh" |
  grep -oE "'[a-z_]+=[^']+'" | tr -d "'")
session_groups=$(printf '%s\n%s\n' "$session_one" "$session_np2" | sort)
[ -n "$cmake_groups" ] || fail "no GPU test group found in tests/gpu/CMakeLists.txt"
[ "$cmake_groups" = "$session_groups" ] || {
  diff <(echo "$cmake_groups") <(echo "$session_groups") >&2 || true
  fail "bench/gpu_session.sh's GPU test groups differ from tests/gpu/CMakeLists.txt's (< CMake, > session)"
}
command -v patchelf >/dev/null || {
  note "SKIP: patchelf is not installed"
  exit 77
}
WORK=$(mktemp -d /tmp/zt-gpu-dry.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ZT_BUILD_DIR=$BUILD ZT_PACK_NO_BUILD=1 bash "$SRC/bench/gpu_session.sh" --pack "$WORK/pack" \
  >"$WORK/pack.log" 2>&1 || {
  cat "$WORK/pack.log" >&2
  fail "gpu_session.sh --pack failed"
}
gpu_tests=0
listing=$(tar -tzf "$WORK/pack/zerotrain-bundle.tar.gz") || fail "the packed bundle cannot be listed"
if grep -q '^bundle/libexec/zt_gpu_tests$' <<<"$listing"; then
  gpu_tests=1
fi
if unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private "$0" --hidden "$WORK/pack" "$WORK/out" "$WORK" \
    "$BUILD/zerotrain" >"$WORK/run.log" 2>&1 || {
    cat "$WORK/run.log" >&2
    fail "gpu_session.sh --run (system copies hidden) exited non-zero"
  }
else
  note "no private mount namespace here (needs root): running with the system copies visible"
  run_session "$WORK/pack" "$WORK/out" >"$WORK/run.log" 2>&1 || {
    cat "$WORK/run.log" >&2
    fail "gpu_session.sh --run exited non-zero"
  }
fi
grep '^\[gpu_session dry run\]' "$WORK/run.log" >&2 || true
summary=$WORK/out/summary.txt
cat "$summary" >&2
! grep -Eq "FAILED|TIMED OUT|skipped \(the call" "$summary" ||
  fail "a step failed or timed out (summary above)"
wants=('^preflight: ldd finds every library of the bundle' '^commit: [0-9a-f]{40}'
  'tiny stage 0 defaults cpu: [0-9]* tokens/s' 'tiny stage 0 cpu: [0-9]* tokens/s' 'tiny stage 3 \+ full checkpointing cpu: [0-9]* tokens/s'
  '^ 2 none ' '^ 2 cpu, overlap ' '^ 2 cpu, fp32 copies ' '^ 2 cpu, no overlap ' '^ 2 cpu, delayed '
  'micro-batch 2, grad-accum 1, seq-len' 'micro-batch 2, grad-accum 4, seq-len'
  '^host copy bandwidth: ' '^big: host memory needed'
  '^best tokens/s: off [0-9.]+, on [0-9.]+; on/off [0-9.]+'
  'tiny stage 2 \+ full checkpointing \+ optimizer cpu \(cpu\), micro-batch 2 x 128: [0-9]* tokens/s'
  'tiny stage 0 \+ selective checkpointing, no offload \(cpu\), micro-batch 2 x 128: [0-9]* tokens/s'
  'tiny stage 2 \+ selective checkpointing, no offload \(cpu\), micro-batch 2 x 128: [0-9]* tokens/s'
  'tiny stage 0 \+ selective checkpointing, no offload \(cpu\) losses: [0-9.e+-]+ [0-9.e+-]+$'
  '^big: tiny micro-batch 1 with and without optimizer offload: losses identical \('
  'tiny stage 3 \+ selective checkpointing defaults cpu: [0-9]* tokens/s'
  '^profile: skipped \(the kernel profiler needs the CUDA backend\)')
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  wants+=('ratio zerotrain gemm / pytorch eager: [0-9.]+')
fi
if [ "$gpu_tests" = 1 ]; then
  for g in kernels gemm_attention engine comm fused_attention staged_comm_np2 engine_shared_np2 \
    engine_nccl_np2 nccl_comm_np2; do
    wants+=("^gpu_$g: exit 77\$")  # the skip code: no GPU here, and no crash
  done
  wants+=('^(memcheck gpu_kernels: exit 77$|sanitize: skipped)')
fi
for want in "${wants[@]}"; do
  grep -Eq "$want" "$summary" || fail "summary has no line matching '$want'"
done
# What comes back through the device tool's OUT: at most 8 files; the evidence tarball.
[ "$(find "$WORK/out" -type f | wc -l)" -le 8 ] || fail "more than 8 files in OUT"
tar -tzf "$WORK/out/evidence.tar.gz" >"$WORK/evidence.list" || fail "no evidence.tar.gz"
for want in evidence/summary.txt evidence/preflight.log evidence/train.log \
  evidence/runs/train_tiny_s0/metrics.jsonl evidence/runs/big/run.json; do
  grep -qx "$want" "$WORK/evidence.list" || fail "evidence.tar.gz has no $want"
done
tar -C "$WORK" -xzf "$WORK/out/evidence.tar.gz"
# The preflight holds zerotrain's own environment report, run from the relocated bundle.
grep -q '^zerotrain:$' "$WORK/evidence/preflight.log" &&
  grep -Eq '^  commit: [0-9a-f]{12}' "$WORK/evidence/preflight.log" &&
  grep -q '^libraries:$' "$WORK/evidence/preflight.log" ||
  fail "the preflight has no 'zerotrain info --env' report"
runs=$(cat "$WORK"/evidence/*.log | grep -E '^== .*zerotrain train ' || true)
[ -n "$runs" ] || fail "no train run in the logs"
if grep -v -- '--comm-timeout 60' <<<"$runs"; then fail "train runs without --comm-timeout 60"; fi
note "PASS ($(wc -l <<<"$runs") train runs, $(wc -l <"$WORK/evidence.list") files of evidence)"
