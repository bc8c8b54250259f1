#!/usr/bin/env bash
# Checkpoint benchmark: for each preset and world size, init a model directory, train 2 steps
# (ZeRO stage 3, seq-len 64, micro-batch 1) with --save-every 1, then resume from the step-1
# checkpoint and consolidate the step-2 checkpoint with and without parallel HDF5. Prints one
# table row per (preset, ranks):
#
#   save_s      wall time of the step-2 checkpoint save (rank 0's view, from the train log)
#   blocked_s   time training stood still for it (metrics.jsonl time.checkpoint_s of step 2)
#   MiB/rank    bytes of each rank file (min-max over ranks)
#   load_s      checkpoint load time of a --resume run (from its log)
#   cons_par_s  `consolidate` with parallel HDF5 (all ranks write into the shared shards; nan
#               when this build's HDF5 is serial)
#   cons_ser_s  `consolidate --serial` (one tensor at a time through rank 0)
#
# usage: bench/bench_checkpoint.sh [BUILD_DIR] [WORK_DIR]
#   PRESETS="125m 1b" RANKS="1 2" override what runs (defaults: 125m at 1 and 2 ranks).
# The 1b preset holds ~17 GB of fp32 master/Adam state plus bf16 params in total at any rank
# count; run it only on a machine with that much free memory.
set -euo pipefail

BUILD_DIR=${1:-build}
WORK=${2:-/tmp/zt_bench_checkpoint}
PRESETS=${PRESETS:-125m}
RANKS=${RANKS:-"1 2"}
ZT=$(realpath "$BUILD_DIR/zerotrain")
SRC=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

run() {  # run NP ARGS...: zerotrain under mpirun (np > 1) or as a singleton
  local np=$1
  shift
  if [[ $np -gt 1 ]]; then mpirun --oversubscribe -np "$np" "$ZT" "$@"; else "$ZT" "$@"; fi
}

json_field() {  # json_field FIELD < one JSON line
  /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"
}

mkdir -p "$WORK"
"$ZT" prepare-data --text "$SRC/inputs/data/sample.txt" --out "$WORK/tokens.h5" --overwrite \
  > /dev/null
printf '%-6s %5s %9s %10s %14s %8s %11s %11s\n' preset ranks save_s blocked_s "MiB/rank" load_s \
  cons_par_s cons_ser_s
for preset in $PRESETS; do
  model="$WORK/$preset-model"
  [[ -d $model ]] || "$ZT" init --preset "$preset" --seed 1 --out "$model" > /dev/null
  for np in $RANKS; do
    out="$WORK/$preset-np$np"
    rm -rf "$out" "$WORK/$preset-np$np-consolidated"*
    common=(--model "$model" --data "$WORK/tokens.h5" --out "$out" --steps 2 --seq-len 64
      --micro-batch 1 --zero-stage 3 --log-every 1 --lr 1e-4 --warmup-steps 0)
    run "$np" train "${common[@]}" --save-every 1 > "$out.train.log" 2>&1
    save_s=$(grep 'step-00000002 saved' "$out.train.log" | sed -E 's/.*, ([0-9.]+) s\)/\1/')
    blocked_s=$(tail -1 "$out/metrics.jsonl" | /usr/bin/python3 -c \
      "import json,sys; print('%.3f' % json.load(sys.stdin)['time']['checkpoint_s'])")
    ckpt="$out/checkpoints/step-00000002"
    mib=$(stat -c %s "$ckpt"/rank-*.h5 | sort -n | awk 'NR==1{lo=$1} {hi=$1}
      END{printf "%.0f-%.0f", lo/1048576, hi/1048576}')
    run "$np" train "${common[@]}" --resume "$out/checkpoints/step-00000001" > "$out.resume.log" 2>&1
    load_s=$(grep -o 'loaded in [0-9.]* s' "$out.resume.log" | awk '{print $3}')
    par_json=$(run "$np" consolidate "$ckpt" --out "$out-consolidated-par")
    cons_par=$(json_field seconds <<< "$par_json")
    [[ $(json_field parallel_hdf5 <<< "$par_json") == True ]] || cons_par=nan  # serial HDF5
    cons_ser=$(run "$np" consolidate "$ckpt" --out "$out-consolidated-ser" --serial |
      json_field seconds)
    printf '%-6s %5s %9s %10s %14s %8s %11.3f %11.3f\n' "$preset" "$np" "$save_s" "$blocked_s" \
      "$mib" "$load_s" "$cons_par" "$cons_ser"
    rm -rf "$out/checkpoints" "$out-consolidated-par" "$out-consolidated-ser"
  done
done
