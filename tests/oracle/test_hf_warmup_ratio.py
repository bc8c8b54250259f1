#!/usr/bin/env python3
"""train --warmup-ratio against the Hugging Face Trainer's own arithmetic (label oracle).

For each case, the tiny preset trains on the first 1000 bytes of the bundled text (31 windows of
33 tokens at --seq-len 32) with --warmup-ratio R, for --steps S or for --epochs E (which come to
S steps once the data is open). The reference is transformers' TrainingArguments(warmup_ratio=R)
.get_warmup_steps(S), run unmodified: run.json's warmup_steps must equal it, and the first step's
learning rate must be --lr / warmup (the linear warmup's first step, in float32). Every step's
rate (the default --lr-schedule cosine, --min-lr MIN_LR) must be, to float32 rounding, --lr times
the multiplier of transformers' get_cosine_with_min_lr_schedule_with_warmup(warmup, S,
min_lr=MIN_LR) at current_step = s: zerotrain's step s trains at the rate the Trainer's step s + 1
would (docs/running.md: its first step is above 0, and its last at --min-lr). Refused, naming
what was given: a ratio outside [0, 1], and --warmup-ratio beside --warmup-steps (from the command
line, or warmup_num_steps from a DeepSpeed JSON, whose file the message names).

--mutation floor --expect-mismatch compares with floor(R·S) instead, and --mutation trainer-step
compares step s with the Trainer's own step s (the multiplier at s − 1); each passes only if a
case then mismatches: the comparisons can fail.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            refused, require_venv_modules, run_tool)

LR, MIN_LR = 1e-3, 1e-4
# (ratio, run length): --steps S, or --epochs E (31 windows, 4 a step).
CASES = [(0.03, ["--steps", "100"]), (0.1, ["--steps", "7"]), (0.333, ["--steps", "10"]),
         (0.05, ["--steps", "41"]), (0.3, ["--epochs", "0.5"]), (0.25, ["--epochs", "2"])]


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--mutation", choices=["floor", "trainer-step"])
    parser.add_argument("--expect-mismatch", action="store_true")
    args = parser.parse_args()
    torch = require_venv_modules("torch", "transformers")[0]
    from transformers import TrainingArguments
    from transformers.optimization import get_cosine_with_min_lr_schedule_with_warmup

    def transformers_rates(warmup, steps):
        """--lr times transformers' multiplier at current_step = s (the mutation: s − 1), for
        s = 1 ... steps."""
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
        multiplier = get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, warmup, steps, min_lr=MIN_LR).lr_lambdas[0]
        shift = 1 if args.mutation == "trainer-step" else 0
        return [LR * multiplier(s - shift) for s in range(1, steps + 1)]
    work = fresh_work_dir(args.work_dir)
    zt = args.zerotrain

    def checks():
        with open(os.path.join(args.source_dir, "inputs", "data", "sample.txt"), "rb") as f:
            head = f.read(1000)
        with open(work("head.txt"), "wb") as f:
            f.write(head)
        run_tool([zt, "prepare-data", "--text", work("head.txt"), "--out", work("head.h5")])
        train = [zt, "train", "--preset", "tiny", "--seed", "3", "--data", work("head.h5"),
                 "--seq-len", "32", "--micro-batch", "4", "--log-every", "0", "--lr", str(LR),
                 "--min-lr", str(MIN_LR)]
        for n, (ratio, length) in enumerate(CASES):
            out = work(f"run{n}")
            run_tool(train + length + ["--warmup-ratio", str(ratio), "--out", out])
            with open(os.path.join(out, "run.json")) as f:
                config = json.load(f)["config"]
            steps = config["steps"]
            reference = TrainingArguments(output_dir=work("hf"), warmup_ratio=ratio,
                                          report_to=[])
            want = reference.get_warmup_steps(steps)
            if args.mutation == "floor":
                want = math.floor(steps * ratio)
            got = config["warmup_steps"]
            print(f"--warmup-ratio {ratio} {' '.join(length)}: {steps} steps, warmup {got}; "
                  f"transformers' get_warmup_steps({steps}) = {want}")
            check(got == want, f"--warmup-ratio {ratio} over {steps} steps: warmup {got}, "
                  f"transformers {want}")
            with open(os.path.join(out, "metrics.jsonl")) as f:
                rates = [json.loads(line)["lr"] for line in f]
            check(math.isclose(rates[0], LR / got, rel_tol=2 ** -23),
                  f"step 1's learning rate {rates[0]} is not --lr / {got}")
            check(len(rates) == steps, f"{len(rates)} metrics lines for {steps} steps")
            for s, (rate, want_rate) in enumerate(zip(rates, transformers_rates(got, steps)), 1):
                check(math.isclose(rate, want_rate, rel_tol=2 ** -23),
                      f"--warmup-ratio {ratio} over {steps} steps: step {s}'s learning rate "
                      f"{rate}, transformers' cosine with min_lr {want_rate}")
        bad = work("bad")
        refused(train + ["--steps", "4", "--warmup-ratio", "1.5", "--out", bad],
                "--warmup-ratio must lie in [0, 1], got 1.5")
        refused(train + ["--steps", "4", "--warmup-ratio", "0.1", "--warmup-steps", "2", "--out",
                         bad], "give --warmup-steps or --warmup-ratio, not both")
        with open(work("ds.json"), "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": 4, "scheduler": {
                "type": "WarmupLR", "params": {"warmup_num_steps": 2}}}, f)
        refused(train + ["--steps", "4", "--warmup-ratio", "0.1", "--deepspeed", work("ds.json"),
                         "--out", bad], work("ds.json"))

    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       "transformers")


if __name__ == "__main__":
    sys.exit(main())
