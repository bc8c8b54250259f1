#!/bin/bash
# A/B: the head's rows per chunk before (128 at V = 128256, base commit 89bfbe9, built CPU-only in
# a worktree at /tmp/base) and after (1024), on a Llama-3.2-1B-shaped model cut to 2 layers
# (random bf16 weights saved by transformers, imported), one micro-batch of 1 x 2048 tokens.
set -e
cd /tmp/hc
export OMP_NUM_THREADS=2
for round in ${ROUNDS:-1 2}; do
  for side in base new; do
    bin=/work/main/build/zerotrain; [ $side = base ] && bin=/tmp/base/build/zerotrain
    rm -rf run_$side
    $bin train --backend cpu --model model --data data.h5 --out run_$side --steps 3 \
      --micro-batch 1 --seq-len 2048 --lr 1e-5 --log-every 0 --seed 3 >/dev/null 2>&1
    python3 - "$side" "$round" <<'PY'
import json, sys, statistics
rows=[json.loads(l) for l in open(f"run_{sys.argv[1]}/metrics.jsonl")]
tps=[r["tokens_per_s"] for r in rows[1:]]
print(sys.argv[1], "round", sys.argv[2], "tokens/s steps 2-3:", " ".join(f"{t:.1f}" for t in tps),
      "median", f"{statistics.median(tps):.1f}", "losses", " ".join(repr(r["loss"]) for r in rows))
PY
  done
done
