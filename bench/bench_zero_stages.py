#!/usr/bin/env python3
"""ZeRO stages on the CPU backend: tokens/s, peak bytes per category and counted bytes per
collective per rank, at N = 1, 2, 4 ranks, next to docs/ARCHITECTURE.md §4's theory.

Each configuration trains `--steps` steps (the last one is reported) of the same preset with the
same per-rank micro-batch, under `mpirun --oversubscribe -np N` (OMP_NUM_THREADS=1 per rank).
Theory per rank per step, for Ψ parameters (bf16 params, fp32 grads):
  stage 0: all-reduce of fp32 grads, 2Ψ(N−1)/N·4 bytes
  stage 1/2: reduce-scatter of fp32 grads Ψ(N−1)/N·4 + all-gather of bf16 params Ψ(N−1)/N·2
  stage 3: two bf16 all-gathers 2·Ψ(N−1)/N·2 + fp32 reduce-scatter Ψ(N−1)/N·4
  (stage 3 figures assume --max-reuse-distance 0 and --param-persistence-threshold 0, as here).

  /usr/bin/python3 bench/bench_zero_stages.py --zerotrain build/zerotrain --preset 125m
"""
import argparse
import json
import os
import subprocess
import tempfile

from cpu_train_runs import MIB, mpirun_train, prepare_text



def theory_bytes(stage, psi, n):
    share = psi * (n - 1) / n
    if stage == 0:
        return {"all_reduce": 2 * share * 4}
    if stage in (1, 2):
        return {"reduce_scatter": share * 4, "all_gather": share * 2}
    return {"reduce_scatter": share * 4, "all_gather": 2 * share * 2}


def run(args, n, stage, data, out):
    mpirun_train(args.zerotrain, n, args.preset, data, out,
                 ["--steps", args.steps, "--micro-batch", args.micro_batch, "--seq-len",
                  args.seq_len, "--zero-stage", stage, "--max-reuse-distance", "0",
                  "--param-persistence-threshold", "0"])
    last = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))][-1]
    report = json.load(open(os.path.join(out, "report.json")))
    return last, report


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--preset", default="125m")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "inputs",
                                                  "data", "sample.txt"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.h5")
        prepare_text(args.zerotrain, args.data, data)
        info = json.loads(subprocess.run(
            [args.zerotrain, "estimate", "--preset", args.preset, "--json"], check=True,
            capture_output=True, text=True).stdout)
        psi = info.get("parameters") or info.get("psi")
        print(f"preset {args.preset} (Ψ = {psi:,}), micro-batch {args.micro_batch}/rank, "
              f"seq-len {args.seq_len}, last of {args.steps} steps, MiB per rank")
        print(f"{'N':>2} {'st':>2} {'tok/s':>8} {'params':>8} {'grads':>8} {'optim':>8} "
              f"{'activ':>8} {'buffers':>8} | {'AR MiB':>8} {'RS MiB':>8} {'AG MiB':>8} | "
              f"{'theory AR/RS/AG MiB':>22}")
        for n in [int(x) for x in args.ranks.split(",")]:
            for stage in range(4):
                out = os.path.join(tmp, f"run-{n}-{stage}")
                last, _ = run(args, n, stage, data, out)
                mem, comm = last["peak_memory_bytes"], last["comm_bytes"]
                th = theory_bytes(stage, psi, n)
                print(f"{n:>2} {stage:>2} {last['tokens_per_s']:>8.1f} "
                      f"{mem['params'] / MIB:>8.1f} {mem['grads'] / MIB:>8.1f} "
                      f"{mem['optimizer'] / MIB:>8.1f} {mem['activations'] / MIB:>8.1f} "
                      f"{mem['buffers'] / MIB:>8.1f} | {comm['all_reduce'] / MIB:>8.1f} "
                      f"{comm['reduce_scatter'] / MIB:>8.1f} {comm['all_gather'] / MIB:>8.1f} | "
                      f"{th.get('all_reduce', 0) / MIB:>6.1f}/{th.get('reduce_scatter', 0) / MIB:>6.1f}"
                      f"/{th.get('all_gather', 0) / MIB:>6.1f}")


if __name__ == "__main__":
    main()
