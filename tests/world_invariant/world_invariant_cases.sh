#!/usr/bin/env bash
# World-invariant training through the binary (docs/reproducibility.md): runs of the
# tiny preset with --world-invariant at 1, 2, 4 and 8 ranks and every ZeRO stage, with the same
# global batch (micro-batch 2, 8 micro-batches per step: grad-accum 8/N), must give the same
# bits: the loss and gradient-norm strings of metrics.jsonl, the fp32 master/m/v of the step-4
# checkpoint and the bf16 final/ model. Every run is compared with one rank at stage 0.
#
#   world_invariant_cases.sh CASE SOURCE_DIR ZEROTRAIN_BINARY
#     stages    N ∈ {1, 2, 4, 8} × stage 0–3
#     small     the small preset (groups of many norm blocks, chunked reductions), stages 1–3
#     features  activation checkpointing, CPU/NVMe offload, no overlap with small buckets
#     resume    2 ranks stage 3 for 2 steps, then 4 ranks stage 1 from its checkpoint
#     documents the same on packed documents with document masks (each README line its own text
#               file): stages, activation checkpointing and a resume at another world size; the
#               run with --document-masking off must differ. With --packing documents (whole
#               lines to a window in order; text data wraps by default) and bfd (best-fit
#               decreasing) too, each differing from the one before, and bfd's resume with
#               --packing auto continues the checkpoint's packing
#     refusals  3 ranks and 3 micro-batches per rank are refused, naming the number
set -euo pipefail
# shellcheck source=tests/support/case_script.sh
source "$(dirname "$0")/../support/case_script.sh" zt_world_invariant "$@"

