#!/usr/bin/env bash
# GPU validation and figures in as few device calls as possible, run from the relocatable bundle
# (the lent GPU host has the CUDA toolkit and NCCL but not the Debian packages zerotrain links:
# Open MPI, HDF5, OpenBLAS, Boost).
#
#   here:   bench/gpu_session.sh --pack .gpu
#           a bundle of zerotrain, zt_gpu_tests and bench_gpu_ceilings (each with its libraries,
#           run with the bundle's env.sh), bench/, inputs/ and COMMIT under .gpu (add .gpu to
#           .git/info/exclude; about 30 MiB to carry)
#   there:  bash .gpu/bench/gpu_session.sh --run .gpu "$OUT" PARTS
#           PARTS, comma-separated (default preflight,tests,sanitize); preflight always runs first.
#           Measured (H100, 2026-11-28): preflight,tests,pytorch,train,sanitize took 514 s with
#           ZT_CALL_SECONDS=540 ZT_STEP_SECONDS=120 ZT_PYTORCH_SECONDS=210 ZT_SANITIZE_SECONDS=45;
#           offload 57 s; big 164 s (then 3 steps at micro-batch 1). Since then pytorch repeats
#           each row 3 times, train has 16 runs, and profile, masking and big's no-offload and
#           micro-batch-1 runs were added: all parts do not fit in 15 minutes of device time.
#           Measured (H100, 2026-12-06): preflight,tests,train,profile took 355 s with
#           ZT_CALL_SECONDS=520 ZT_STEP_SECONDS=120; pytorch with 100 s steps measured only
#           PyTorch eager, its compiled rows need steps of at least 300 s (compilation).
#           A plan, in the order of the open rows:
#             call 1  preflight,tests,train,profile   ZT_CALL_SECONDS=520 ZT_STEP_SECONDS=120
#             call 2  pytorch                          ZT_PRESETS=1b ZT_PYTORCH_PRESET=1b
#                                                      ZT_STEP_SECONDS=330
#                                                      ZT_PYTORCH_ROWS=,+nondeterministic,+graphs
#             call 3  offload,masking, then big (an H200 adds the no-offload 6b runs), then
#                     sanitize if time is left
#           calls issued within the 30 s the machine stays warm. A start costs about 40 s
#           and none begins under 4 minutes left: give each call ZT_CALL_SECONDS = the device
#           tool's budget_left_s minus 60, so that it ends its steps itself instead of being cut.
#     preflight  commit, GPU name, driver, memory, `free -g`, the library directories found,
#                `zerotrain info --env`,
#                compute-sanitizer and torch versions, and `ldd` of every bundled binary and
#                library (a "not found" fails the preflight)
#     tests      bench_gpu_ceilings (copy GB/s; GEMM TFLOP/s), then zt_gpu_tests by group
#                (kernels, gemm_attention, fused_attention, engine, comm) and the groups with
#                2 ranks sharing the GPU, under the bundle's mpirun
#                (ZT_TEST_GROUPS: a subset of those names and staged_comm, engine_shared,
#                engine_nccl, nccl_comm, the 2-rank ones, the NCCL ones skipped on one GPU;
#                default all, none for no group)
#     sanitize   compute-sanitizer --tool memcheck over the kernel, GEMM/attention, engine,
#                fused attention and comm groups, --tool racecheck over the kernel group (ZT_SANITIZE:
#                other TOOL:GROUP pairs, e.g. "racecheck:kernels memcheck:engine")
#     train      `train --backend cuda` for each preset of ZT_PRESETS (default "125m 1b"): stage
#                0 on the defaults (--attention auto, bf16 activations on CUDA), the same with
#                --gemm-algorithms timed (its losses compared bit for bit), with --cuda-graphs
#                on (the same), with --deterministic false (its losses beside the defaults'), GEMM attention
#                and fused with fp32 activations, fused + bf16, fp16 on its defaults; stage 3 with full activation
#                checkpointing (GEMM + fp32, and fused + bf16); tokens/s, TFLOP/s, MFU, peak device
#                memory (mean of the steps after the first)
#     profile    train --profile-steps 3:5 (CUPTI kernel times by GEMM, attention, pointwise,
#                cross-entropy, optimizer, communication, copies, idle) on the stage-0 defaults of
#                each of ZT_PROFILE_PRESETS (default "125m 1b") and of ZT_PROFILE_CONFIGS (default
#                "Llama-3.2-1B", its config.json initialised at random: Llama-3's vocabulary), and
#                each of ZT_PROFILE_NONDETERMINISTIC (default "1b") with --deterministic false,
#                each of ZT_PROFILE_GRAPHS (default "125m") with --cuda-graphs on; each
#                set and empty for none;
#                kernel_profile.json per run
#     pytorch    bench_gpu_vs_pytorch.py for each of ZT_PYTORCH_PRESET (default "125m 1b"),
#                seq 2048, micro-batch 4: PyTorch eager, torch.compile, max-autotune, and
#                max-autotune with bf16 params (ZT_PYTORCH_MODES: each row changes one thing
#                from the one before), cuDNN SDPA forced, each ZT_PYTORCH_REPEATS (3) times
#                in alternating order, medians, beside zerotrain on the same GPU; zerotrain's
#                rows are ZT_PYTORCH_ROWS (bench_gpu_vs_pytorch's
#                --attentions; on CUDA by default its defaults and the same with
#                --deterministic false and with --cuda-graphs on, and GEMM, fused and fused +
#                bf16 unless the train part times them in the same call)
#     masking    bench_document_masking.py for ZT_MASKING_PRESET (default 1b): tokens/s with document
#                masks on and off, on the fused and on the GEMM attention (named: auto keeps
#                masks on gemm until the fused path is validated, docs/gpu.md), on packed
#                200-800-token documents
#     offload    bench_offload.py for ZT_OFFLOAD_PRESET (default 1b): no offload vs optimizer cpu
#                (exact overlap; with bf16, then fp32 gradient copies), cpu without it and cpu with
#                the delayed update, at grad-accum 1 and 4
#     big        ZT_BIG_PRESET (default 6b) on one GPU, the micro-batch from `estimate
#                --max-micro-batch` for this GPU, >= 8192 tokens per step, lr 3e-5 after 2
#                warmup steps, each run's losses in the summary: stage 2 with full activation
#                checkpointing and optimizer offload to cpu if the host has the memory it pins
#                (checked first); on a GPU with >= 120 GB (or ZT_BIG_REFERENCE=1), stages 0 and 2
#                without offload, with ZT_BIG_CHECKPOINTING (default selective); then ZT_OFFLOAD_PRESET at micro-batch 1 with and without optimizer
#                offload (fp32 gradient copies), whose losses must be identical
# Every step runs under `timeout` (ZT_STEP_SECONDS, default 300; the PyTorch comparison, which
# holds up to fifteen runs per preset, ZT_PYTORCH_SECONDS, default the same) and within the call's budget
# (ZT_CALL_SECONDS, default 540, from the script's start): one hang cannot eat a call, and every
# train run has --comm-timeout 60. A failing step does not stop the next one.
# What comes back in OUT (at most 8 files): summary.txt, the figures and exit codes; and
# evidence.tar.gz, every part's log, metrics.jsonl and run.json of each run and the summary,
# re-packed after every step so a killed call still returns what it did.
# ZT_BACKEND=cpu ZT_PRESETS=tiny ZT_PYTORCH_PRESET=tiny ZT_OFFLOAD_PRESET=tiny ZT_BIG_PRESET=tiny
# runs the same steps on a CPU host (the dry run, tests/bundle/gpu_session_dry_run_test.sh).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

