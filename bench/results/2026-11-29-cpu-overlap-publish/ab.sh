#!/bin/bash
# A/B on this CPU: the exact overlap's commit before (base: commit 889adb1, the masters rounded in
# a second pass after every group's update, then sent) and after (the speculated update writes the
# working values in its own pass; each group is sent as soon as its update is done).
# 125m, stage 2, CPU optimizer offload with the overlap forced on, no clipping (every step keeps
# its speculation), 2 x 512 tokens, 5 steps, three alternating rounds; medians of steps 2-5.
# Usage: ab.sh BASE_ZEROTRAIN NEW_ZEROTRAIN WORK_DIR
set -e
base=$1 new=$2 work=$3
text=$(cd "$(dirname "$0")/../../.." && pwd)/inputs/data/sample.txt
mkdir -p "$work" && cd "$work"
[ -f data.h5 ] || "$new" prepare-data --text "$text" \
    --out data.h5 > /dev/null
export OMP_NUM_THREADS=2
for round in 1 2 3; do
  for side in base new; do
    bin=$new; [ $side = base ] && bin=$base
    rm -rf run_$side
    "$bin" train --preset 125m --data data.h5 --out run_$side --steps 5 --micro-batch 2 \
        --seq-len 512 --zero-stage 2 --offload-optimizer cpu --offload-optimizer-overlap on \
        --clip 0 --log-every 0 --seed 3 > /dev/null 2>&1
    python3 - "$side" "$round" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(f"run_{sys.argv[1]}/metrics.jsonl")]
later = rows[1:]
opt = [r["time"]["optimizer_s"] for r in later]
step = [r["step_time_s"] for r in later]
adam = [r["host_adam"]["seconds"] for r in later]
spec = {r["host_adam"].get("speculation", "") for r in rows}
print(f"{sys.argv[1]:4} round {sys.argv[2]}: optimizer_s median {statistics.median(opt):.4f} "
      f"(steps 2-5: {' '.join(f'{x:.4f}' for x in opt)}), host AdamW kernel s median "
      f"{statistics.median(adam):.4f}, step_time_s median {statistics.median(step):.3f}, "
      f"speculation {sorted(spec)}, losses {' '.join(repr(r['loss']) for r in rows)}")
PY
  done
done
