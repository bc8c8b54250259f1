#!/usr/bin/env python3
"""Greedy decoding speed: `zerotrain generate` (one process, CPU, a key/value cache) beside
transformers' forward with past_key_values over the same exported model, the same prompt ids and
the same number of new tokens, in one run of this script. transformers' generate() does not import
under Debian's torch 1.13, so its decoding is the loop generate(do_sample=False) runs: argmax of
the last logits, the cache handed back.

zerotrain's figure is per new token at the margin: (wall of N new tokens − wall of 1) / (N − 1),
so that the process start, the weights' load and the tokenizer's Python steps cancel.
transformers' is its decoding loop alone per forward after the prompt's (N − 1 of them), on one
thread and on every core this process may use. Each is the
best of --repeats, the runs alternating. The model is a zerotrain model directory (the SmolLM2
import of ./run.sh deps), exported to safetensors for transformers.

  .venv/bin/python bench/bench_generate.py --zerotrain build/zerotrain --model DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def zerotrain_run(args, new_tokens):
    cmd = [args.zerotrain, "generate", "--model", args.model, "--prompt", args.prompt,
           "--max-new-tokens", str(new_tokens), "--ignore-eos", "--json",
           "--python", sys.executable]
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    return wall, json.loads(out.strip().splitlines()[-1])


def transformers_decode(model, prompt_ids, new_tokens):
    import torch
    with torch.no_grad():
        out = model(torch.tensor([prompt_ids]), use_cache=True)
        ids = []
        start = time.perf_counter()
        for i in range(new_tokens):
            nxt = int(out.logits[0, -1].argmax())
            ids.append(nxt)
            if i + 1 < new_tokens:
                out = model(torch.tensor([[nxt]]), past_key_values=out.past_key_values,
                            use_cache=True)
        return time.perf_counter() - start, ids


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--model", required=True, help="a zerotrain model directory")
    p.add_argument("--prompt", default="The history of the printing press begins")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = os.path.join(tmp, "hf")
        subprocess.run([args.zerotrain, "export", args.model, "--format", "safetensors",
                        "--out", hf_dir], check=True, capture_output=True)
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    # torch on one thread and on every core this process may use (zerotrain's OpenMP uses them
    # all); on small decoding steps one thread can be the faster, and the faster is the reference.
    thread_counts = sorted({1, len(os.sched_getaffinity(0))})
    zt_best, zt_one = float("inf"), float("inf")
    hf_best = {n: float("inf") for n in thread_counts}
    for _ in range(args.repeats):
        wall, answer = zerotrain_run(args, args.new_tokens)
        zt_best = min(zt_best, wall)
        zt_one = min(zt_one, zerotrain_run(args, 1)[0])
        for n in thread_counts:
            torch.set_num_threads(n)
            seconds, hf_ids = transformers_decode(model, answer["prompt_tokens"], args.new_tokens)
            hf_best[n] = min(hf_best[n], seconds)
    ours = answer["new_tokens"]
    same = next((i for i, (a, b) in enumerate(zip(ours, hf_ids)) if a != b), len(ours))
    zt_per_token = (zt_best - zt_one) / (args.new_tokens - 1)
    print(f"prompt {len(answer['prompt_tokens'])} tokens, {args.new_tokens} new, greedy, fp32, "
          f"torch {torch.__version__}, best of {args.repeats}")
    print(f"zerotrain generate          {zt_best:8.2f} s for {args.new_tokens} tokens, "
          f"{zt_one:6.2f} s for 1: {1 / zt_per_token:7.1f} tokens/s "
          f"({1000 * zt_per_token:.1f} ms per token)")
    for n in thread_counts:
        per_token = hf_best[n] / (args.new_tokens - 1)  # the forwards after the prompt's
        print(f"transformers, {n} thread(s)  {hf_best[n]:8.2f} s of decoding: "
              f"{1 / per_token:7.1f} tokens/s ({1000 * per_token:.1f} ms per token)")
    strongest = min(hf_best.values()) / (args.new_tokens - 1)
    print(f"zerotrain / the faster transformers row: {strongest / zt_per_token:.2f}x tokens/s")
    print(f"tokens equal to transformers' greedy ones: the first {same} of {len(ours)}")


if __name__ == "__main__":
    main()