pack() {
  local dest=$1 root build
  root=$(cd "$here/.." && pwd)
  build=${ZT_BUILD_DIR:-$root/build}
  # ZT_PACK_NO_BUILD=1: pack what is built (the dry run test, inside ctest).
  if [ "${ZT_PACK_NO_BUILD:-0}" != 1 ]; then
    cmake --build "$build" --target zerotrain zt_gpu_tests bench_gpu_ceilings -j "$(nproc)" ||
      exit 1
  fi
  # Only a previous pack (marker file) or an empty directory is replaced.
  if [ -e "$dest" ] && [ ! -e "$dest/.zt-gpu-pack" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
    echo "pack: $dest exists and is not a previous pack (no .zt-gpu-pack): refusing" >&2
    exit 1
  fi
  rm -rf "$dest" && mkdir -p "$dest" && touch "$dest/.zt-gpu-pack"
  local work extras=() f
  work=$(mktemp -d)
  for f in "$build/tests/gpu/zt_gpu_tests" "$build/bench_gpu_ceilings"; do
    if [ -x "$f" ]; then extras+=(--extra "$f"); else echo "pack: $f absent (a build without CUDA)"; fi
  done
  "$root/cmake/make_bundle.sh" "${extras[@]}" "$build/zerotrain" "$work/bundle" || exit 1
  tar -C "$work" -czf "$dest/zerotrain-bundle.tar.gz" bundle || exit 1
  rm -rf "$work"
  cp -r "$root/bench" "$root/inputs" "$dest/" || exit 1
  # Configurations the profile part initialises at random (ZT_PROFILE_CONFIGS).
  mkdir -p "$dest/configs" &&
    cp "$root/tests/data/hf_models/meta-llama--Llama-3.2-1B/config.json" \
      "$dest/configs/Llama-3.2-1B.json" || exit 1
  { git -C "$root" rev-parse HEAD && git -C "$root" status --short | sed -n 1,20p; } >"$dest/COMMIT"
  du -sh "$dest"
}

# CUDA runtime, cuBLASLt, cuDNN and NCCL on the GPU host: the toolkit's lib64 and pip's nvidia-*
# wheels (PyTorch's), else a search of the root filesystem.
cuda_library_path() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda/extras/CUPTI/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  while IFS= read -r d; do [ -d "$d" ] && dirs+=("$d"); done < <(
    "$python" - 2>/dev/null <<'PY'
import importlib, os
for name in ("nvidia.nccl", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cudnn",
             "nvidia.cuda_cupti"):
    try:
        for p in importlib.import_module(name).__path__:
            print(os.path.join(p, "lib"))
    except Exception:
        pass
try:  # the CUDA 13 wheels keep cudart, cuBLAS and others together under nvidia/cu13/lib
    for p in importlib.import_module("nvidia").__path__:
        print(os.path.join(p, "cu13", "lib"))
except Exception:
    pass
PY
  )
  # NCCL and cuDNN are the ones a bare toolkit may lack: search the filesystem for what neither
  # the directories above nor the loader's cache has.
  local lib wanted=()
  for lib in libnccl.so.2 libcudnn.so.9; do
    local have=0
    for d in "${dirs[@]}"; do [ -e "$d/$lib" ] && have=1; done
    # The cache is read whole first: `| grep -q` under pipefail fails on the writer's SIGPIPE.
    grep -q "^[[:space:]]*${lib//./\\.} " <<<"$(ldconfig -p 2>/dev/null)" && have=1
    [ "$have" = 1 ] || wanted+=(-o -name "$lib")
  done
  if [ ${#wanted[@]} -gt 0 ]; then
    while IFS= read -r d; do dirs+=("$(dirname "$d")"); done < <(
      timeout 60 find / -xdev \( -name 'libcublasLt.so.13' "${wanted[@]}" \) 2>/dev/null |
        head -n 6)
  fi
  local IFS=:
  echo "${dirs[*]}"
}

say() { echo "$*" | tee -a "$summary"; }

# Packs the evidence directory into OUT/evidence.tar.gz (logs past 4 MiB keep their head and
# tail), so whatever ran so far comes back even if the call is killed.
pack_evidence() {
  cp "$summary" "$evidence/summary.txt"
  # A copy is cut, never the logs themselves: a part may still be writing to its log.
  local staged=$work/staged f
  rm -rf "$staged" && mkdir -p "$staged" && cp -r "$evidence" "$staged/"
  for f in "$staged"/evidence/*.log "$staged"/evidence/*.txt; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt $((4 << 20)) ]; then
      { head -c 1M "$f" && printf '\n[... cut by gpu_session.sh ...]\n' && tail -c 3M "$f"; } \
        >"$f.cut" && mv "$f.cut" "$f"
    fi
  done
  tar -C "$staged" -czf "$out/evidence.tar.gz.part" evidence &&
    mv "$out/evidence.tar.gz.part" "$out/evidence.tar.gz"
  rm -rf "$staged"
}

# step LABEL SECONDS CMD...: runs CMD under timeout, bounded by what is left of the call's
# budget; appends "LABEL: exit N" (or TIMED OUT / skipped) to the summary; returns CMD's status.
step() {
  local label=$1 seconds=$2 left rc
  shift 2
  left=$((call_deadline - $(date +%s)))
  if [ "$left" -lt 20 ]; then
    say "$label: skipped (the call's budget is spent)"
    return 125
  fi
  [ "$seconds" -le "$left" ] || seconds=$left
  echo "== $label ($seconds s at most): $*"
  timeout -k 10 "$seconds" "$@"
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "$label: TIMED OUT after $seconds s"
  else
    echo "$label: exit $rc" >>"$summary"
  fi
  pack_evidence
  return "$rc"
}

# Mean figures of metrics.jsonl over the steps after the first: one summary line.
figures() {
  local label=$1 metrics=$2
  "$python" - "$label" "$metrics" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
steps = [json.loads(l) for l in open(path)]
timed = steps[1:] or steps
mean = lambda f: sum(f(s) for s in timed) / len(timed)
gib = 1024.0 ** 3
# The categories' peaks plus the backend's own scratch (GEMM workspace, arenas, cuDNN's).
device = max(sum(v for k, v in s["peak_memory_bytes"].items() if k not in ("host", "nvme"))
             + s.get("backend_scratch_bytes", 0) for s in steps)
host = max(s["peak_memory_bytes"].get("host", 0) for s in steps)
mfu = mean(lambda s: s["mfu"] or 0.0)
print(f"{label}: {mean(lambda s: s['tokens_per_s']):.0f} tokens/s, "
      f"{mean(lambda s: s['tflops_per_device']):.1f} TFLOP/s per device, MFU {100 * mfu:.1f}%, "
      f"step {mean(lambda s: s['step_time_s']):.3f} s, loss {steps[0]['loss']:.4f} -> "
      f"{steps[-1]['loss']:.4f}, peak device {device / gib:.2f} GiB, host {host / gib:.2f} GiB "
      f"({len(steps)} steps)")
PY
}

run_part_preflight() {
  local ok=1 f missing
  say "commit: $(head -n 1 "$dir/COMMIT" 2>/dev/null || echo unknown)"
  say "host: $(hostname), $(nproc) cores, kernel $(uname -r)"
  say "memory: $(free -g | awk '/^Mem:/ { print $2 " GiB total, " $7 " GiB available" }')"
  if command -v nvidia-smi >/dev/null; then
    say "gpu: $(timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
      --format=csv,noheader 2>&1 | sed -n 1p)"
    timeout 60 nvidia-smi
  else
    say "gpu: no nvidia-smi on this host"
  fi
  say "library path: $LD_LIBRARY_PATH"
  local d found
  for f in libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
    found=""
    while IFS= read -r -d: d; do
      if [ -z "$found" ] && [ -e "$d/$f" ]; then found="$d/$f"; fi
    done <<<"$LD_LIBRARY_PATH:"
    [ -n "$found" ] || found=$(ldconfig -p 2>/dev/null | awk -v f="$f" '$1 == f && !n++ { print $NF }')
    say "  $f: ${found:-not found}"
  done
  say "compute-sanitizer: ${sanitizer:-not found} $([ -n "$sanitizer" ] &&
    timeout 60 "$sanitizer" --version 2>/dev/null | tail -n 1)"
  say "python: $("$python" --version 2>&1), torch: $(timeout 120 "${host_python[@]}" -c \
    'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda")' \
    2>&1 | tail -n 1)"
  for f in "$B"/libexec/* "$B"/lib/*.so*; do
    missing=$(ldd "$f" 2>&1 | grep "not found")
    if [ -n "$missing" ]; then
      say "ldd ${f#"$B"/}: $missing"
      ok=0
    fi
  done
  if [ "$ok" = 1 ]; then say "preflight: ldd finds every library of the bundle"; else
    say "preflight: FAILED (libraries not found, above)"
  fi
  # zerotrain's own view: versions of CUDA, cuBLASLt, cuDNN, NCCL as loaded, the GPUs it sees.
  timeout 60 "$B/libexec/zerotrain" info --env ||
    say "info --env: FAILED (exit $?): the binary cannot start here"
}

# In order of what a hang would cost most to miss: the kernels and GEMMs every path runs, the
# fused attention (the fast path), then the engine and the communicators.
gpu_test_groups=('kernels=CudaKernels.*:CudaBf16Storage.*:CudaFp16Storage.*:CudaFusedKernels.*'
  'gemm_attention=*CudaGemm.*:*CudaBatchedGemm*:*CudaAttention.*:CudaGemmTuning.*:CudaRunReport.*'
  'fused_attention=CudnnAttention.*' 'engine=CudaEngine.*:CudaDeviceMemory.*:CudaKernelProfile.*'
  'comm=NcclComm.*:StagedComm.*')
group_filter() {  # group_filter NAME: the gtest filter of that group
  local entry
  for entry in "${gpu_test_groups[@]}"; do
    [ "${entry%%=*}" = "$1" ] && echo "${entry#*=}" && return 0
  done
  return 1
}
gpu_test_np2_groups=('staged_comm=StagedComm.*' 'engine_shared=CudaEngineShared.*'
  'engine_nccl=CudaEngineNccl.*' 'nccl_comm=NcclComm.*')

run_part_tests() {
  if [ -x "$B/libexec/bench_gpu_ceilings" ]; then
    step bench_gpu_ceilings "$step_seconds" "$B/libexec/bench_gpu_ceilings" \
      >"$evidence/ceilings.txt" 2>&1
    tee -a "$summary" <"$evidence/ceilings.txt"
  fi
  if [ ! -x "$B/libexec/zt_gpu_tests" ]; then
    say "zt_gpu_tests: absent from the bundle"
    return
  fi
  local entry name known=" all none " groups=" ${ZT_TEST_GROUPS:-all} "
  groups=${groups//,/ }
  for entry in "${gpu_test_groups[@]}" "${gpu_test_np2_groups[@]}"; do
    known+="${entry%%=*} "
  done
  for name in $groups; do
    [[ $known == *" $name "* ]] ||
      say "tests: unknown group '$name' in ZT_TEST_GROUPS (known:$known)"
  done
  wanted_group() { [ "$groups" = " all " ] || [[ $groups == *" $1 "* ]]; }
  for entry in "${gpu_test_groups[@]}"; do
    wanted_group "${entry%%=*}" || continue
    step "gpu_${entry%%=*}" "$step_seconds" "$B/libexec/zt_gpu_tests" \
      --gtest_filter="${entry#*=}" --gtest_brief=1
  done
  for entry in "${gpu_test_np2_groups[@]}"; do
    wanted_group "${entry%%=*}" || continue
    step "gpu_${entry%%=*}_np2" "$step_seconds" "$B/bin/mpirun" --oversubscribe -np 2 \
      -x LD_LIBRARY_PATH "$B/bin/zt_gpu_tests" --gtest_filter="${entry#*=}" --gtest_brief=1
  done
}

run_part_sanitize() {
  if [ -z "$sanitizer" ]; then
    say "sanitize: skipped (no compute-sanitizer on this host)"
    return
  fi
  if [ ! -x "$B/libexec/zt_gpu_tests" ]; then
    say "sanitize: skipped (zt_gpu_tests absent from the bundle)"
    return
  fi
  # ZT_SANITIZE: TOOL:GROUP runs in order, by default the kernels under both tools, then
  # GEMM/attention, the engine, the fused attention and the communicators under memcheck (the
  # last not yet run on a GPU); each at most
  # ZT_SANITIZE_SECONDS. The event-timeline test (20 cuBLAS GEMMs of 2048³, no kernel of ours)
  # stays out: racecheck over the kernel group outlasted its 45 s on the H100 with it in (which
  # test took the time was not measured; its GEMMs are the group's largest work). NCCL probes
  # kernel images of other architectures when a communicator starts
  # (cudaErrorNoKernelImageForDevice from cudaFuncGetAttributes, seen on the H100 2026-11-27),
  # so the groups that start one do not count API errors; every CUDA call of zerotrain's own is
  # checked in the code.
  local run tool group filter seconds=${ZT_SANITIZE_SECONDS:-150} extra
  for run in ${ZT_SANITIZE:-memcheck:kernels racecheck:kernels memcheck:gemm_attention \
    memcheck:engine memcheck:fused_attention memcheck:comm}; do
    tool=${run%%:*} group=${run#*:} extra=()
    # An unknown group would leave a filter that selects the whole suite: refused instead.
    if [ "$tool" = "$run" ] || ! filter=$(group_filter "$group"); then
      say "sanitize: '$run' is not TOOL:GROUP with a group of the tests part: skipped"
      continue
    fi
    if [[ $filter == *-* ]]; then filter+=":CudaKernels.EventTimeline*"; else
      filter+="-CudaKernels.EventTimeline*"
    fi
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    case $group in engine | comm) extra+=(--report-api-errors no) ;; esac
    step "$tool gpu_$group" "$seconds" "$sanitizer" --tool "$tool" --error-exitcode 99 \
      "${extra[@]}" "$B/libexec/zt_gpu_tests" --gtest_filter="$filter" --gtest_brief=1
  done
}

losses_of() {  # the losses of metrics.jsonl, in step order, as written
  "$python" -c 'import json, sys
print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1])))' "$1" 2>/dev/null
}

# same_losses LABEL RUN_A RUN_B: whether two runs' losses are the same, bit for bit, in the summary.
same_losses() {
  local a b
  a=$(losses_of "$2/metrics.jsonl") b=$(losses_of "$3/metrics.jsonl")
  if [ -z "$a" ] || [ -z "$b" ]; then
    say "$1: not compared, a run has no losses (${a:-$2 missing} | ${b:-$3 missing})"
  elif [ "$a" = "$b" ]; then
    say "$1: losses identical ($a)"
  else
    say "$1: losses DIFFER: [$a] vs [$b]"
  fi
}

train_run() {  # train_run LABEL OUTDIR ARGS...
  local label=$1 run=$2
  shift 2
  rm -rf "$run"
  if step "$label" "$step_seconds" "$B/libexec/zerotrain" train --backend "$backend" \
    --data "$data" --out "$run" --log-every 1 --seed 1 --comm-timeout 60 "$@"; then
    figures "$label" "$run/metrics.jsonl" | tee -a "$summary"
  else
    say "$label: FAILED"
  fi
  mkdir -p "$evidence/runs/$(basename "$run")"
  cp "$run"/metrics.jsonl "$run"/run.json "$evidence/runs/$(basename "$run")/" 2>/dev/null
}

# zerotrain's rows beside PyTorch: on CUDA its defaults and the same with --deterministic false
# and with --cuda-graphs on, and the other attention paths too unless the train part times them in
# the same call; on the CPU the GEMM path both ways.
default_pytorch_rows() {
  if [ "$backend" != cuda ]; then
    echo gemm,gemm+bf16
  elif [[ ",$parts," == *,train,* ]]; then
    echo ,+nondeterministic,+graphs
  else
    echo ,gemm,fused,fused+bf16,+nondeterministic,+graphs
  fi
}

run_part_pytorch() {
  if ! timeout 120 "${host_python[@]}" -c 'import torch' 2>/dev/null; then
    say "pytorch: skipped ($python has no torch)"
    return
  fi
  local device=cuda preset
  [ "$backend" = cuda ] || device=cpu
  for preset in ${ZT_PYTORCH_PRESET:-125m 1b}; do
    step "bench_gpu_vs_pytorch $preset" "${ZT_PYTORCH_SECONDS:-$step_seconds}" \
      "${host_python[@]}" "$dir/bench/bench_gpu_vs_pytorch.py" \
      --zerotrain "$zt_for_python" --device "$device" --backend "$backend" \
      --preset "$preset" --seq-len "$seq" --micro-batch "${ZT_MICRO_BATCH:-4}" \
      --steps "$((steps + 2))" --data "$dir/inputs/data/sample.txt" \
      --attentions "${ZT_PYTORCH_ROWS-$(default_pytorch_rows)}" \
      --modes "${ZT_PYTORCH_MODES:-eager,compile,compile-max,compile-max+bf16}" \
      --repeats "${ZT_PYTORCH_REPEATS:-3}" \
      --json-out "$evidence/bench_gpu_vs_pytorch_$preset.json" >"$evidence/pytorch_$preset.txt" 2>&1
    grep -v '^step ' "$evidence/pytorch_$preset.txt" | tee -a "$summary"
  done
}

run_part_masking() {
  step "bench_document_masking" "$step_seconds" "${host_python[@]}" \
    "$dir/bench/bench_document_masking.py" --zerotrain "$zt_for_python" \
    --mpirun "$B/bin/mpirun" --backend "$backend" --preset "${ZT_MASKING_PRESET:-1b}" \
    --steps "$steps" --seq-len "$seq" --micro-batch "${ZT_MICRO_BATCH:-4}" --repeats 1 \
    >"$evidence/masking.txt" 2>&1
  tee -a "$summary" <"$evidence/masking.txt"
}

# The issue's three modes beside no offload, at grad-accum 1 and 4 (ZT_OFFLOAD_ACCUMS), and the
# overlap with fp32 gradient copies beside the default bf16 ones.
run_part_offload() {
  local accum
  : >"$evidence/offload.txt"
  for accum in ${ZT_OFFLOAD_ACCUMS:-1 4}; do
    step "bench_offload_accum$accum" "$step_seconds" "${host_python[@]}" \
      "$dir/bench/bench_offload.py" --zerotrain "$zt_for_python" --comm-timeout 60 \
      --mpirun "$B/bin/mpirun" --backend "$backend" \
      --preset "${ZT_OFFLOAD_PRESET:-1b}" --steps "$steps" --seq-len "$seq" \
      --micro-batch "${ZT_MICRO_BATCH:-4}" --grad-accum "$accum" --threads "$(nproc)" \
      --rows "${ZT_OFFLOAD_ROWS:-none,opt-cpu,opt-cpu-fp32,opt-cpu-serial,opt-cpu-delay}" \
      --data "$dir/inputs/data/sample.txt" >>"$evidence/offload.txt" 2>&1
  done
  tee -a "$summary" <"$evidence/offload.txt"
}

# The train part: bench/gpu_session_train.sh.
# shellcheck source=gpu_session_train.sh
. "$here/gpu_session_train.sh"

# The profile part: bench/gpu_session_profile.sh.
# shellcheck source=gpu_session_profile.sh
. "$here/gpu_session_profile.sh"

# The big part (6b, and 1b at micro-batch 1): bench/gpu_session_big.sh.
# shellcheck source=gpu_session_big.sh
. "$here/gpu_session_big.sh"

case "${1:-}" in
  --pack)
    pack "${2:?--pack DIR}"
    exit 0
    ;;
  --run) ;;
  *)
    echo "usage: $0 --pack DIR | --run DIR OUT [preflight,tests,sanitize,train,profile,pytorch,masking,offload,big]" >&2
    exit 2
    ;;
esac

call_deadline=$(($(date +%s) + ${ZT_CALL_SECONDS:-540}))
step_seconds=${ZT_STEP_SECONDS:-300}
dir=$(cd "${2:?--run DIR}" && pwd)
out=${3:?--run DIR OUT}
parts=${4:-preflight,tests,sanitize}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
work=$(mktemp -d /tmp/zt-gpu-session.XXXXXX)
evidence=$work/evidence
mkdir -p "$evidence"
backend=${ZT_BACKEND:-cuda}
steps=${ZT_STEPS:-6}
seq=${ZT_SEQ_LEN:-2048}
python=${ZT_PYTHON:-python3}
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
tar -C "$work" -xzf "$dir/zerotrain-bundle.tar.gz" || exit 1
B=$work/bundle
# The bundle's Open MPI and PMIx paths for every binary run from libexec/ (as bin/ wrappers do).
# shellcheck source=/dev/null
. "$B/env.sh"
# Python (PyTorch brings its own CUDA libraries) runs with the host's library path.
host_python=(env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$python")
cuda_libraries=$(cuda_library_path)
export LD_LIBRARY_PATH="$cuda_libraries${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# zerotrain as the Python benchmarks launch it: our library path again, whatever Python's is.
zt_for_python=$work/zerotrain-with-cuda-path
printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$LD_LIBRARY_PATH" \
  "$B/bin/zerotrain" >"$zt_for_python"
chmod +x "$zt_for_python"
echo "gpu_session $(date -u +%FT%TZ) parts=$parts backend=$backend" >>"$summary"
run_part_preflight >>"$evidence/preflight.log" 2>&1
pack_evidence
data=$work/data.h5
timeout 120 "$B/libexec/zerotrain" prepare-data --text "$dir/inputs/data/sample.txt" \
  --out "$data" >>"$evidence/preflight.log" 2>&1 ||
  say "prepare-data: FAILED (exit $?; evidence/preflight.log): the train parts will fail too"
parts=${parts//preflight/}
for part in ${parts//,/ }; do
  case $part in
    tests | sanitize | train | profile | pytorch | masking | offload | big)
      "run_part_$part" >>"$evidence/$part.log" 2>&1
      pack_evidence
      ;;
    *) say "unknown part '$part'" ;;
  esac
done
rm -rf "$work"
cat "$summary"
