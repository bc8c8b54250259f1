#!/bin/bash
# A/B: the head's recompute (base, commit 96913f3) against the fused head, 125m on this CPU.
set -e
cd /tmp/hb
export OMP_NUM_THREADS=2
for round in 1 2 3; do
  for side in base fused; do
    bin=/work/main/build/zerotrain; [ $side = base ] && bin=/tmp/base/build/zerotrain
    rm -rf run_$side
    $bin train --preset 125m --data data.h5 --out run_$side --steps 4 --micro-batch 2 --seq-len 1024 --log-every 0 --seed 3 >/dev/null 2>&1
    python3 - "$side" "$round" <<'PY'
import json, sys, statistics
rows=[json.loads(l) for l in open(f"run_{sys.argv[1]}/metrics.jsonl")]
tps=[r["tokens_per_s"] for r in rows[1:]]
print(sys.argv[1], "round", sys.argv[2], "tokens/s steps 2-4:", " ".join(f"{t:.1f}" for t in tps),
      "median", f"{statistics.median(tps):.1f}", "losses", " ".join(repr(r["loss"]) for r in rows))
PY
  done
done
