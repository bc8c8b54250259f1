#!/usr/bin/env python3
"""Chat SFT data preparation: conversations/s of `prepare-data --chat-template --workers N`
beside transformers' own apply_chat_template(tokenize=True) over the same conversations, in one
process and in N (a fork pool, as datasets' map(num_proc=N) runs it), in one run of this script.

The conversations are --count lines of TRL's conversational format, a system prompt and
--turns user/assistant rounds each, cut from inputs/data/sample.txt. The tokenizer is a model
directory's (the SmolLM2 import of ./run.sh deps: `zerotrain import
.deps/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out DIR`). zerotrain's figure is the whole
command (the interpreter's start, the tokenizer's load, the HDF5 writing); transformers' is its
loop alone, tokenizer loaded, and does less: it renders each conversation once, while zerotrain
also renders the turns before each reply to find which tokens count (the loss mask). Each row is
the best of --repeats, the rows alternating.

  .venv/bin/python bench/bench_prepare_workers.py --zerotrain build/zerotrain --tokenizer DIR
"""
import argparse
import json
import multiprocessing
import os
import subprocess
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def conversations(count, turns):
    with open(os.path.join(ROOT, "inputs", "data", "sample.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    chats, at = [], 0
    for _ in range(count):
        chat = [{"role": "system", "content": "You are a helpful assistant."}]
        for _ in range(turns):
            chat += [{"role": "user", "content": lines[at % len(lines)]},
                     {"role": "assistant", "content": lines[(at + 1) % len(lines)]}]
            at += 2
        chats.append(chat)
    return chats


_TOKENIZER = None


def _render(chat):
    return len(_TOKENIZER.apply_chat_template(chat, tokenize=True))


def transformers_seconds(tokenizer_dir, chats, workers):
    """Seconds of apply_chat_template(tokenize=True) over the chats, tokenizer loaded first."""
    global _TOKENIZER
    os.environ.update(USE_TORCH="0", TOKENIZERS_PARALLELISM="false")
    import transformers
    _TOKENIZER = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    started = time.perf_counter()
    if workers == 1:
        tokens = sum(map(_render, chats))
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            tokens = sum(pool.imap(_render, chats, chunksize=8))
    return time.perf_counter() - started, tokens


def zerotrain_seconds(args, data, out, workers):
    started = time.perf_counter()
    said = subprocess.run([args.zerotrain, "prepare-data", "--tokenizer", args.tokenizer,
                           "--sft-jsonl", data, "--messages-field", "messages",
                           "--chat-template", "--workers", str(workers), "--out", out,
                           "--overwrite"], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - started, int(said.split(": ")[1].split()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zerotrain", required=True)
    parser.add_argument("--tokenizer", required=True, help="a model or tokenizer directory")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="comma-separated counts")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    chats = conversations(args.count, args.turns)
    counts = [int(w) for w in args.workers.split(",")]
    print(f"{args.count} conversations of a system prompt and {args.turns} rounds; "
          f"{os.cpu_count()} CPUs; tokenizer {args.tokenizer}")
    with tempfile.TemporaryDirectory() as scratch:
        data = os.path.join(scratch, "chats.jsonl")
        with open(data, "w", encoding="utf-8") as f:
            for chat in chats:
                f.write(json.dumps({"messages": chat}) + "\n")
        first = os.path.join(scratch, "first.jsonl")
        with open(first, "w", encoding="utf-8") as f:
            f.write(json.dumps({"messages": chats[0]}) + "\n")
        best = {}
        for _ in range(args.repeats):
            start = zerotrain_seconds(args, first, os.path.join(scratch, "o.h5"), 1)
            best["start"] = min(best.get("start", start), start)
            for workers in counts:
                for who in ("zerotrain", "transformers"):
                    seconds, tokens = (
                        zerotrain_seconds(args, data, os.path.join(scratch, "o.h5"), workers)
                        if who == "zerotrain" else
                        transformers_seconds(args.tokenizer, chats, workers))
                    key = (who, workers)
                    best[key] = min(best.get(key, (seconds, tokens)), (seconds, tokens))
    print(f"zerotrain on the first conversation alone (the interpreter's start, the tokenizer's "
          f"load, the writing): {best.pop('start')[0]:.2f} s")
    print(f"{'who':<14}{'workers':>8}{'seconds':>10}{'conv/s':>10}{'tokens':>10}")
    for (who, workers), (seconds, tokens) in sorted(best.items()):
        print(f"{who:<14}{workers:>8}{seconds:>10.2f}{args.count / seconds:>10.0f}{tokens:>10}")
    for workers in counts[1:]:
        print(f"zerotrain --workers {workers}: "
              f"{best[('zerotrain', 1)][0] / best[('zerotrain', workers)][0]:.2f}x --workers 1")


if __name__ == "__main__":
    main()
