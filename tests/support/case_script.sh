# shellcheck shell=bash
# Sourced by the test scripts that take "CASE SOURCE_DIR ZEROTRAIN_BINARY [...]"
# (tests/world_invariant, tests/multinode): sets CASE, SRC, BIN, PY (Debian's python3, which has
# h5py), a work directory WORK removed on exit (prefix $1), Open MPI as root with one OpenMP
# thread per rank, and fail MESSAGE (exit 1). The caller has done `set -euo pipefail`.
#   source tests/support/case_script.sh PREFIX "$@"
ZT_CASE_PREFIX=${1:?work directory prefix}
shift
CASE=${1:?case}
SRC=${2:?source dir}
BIN=${3:?zerotrain binary}
PY=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/$ZT_CASE_PREFIX.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
