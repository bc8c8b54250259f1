#!/usr/bin/env python3
"""The cost of --document-masking: tokens/s of the same training run with document masks on and
off, on packed documents of SFT-like lengths, in one run of this script.

The dataset is byte-tokenized text cut into documents of uniformly random lengths in
[--doc-min, --doc-max] bytes (default 200-800, seed 1), each its own text file, so that
`prepare-data --text` records their boundaries. Both modes train the same preset, seed and
batches for `--steps` steps; the figure is report.json's mean tokens/s (which leaves out the
first step), and each mode runs `--repeats` times, alternating, reporting the best. With masks
the attention skips the keys of earlier documents in a window (the CPU attention's key blocks and
the GEMM path's row kernels, and on a Hopper GPU cuDNN's fused kernels on ragged sequences), and
the loss counts fewer targets (one per document boundary). On CUDA the rows name their kernel:
both modes with --attention fused (which --attention auto does not pick for masks until that
path is validated on a GPU, docs/gpu.md) and with --attention gemm, so that each attention
kernel's cost of the masks shows; the issue's target is on/off of the fused rows. A fused row
also prints report.json's `attention_graphs`: the cuDNN graphs built in steps (after the
start-up check: one per call size its documents need, at the first micro-batch that needs it) and
their seconds, the most that builds add to its steps (step 1's, outside the mean, included).

  /usr/bin/python3 bench/bench_document_masking.py --zerotrain build/zerotrain
  (on a GPU: --backend cuda --preset 1b --seq-len 2048 --micro-batch 4)
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def write_documents(directory, total_bytes, doc_min, doc_max):
    """Text files of random lengths cut from inputs/data/sample.txt, cycled; returns their
    paths."""
    with open(os.path.join(ROOT, "inputs", "data", "sample.txt"), "rb") as f:
        text = f.read()
    rng, paths, offset = random.Random(1), [], 0
    while offset < total_bytes:
        n = rng.randint(doc_min, doc_max)
        piece = bytes(text[(offset + i) % len(text)] for i in range(n))
        path = os.path.join(directory, f"doc{len(paths):06d}.txt")
        with open(path, "wb") as f:
            f.write(piece)
        paths.append(path)
        offset += n
    return paths


def train(args, data, out, masking, extra=()):
    cmd = [args.mpirun, "-np", "1", args.zerotrain, "train", "--preset", args.preset, "--data", data,
           "--out", out, "--steps", str(args.steps), "--micro-batch", str(args.micro_batch),
           "--seq-len", str(args.seq_len), "--backend", args.backend, "--log-every", "0",
           "--document-masking", masking, "--comm-timeout", "60"] + list(extra) + args.extra
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    with open(os.path.join(out, "run.json")) as f:
        ran = json.load(f)["config"]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ran["loss_tokens"] = json.loads(f.readline())["loss_tokens"]
    return report, ran


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--preset", default="small")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--doc-min", type=int, default=200)
    p.add_argument("--doc-max", type=int, default=800)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("extra", nargs="*", help="more train options (after --)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        needed = (args.steps + 1) * args.micro_batch * (args.seq_len + 1) * 2
        paths = write_documents(tmp, needed, args.doc_min, args.doc_max)
        data = os.path.join(tmp, "docs.h5")
        subprocess.run([args.zerotrain, "prepare-data", "--text", *paths, "--out", data],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"preset {args.preset}, backend {args.backend}, micro-batch {args.micro_batch} x "
              f"seq {args.seq_len}, {args.steps} steps, {len(paths)} documents of "
              f"{args.doc_min}-{args.doc_max} tokens")
        rows = [("off", "off", ()), ("on", "on", ())]
        if args.backend == "cuda":
            rows = [(f"{mode}-{kernel}", mode, ("--attention", kernel))
                    for kernel in ("fused", "gemm") for mode in ("off", "on")]
        best, refused = {}, set()
        for r in range(args.repeats):
            for label, masking, extra in rows:
                if label in refused:
                    continue
                try:
                    report, ran = train(args, data, os.path.join(tmp, f"{label}{r}"), masking,
                                        extra)
                except subprocess.CalledProcessError as e:
                    if "fused" not in label:
                        raise
                    # fused with masks runs on Hopper only, and not at all without cuDNN
                    print(f"  run {r + 1} {label:>8}: zerotrain exited {e.returncode} (its error "
                          "above); this row is left out", flush=True)
                    refused.add(label)
                    continue
                check = ran.get("document_masking")
                if check != masking:
                    raise SystemExit(f"run.json says document_masking {check!r}, ran {masking}")
                tps = report["mean_tokens_per_s"]
                graphs = report.get("attention_graphs")  # the fused rows: cuDNN's graph builds
                built = (f", cuDNN graphs built in steps {graphs['built_in_steps']} in "
                         f"{graphs['build_s_in_steps']:.2f} s" if graphs else "")
                print(f"  run {r + 1} {label:>8}: {tps:10.1f} tokens/s, attention "
                      f"{ran.get('attention_kernel')}, loss tokens of step 1 {ran['loss_tokens']}"
                      f"{built}", flush=True)
                best[label] = max(best.get(label, 0.0), tps)
        ratios = []
        for on in (label for label in best if label.startswith("on")):
            off = on.replace("on", "off", 1)
            if off in best:
                ratios.append(f"{on}/{off} {best[on] / best[off]:.3f}")
        print("best tokens/s: " + ", ".join(f"{k} {v:.1f}" for k, v in best.items()) + "; " +
              ", ".join(ratios))


if __name__ == "__main__":
    main()
