#!/usr/bin/env bash
# gpu_session_dry_run (label mpi): bench/gpu_session.sh, the script a session with a lent GPU runs
# from the bundle, run here on the CPU backend with tiny presets, so that it cannot rot between
# GPU sessions. The pack is laid out as `gpu_session.sh --pack` lays it out (bundle tarball,
# zt_gpu_tests when the build has CUDA, bench/, inputs/); every part must produce its figures.
#   gpu_session_dry_run_test.sh MAKE_BUNDLE ZEROTRAIN_BINARY SOURCE_DIR [ZT_GPU_TESTS]
# Exit 0 pass, 1 fail, 77 skip (patchelf not installed).
set -euo pipefail
fail() {
  printf '[gpu_session dry run] FAIL: %s\n' "$*" >&2
  exit 1
}
command -v patchelf >/dev/null || {
  echo "[gpu_session dry run] SKIP: patchelf is not installed" >&2
  exit 77
}
MAKE_BUNDLE=$(readlink -f "$1") BIN=$(readlink -f "$2") SRC=$(readlink -f "$3") GPU_TESTS=${4:-}
WORK=$(mktemp -d /tmp/zt-gpu-dry.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$MAKE_BUNDLE" "$BIN" "$WORK/bundle" >/dev/null || fail "make_bundle.sh failed"
mkdir "$WORK/pack"
tar -C "$WORK" -czf "$WORK/pack/zerotrain-bundle.tar.gz" bundle
rm -rf "$WORK/bundle"
cp -r "$SRC/bench" "$SRC/inputs" "$WORK/pack/"
if [ -n "$GPU_TESTS" ] && [ -x "$GPU_TESTS" ]; then cp "$GPU_TESTS" "$WORK/pack/"; fi
ZT_BACKEND=cpu ZT_PRESETS=tiny ZT_OFFLOAD_PRESET=tiny ZT_BIG_PRESET=tiny ZT_BIG_REFERENCE=1 \
  ZT_SEQ_LEN=32 ZT_STEPS=2 ZT_BIG_STEPS=2 ZT_MICRO_BATCH=2 \
  bash "$WORK/pack/bench/gpu_session.sh" --run "$WORK/pack" "$WORK/out" tests,train,offload,big \
  >"$WORK/run.log" 2>&1 || {
  cat "$WORK/run.log" >&2
  fail "gpu_session.sh --run exited non-zero"
}
summary=$WORK/out/summary.txt
cat "$summary" >&2
! grep -q "FAILED" "$summary" || fail "a part failed (summary above; logs: $WORK/out/*.log)"
for want in 'tiny stage 0 cpu: [0-9]* tokens/s' '^ 2 none ' '^ 2 optimizer cpu ' \
  'tiny stage 2 \+ full checkpointing \+ optimizer cpu \(cpu\): [0-9]* tokens/s' \
  'tiny stage 0 \+ full checkpointing, no offload \(cpu\): [0-9]* tokens/s'; do
  grep -Eq "$want" "$summary" || fail "summary has no line matching '$want'"
done
if [ -e "$WORK/pack/zt_gpu_tests" ]; then
  # No GPU here: every group must report the skip code, not a crash.
  [ "$(grep -c 'exit 77' "$summary")" -eq 7 ] || fail "zt_gpu_tests groups did not all skip (77)"
fi
echo "[gpu_session dry run] PASS" >&2
