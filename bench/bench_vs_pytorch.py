#!/usr/bin/env python3
"""Training throughput of zerotrain's CPU backend against the same Llama trained by PyTorch.

Both train the same preset from the same initial weights on the same machine in one run: fp32
math, AdamW, the same micro-batch and sequence length, the same thread count. zerotrain runs
`train` (stage 0, one rank); PyTorch runs the oracle's plain-PyTorch Llama (tests/oracle) in
float32 with torch.optim.AdamW. Prints tokens/s for each and their ratio.

  /usr/bin/python3 bench/bench_vs_pytorch.py --zerotrain build/zerotrain --preset small
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
import llama_reference as ref  # noqa: E402


def zerotrain_tokens_per_s(args, model_dir, data, out):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))
    cmd = [args.zerotrain, "train", "--model", model_dir, "--data", data, "--out", out,
           "--steps", str(args.steps), "--micro-batch", str(args.micro_batch),
           "--seq-len", str(args.seq_len), "--precision", args.precision, "--log-every", "0",
           "--lr", "1e-3", "--warmup-steps", "0"]
    subprocess.run(cmd, check=True, env=env)
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    steady = lines[1:] or lines  # the first step includes warm-up
    return sum(l["tokens"] for l in steady) / sum(l["step_time_s"] for l in steady)


def pytorch_tokens_per_s(args, model_dir, data):
    torch.set_num_threads(args.threads)
    config = ref.load_config(model_dir)
    weights = ref.load_weights(model_dir, dtype=torch.float32)
    leaves = {n: t.clone().requires_grad_(True) for n, t in weights.items()}
    opt = ref.make_adamw(leaves, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    tokens = h5py.File(data, "r")["tokens"][()].astype(np.int64)
    B, T = args.micro_batch, args.seq_len
    rng = np.random.default_rng(0)
    times = []
    for _ in range(args.steps):
        starts = rng.integers(0, len(tokens) - T - 1, size=B)
        batch = torch.from_numpy(np.stack([tokens[s:s + T + 1] for s in starts]))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ref.mean_cross_entropy(ref.forward(leaves, config, batch[:, :-1]), batch[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    steady = times[1:] or times
    return B * T * len(steady) / sum(steady)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--preset", default="small")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = p.parse_args()
    root = os.path.join(HERE, "..")
    with tempfile.TemporaryDirectory() as tmp:
        model, data = os.path.join(tmp, "model"), os.path.join(tmp, "data.h5")
        subprocess.run([args.zerotrain, "init", "--preset", args.preset, "--seed", "1",
                        "--out", model], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([args.zerotrain, "prepare-data", "--text",
                        os.path.join(root, "inputs", "data", "sample.txt"), "--out", data],
                       check=True, stdout=subprocess.DEVNULL)
        zt = zerotrain_tokens_per_s(args, model, data, os.path.join(tmp, "run"))
        pt = pytorch_tokens_per_s(args, model, data)
    print(f"preset {args.preset}  micro-batch {args.micro_batch}  seq-len {args.seq_len}  "
          f"threads {args.threads}  steps {args.steps} (first excluded)  precision {args.precision}")
    print(f"  zerotrain (CPU backend)  {zt:10.1f} tokens/s")
    print(f"  PyTorch {torch.__version__:<16s} {pt:10.1f} tokens/s")
    print(f"  ratio zerotrain/PyTorch  {zt / pt:10.2f}")


if __name__ == "__main__":
    main()
