#!/bin/bash
# --offload-gradient-copies fp32 against bf16 on this CPU, the same binary: the device→host bytes
# each step moves (metrics.jsonl's offload_bytes.device_to_host), the optimizer phase and the
# losses. 125m, stage 2, CPU optimizer offload (overlap off: auto's choice on the CPU backend),
# no clipping, 2 x 512 tokens, 3 steps. On the CPU backend a "copy" is a host memcpy, so the
# times say nothing about a GPU; the bytes are what a GPU's bus would carry.
# Usage: copies.sh ZEROTRAIN WORK_DIR
set -e
zt=$1 work=$2
text=$(cd "$(dirname "$0")/../../.." && pwd)/inputs/data/sample.txt
mkdir -p "$work" && cd "$work"
[ -f data.h5 ] || "$zt" prepare-data --text "$text" --out data.h5 > /dev/null
"$zt" info --version 2>/dev/null | head -1 || true
for copies in fp32 bf16; do
  rm -rf "run_$copies"
  "$zt" train --preset 125m --data data.h5 --out "run_$copies" --steps 3 --micro-batch 2 \
      --seq-len 512 --zero-stage 2 --offload-optimizer cpu --offload-gradient-copies "$copies" \
      --clip 0 --log-every 0 > /dev/null 2>&1
  python3 - "$copies" <<'PY'
import json, sys
c = sys.argv[1]
run = json.load(open(f"run_{c}/run.json"))
print(f"{c}: run.json config.offload_gradient_copies = {run['config']['offload_gradient_copies']}")
for line in open(f"run_{c}/metrics.jsonl"):
    r = json.loads(line)
    print(f"{c} step {r['step']}: loss {r['loss']!r}, device_to_host "
          f"{r['offload_bytes']['device_to_host']} B, optimizer_s {r['time']['optimizer_s']:.4f}")
PY
done