if [[ $CASE == documents ]]; then  # every non-empty line of the README: a document
  mkdir -p "$WORK/docs"
  awk -v dir="$WORK/docs" 'NF { f = sprintf("%s/%04d.txt", dir, ++n); print > f; close(f) }' \
    "$SRC/README.md"
  "$BIN" prepare-data --text "$WORK"/docs/*.txt --out "$WORK/data.h5" > /dev/null
  grep -q "^documents: [0-9,]* (document masking: on" <<<"$("$BIN" info "$WORK/data.h5")" ||
    fail "the README's lines are not recorded as documents"
else
  "$BIN" prepare-data --text "$SRC/README.md" --out "$WORK/data.h5" > /dev/null
fi
MICRO_BATCHES=8  # per step, over all ranks

# run NAME RANKS STAGE [extra train options...]; STEPS=k stops after step k of the 4-step schedule.
run() {
  local name=$1 ranks=$2 stage=$3
  shift 3
  timeout 600 mpirun --oversubscribe -np "$ranks" "$BIN" train --preset "${PRESET:-tiny}" --data "$WORK/data.h5" \
    --out "$WORK/$name" --zero-stage "$stage" --micro-batch 2 \
    --grad-accum $((MICRO_BATCHES / ranks)) --seq-len 32 --steps "${STEPS:-4}" --schedule-steps 4 \
    --save-every 2 --world-invariant --comm-timeout 120 "$@" > "$WORK/$name.log" 2>&1 ||
    { cat "$WORK/$name.log" >&2; fail "$name: zerotrain train exited non-zero"; }
}

# The run's bits: every step's loss and gradient norm as written, the optimizer state of the
# last checkpoint, the final model.
signature() {
  local out=$WORK/$1
  grep -oE '"(step|loss|grad_norm)":[^,}]*' "$out/metrics.jsonl" | tr '\n' ' '
  echo
  echo "checkpoint $("$PY" "$SRC/tests/world_invariant/state_digest.py" checkpoint \
    "$out/checkpoints/step-00000004")"
  echo "final $("$PY" "$SRC/tests/world_invariant/state_digest.py" model "$out/final")"
}

# same_as_reference NAME: NAME's bits equal the one-rank stage-0 run's.
same_as_reference() {
  local got
  got=$(signature "$1")
  [[ -n "$got" && "$got" == "$REFERENCE" ]] ||
    fail "$1 differs from 1 rank at stage 0:"$'\n'"  reference: $REFERENCE"$'\n'"  $1: $got"
  echo "ok: $1 is bitwise the one-rank stage-0 run"
}

reference() {
  run ref_np1_stage0 1 0
  REFERENCE=$(signature ref_np1_stage0)
  grep -q '"grad_norm"' <<< "$REFERENCE" || fail "no step lines in the reference's metrics.jsonl"
}

case "$CASE" in
  stages)
    reference
    for ranks in 1 2 4 8; do
      for stage in 0 1 2 3; do
        [[ $ranks == 1 && $stage == 0 ]] && continue
        run "np${ranks}_stage${stage}" "$ranks" "$stage"
        same_as_reference "np${ranks}_stage${stage}"
      done
    done
    ;;
  small)
    export PRESET=small
    reference
    run np4_stage1 4 1
    same_as_reference np4_stage1
    run np2_stage3_buckets 2 3 --reduce-bucket-size 50000 --allgather-bucket-size 50000
    same_as_reference np2_stage3_buckets
    run np4_stage2_buckets 4 2 --reduce-bucket-size 50000
    same_as_reference np4_stage2_buckets
    ;;
  features)
    reference
    run ac_full_np2_stage3 2 3 --activation-checkpointing full
    same_as_reference ac_full_np2_stage3
    run ac_every2_np4_stage0 4 0 --activation-checkpointing every:2
    same_as_reference ac_every2_np4_stage0
    run offload_cpu_np4_stage2 4 2 --offload-optimizer cpu
    same_as_reference offload_cpu_np4_stage2
    mkdir -p "$WORK/nvme"
    run offload_nvme_np2_stage3 2 3 --offload-optimizer nvme --nvme-path "$WORK/nvme"
    same_as_reference offload_nvme_np2_stage3
    run offload_param_np4_stage3 4 3 --offload-optimizer cpu --offload-param cpu
    same_as_reference offload_param_np4_stage3
    run no_overlap_small_buckets_np2_stage1 2 1 --overlap-comm false --reduce-bucket-size 1000 \
      --allgather-bucket-size 1000
    same_as_reference no_overlap_small_buckets_np2_stage1
    ;;
  resume)
    reference
    # The first half: 2 ranks, stage 3, stopped after the step-2 checkpoint.
    STEPS=2 run resumed 2 3
    run resumed 4 1 --resume auto
    same_as_reference resumed
    ;;
  documents)
    reference
    grep -q '"document_masking": "on"' "$WORK/ref_np1_stage0/run.json" ||
      fail "the reference did not mask the documents"
    run docs_np2_stage3_ac 2 3 --activation-checkpointing full
    same_as_reference docs_np2_stage3_ac
    run docs_np4_stage2 4 2
    same_as_reference docs_np4_stage2
    STEPS=2 run docs_resumed 2 1
    run docs_resumed 4 3 --resume auto
    same_as_reference docs_resumed
    run docs_unmasked 1 0 --document-masking off
    [[ "$(signature docs_unmasked)" != "$REFERENCE" ]] ||
      fail "--document-masking off trains the same bits: the masks change nothing here"
    echo "ok: without document masks the run differs"
    run packed_ref 1 0 --packing documents
    packed=$(signature packed_ref)
    grep -q '"packing": "documents"' "$WORK/packed_ref/run.json" ||
      fail "--packing documents did not run"
    [[ "$packed" != "$REFERENCE" ]] || fail "--packing documents trains the bits of wrapped"
    run packed_np4_stage3 4 3 --packing documents
    [[ "$(signature packed_np4_stage3)" == "$packed" ]] ||
      fail "--packing documents at 4 ranks, stage 3 differs from 1 rank at stage 0"
    echo "ok: --packing documents gives the same bits at 1 and 4 ranks"
    run bfd_ref 1 0 --packing bfd
    bfd=$(signature bfd_ref)
    grep -q '"packing": "bfd"' "$WORK/bfd_ref/run.json" || fail "--packing bfd did not run"
    [[ "$bfd" != "$packed" ]] || fail "--packing bfd trains the bits of --packing documents"
    run bfd_np4_stage3 4 3 --packing bfd
    [[ "$(signature bfd_np4_stage3)" == "$bfd" ]] ||
      fail "--packing bfd at 4 ranks, stage 3 differs from 1 rank at stage 0"
    STEPS=2 run bfd_resumed 2 1 --packing bfd
    run bfd_resumed 4 2 --resume auto
    grep -q '"packing": "bfd"' "$WORK/bfd_resumed/run.json" ||
      fail "--packing auto did not continue the checkpoint's packing"
    [[ "$(signature bfd_resumed)" == "$bfd" ]] ||
      fail "--packing bfd resumed at 4 ranks differs from the uninterrupted run"
    echo "ok: --packing bfd gives the same bits at 1, 2 and 4 ranks and across a resume"
    ;;
  refusals)
    for args in "3 1 --grad-accum 1" "1 0 --grad-accum 3"; do
      read -r ranks stage extra <<< "$args"
      log=$WORK/refused_$ranks.log
      if timeout 120 mpirun --oversubscribe -np "$ranks" "$BIN" train --preset tiny \
        --data "$WORK/data.h5" --out "$WORK/refused_$ranks" --zero-stage "$stage" --micro-batch 2 \
        --seq-len 32 --steps 1 --world-invariant --comm-timeout 60 $extra > "$log" 2>&1; then
        fail "--world-invariant with $args was accepted"
      fi
      grep -q "world-invariant needs a power-of-two number of .*; .* 3" "$log" ||
        { cat "$log" >&2; fail "the refusal of $args does not name the 3"; }
      echo "ok: --world-invariant refuses $args, naming it"
    done
    ;;
  *)
    fail "unknown case $CASE"
    ;;
esac
