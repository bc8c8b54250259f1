#!/usr/bin/env bash
# kernel_fingerprint (label unit): zt_kernel_fingerprint, which `./run.sh test` trusts to skip a
# numeric variant that would run kernels already run, answers the same twice, follows
# ZT_CPU_ADAM_SIMD, and tells apart two OpenBLAS kernel sets that compute differently (Prescott's
# SSE3 kernels round without FMA; Haswell's use it), where the CPU can run both.
#   check_kernel_fingerprint.sh FINGERPRINT_BINARY
set -euo pipefail
probe=${1:?zt_kernel_fingerprint}
fail() {
  echo "kernel_fingerprint: FAIL: $*" >&2
  exit 1
}
first=$("$probe") || fail "$probe exited non-zero"
second=$("$probe")
echo "this environment: $first"
[[ $first =~ ^blas\ [0-9a-f]{16}\ adam\ (scalar|avx2|avx512)$ ]] || fail "malformed line '$first'"
[ "$first" = "$second" ] || fail "two runs differ: '$first' then '$second'"
scalar=$(ZT_CPU_ADAM_SIMD=scalar "$probe")
[ "${scalar##* }" = scalar ] || fail "ZT_CPU_ADAM_SIMD=scalar gave '$scalar'"
[ "${scalar% adam *}" = "${first% adam *}" ] || fail "the Adam cap changed the BLAS digest"
if ! grep -qw avx2 /proc/cpuinfo; then
  echo "this CPU has no AVX2: the Prescott/Haswell comparison is skipped"
  exit 0
fi
prescott=$(OPENBLAS_CORETYPE=Prescott "$probe")
haswell=$(OPENBLAS_CORETYPE=Haswell "$probe")
echo "Prescott: $prescott; Haswell: $haswell"
[ "${prescott% adam *}" != "${haswell% adam *}" ] ||
  fail "OpenBLAS's Prescott and Haswell kernels gave the same digest: the probe cannot see kernels"
echo "ok"
