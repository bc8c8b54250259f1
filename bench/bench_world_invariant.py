#!/usr/bin/env python3
"""The cost of --world-invariant on the CPU backend: tokens/s, peak device bytes per rank and
counted bytes per step per rank, with and without the mode, at N = 1, 2, 4 ranks, in one run.

Every configuration trains the same preset for `--steps` steps with the same global batch:
micro-batch B per rank and `--micro-batches` G per step over all ranks (grad-accum G/N), under
`mpirun --oversubscribe -np N` with OMP_NUM_THREADS=1 per rank. Figures come from each run's
report.json (mean tokens/s over the steps, the largest rank's peak of the device categories,
the collectives' bytes per step of one rank). The last column checks what the mode promises:
the invariant runs' metrics.jsonl loss and norm strings are the same at every N.

  /usr/bin/python3 bench/bench_world_invariant.py --zerotrain build/zerotrain --preset small
"""
import argparse
import json
import os
import re
import tempfile

from cpu_train_runs import MIB, mpirun_train, prepare_text

DEVICE_CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers")


def run(args, n, stage, invariant, data, out):
    mpirun_train(args.zerotrain, n, args.preset, data, out,
                 ["--steps", args.steps, "--micro-batch", args.micro_batch, "--seq-len",
                  args.seq_len, "--grad-accum", args.micro_batches // n, "--zero-stage", stage,
                  f"--world-invariant={'true' if invariant else 'false'}"])
    report = json.load(open(os.path.join(out, "report.json")))
    metrics = open(os.path.join(out, "metrics.jsonl")).read()
    bits = " ".join(re.findall(r'"(?:loss|grad_norm)":[^,}]*', metrics))
    peak = max(sum(r[c] for c in DEVICE_CATEGORIES) for r in report["peak_memory_bytes_per_rank"])
    comm = sum(report["comm_bytes_per_step"].values())
    return report["mean_tokens_per_s"], peak, comm, bits


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--preset", default="small")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--micro-batches", type=int, default=8, help="per step, over all ranks")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--stages", default="0,1,2,3")
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "README.md"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.h5")
        prepare_text(args.zerotrain, args.data, data)
        print(f"preset {args.preset}, seq {args.seq_len}, micro-batch {args.micro_batch}, "
              f"{args.micro_batches} micro-batches per step, {args.steps} steps, CPU backend")
        print(f"{'stage':>5} {'N':>2} | {'tok/s':>8} {'peak MiB':>9} {'comm MiB':>9} | "
              f"{'inv tok/s':>9} {'peak MiB':>9} {'comm MiB':>9} | {'tok/s x':>7} "
              f"{'peak x':>6} | same bits as N=1")
        for stage in [int(s) for s in args.stages.split(",")]:
            first_bits = None
            for n in [int(r) for r in args.ranks.split(",")]:
                base = run(args, n, stage, False, data, os.path.join(tmp, f"d{stage}_{n}"))
                inv = run(args, n, stage, True, data, os.path.join(tmp, f"i{stage}_{n}"))
                first_bits = first_bits or inv[3]
                print(f"{stage:>5} {n:>2} | {base[0]:>8.0f} {base[1] / MIB:>9.1f} "
                      f"{base[2] / MIB:>9.2f} | {inv[0]:>9.0f} {inv[1] / MIB:>9.1f} "
                      f"{inv[2] / MIB:>9.2f} | {inv[0] / base[0]:>7.2f} {inv[1] / base[1]:>6.2f} | "
                      f"{'yes' if inv[3] == first_bits else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
