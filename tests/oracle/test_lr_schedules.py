#!/usr/bin/python3
"""DeepSpeed learning-rate schedules against DeepSpeed's own code (CTest label "oracle").

For each case (WarmupLR, WarmupDecayLR, WarmupCosineLR; log and linear warmups; non-zero
warmup_min_lr / warmup_min_ratio; a cosine floor), trains the tiny preset with a DeepSpeed JSON
config holding that `scheduler` block and reads the learning rate of every step from
OUT/metrics.jsonl. The reference is DeepSpeed's deepspeed/runtime/lr_schedules.py, taken from its
PyPI source distribution (./run.sh deps downloads it) and run unmodified on a torch optimizer the
way DeepSpeed's engine drives it: the constructor, then per step the optimizer's current rate is
used and scheduler.step() follows (DeepSpeedEngine._take_model_step). zerotrain's rate is a
float32, so the two must agree to float32 rounding.

--shift K --expect-mismatch compares step s with DeepSpeed's step s+K and passes only if every
case then mismatches: the comparison can fail (an off-by-one step convention is caught).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import types

import torch

from oracle_harness import SetupError, argument_parser, extract_from_sdist

STEPS = 40
REL_TOLERANCE = 2e-7  # a float32's rounding
ABS_TOLERANCE = 1e-12


def load_deepspeed_lr_schedules(sdist, work_dir):
    """DeepSpeed's lr_schedules module from its sdist, with the one DeepSpeed import it makes
    (deepspeed.utils.logger) provided by a stub package."""
    path = extract_from_sdist(sdist, "deepspeed/runtime/lr_schedules.py", work_dir)
    deepspeed = types.ModuleType("deepspeed")
    utils = types.ModuleType("deepspeed.utils")
    utils.logger = logging.getLogger("deepspeed")
    deepspeed.utils = utils
    sys.modules.setdefault("deepspeed", deepspeed)
    sys.modules.setdefault("deepspeed.utils", utils)
    spec = importlib.util.spec_from_file_location("deepspeed_lr_schedules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def deepspeed_rates(schedules, kind, params, optimizer_lr, steps):
    """The rate of each optimizer step in a DeepSpeed run with this scheduler."""
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.AdamW([weight], lr=optimizer_lr)
    scheduler = getattr(schedules, kind)(optimizer, **params)
    rates = []
    for _ in range(steps):
        rates.append(float(optimizer.param_groups[0]["lr"]))
        scheduler.step()
    return rates


def zerotrain_rates(zerotrain, data, work_dir, name, config, steps):
    config_path = os.path.join(work_dir, name + ".json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    out = os.path.join(work_dir, name)
    cmd = [zerotrain, "train", "--deepspeed", config_path, "--preset", "tiny", "--data", data,
           "--out", out, "--overwrite", "--steps", str(steps), "--seq-len", "16",
           "--micro-batch", "1", "--log-every", "0"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        print(proc.stdout)
        raise SetupError(f"zerotrain train exited with {proc.returncode} on {name}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["lr"] for line in f]


CASES = [
    ("WarmupLR", {"warmup_min_lr": 1e-5, "warmup_max_lr": 2e-3, "warmup_num_steps": 12}),
    ("WarmupLR", {"warmup_max_lr": 1e-3, "warmup_num_steps": 9, "warmup_type": "linear"}),
    ("WarmupLR", {"warmup_num_steps": 7}),  # the peak is the optimizer's lr
    ("WarmupLR", {"warmup_max_lr": 1e-3, "warmup_num_steps": 1}),  # a warmup of max(2, 1)
    ("WarmupDecayLR", {"total_num_steps": STEPS, "warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
                       "warmup_num_steps": 8}),
    ("WarmupDecayLR", {"total_num_steps": STEPS, "warmup_max_lr": 1e-3, "warmup_num_steps": 5,
                       "warmup_type": "linear"}),
    ("WarmupCosineLR", {"total_num_steps": STEPS, "warmup_num_steps": 10,
                        "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05}),
    ("WarmupCosineLR", {"total_num_steps": STEPS, "warmup_num_steps": 6, "warmup_type": "linear"}),
    # A schedule longer than the run: DeepSpeed decays over total_num_steps, not the run's steps.
    ("WarmupCosineLR", {"total_num_steps": 3 * STEPS, "warmup_num_steps": 5}),
    ("WarmupDecayLR", {"total_num_steps": 2 * STEPS, "warmup_num_steps": 3}),
]
OPTIMIZER_LR = 6e-4  # WarmupCosineLR scales it; the Warmup(Decay)LR cases set their own peak


def main():
    parser = argument_parser(__doc__.split("\n")[0], deepspeed_sdist=True)
    parser.add_argument("--shift", type=int, default=0)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    try:
        schedules = load_deepspeed_lr_schedules(args.deepspeed_sdist, args.work_dir)
        data = os.path.join(args.work_dir, "sample.h5")
        subprocess.run([args.zerotrain, "prepare-data", "--text",
                        os.path.join(args.source_dir, "inputs/data/sample.txt"), "--out", data],
                       check=True, stdout=subprocess.DEVNULL)
    except (SetupError, subprocess.CalledProcessError) as e:
        print(f"SETUP ERROR: {e}")
        return 2
    failures = 0
    for index, (kind, params) in enumerate(CASES):
        config = {"train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"type": "AdamW", "params": {"lr": OPTIMIZER_LR}},
                  "scheduler": {"type": kind, "params": params}}
        name = f"case{index}_{kind}"
        try:
            got = zerotrain_rates(args.zerotrain, data, args.work_dir, name, config, STEPS)
        except SetupError as e:
            print(f"SETUP ERROR: {e}")
            return 2
        want = deepspeed_rates(schedules, kind, params, OPTIMIZER_LR, STEPS + abs(args.shift))
        want = want[args.shift:] if args.shift >= 0 else [want[0]] * -args.shift + want
        bad = [(s + 1, g, w) for s, (g, w) in enumerate(zip(got, want))
               if abs(g - w) > REL_TOLERANCE * abs(w) + ABS_TOLERANCE]
        mismatch = len(got) != STEPS or bool(bad)
        if mismatch != args.expect_mismatch:
            failures += 1
        if mismatch:
            print(f"{'ok  ' if args.expect_mismatch else 'FAIL'} {name} {params}: {len(got)} "
                  f"steps; {len(bad)} mismatches, first (step, zerotrain, DeepSpeed): {bad[:3]}")
        else:
            print(f"{'FAIL' if args.expect_mismatch else 'ok  '} {name}: {STEPS} steps, rates "
                  f"{got[0]:.3g} … {max(got):.3g} … {got[-1]:.3g} equal to DeepSpeed's")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
