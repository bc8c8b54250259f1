#!/usr/bin/env python3
"""A global batch's loss over uneven counted targets, against transformers' Trainer arithmetic
(CTest label "oracle"; runs in the project venv, ./run.sh deps).

SFT data count some targets and not others (/loss_mask), so the micro-batches and ranks of one
global batch hold different numbers of counted targets. zerotrain's step loss is the mean over the
counted targets of the whole global batch (docs/checkpoints-and-formats.md): the Hugging Face
Trainer's since transformers 4.46 with average_tokens_across_devices, where each micro-batch's
loss is transformers' fixed_cross_entropy with num_items_in_batch, the global batch's count, and
the micro-batches' and ranks' losses add up.

The tiny preset trains every tensor (fp32, constant learning rate, no clipping) for STEPS steps on
4 windows of 16 targets, of which COUNTED = (2, 5, 16, 11) count: each step's global batch is the
4 windows. The reference is llama_reference.py's plain-PyTorch Llama in float64 with that loss
and torch.optim.AdamW. Each world below must log each step's loss and grad_norm, and leave final
fp32 masters, within test_oracle.py's fp32 bound (1e-4 relative), and count 34 targets a step
(loss_tokens):
  - 1 rank stage 0, 4 micro-batches of one window;
  - 2 ranks at stage 1, 2 micro-batches each;
  - 2 ranks at stage 3, one micro-batch of 2 windows each;
  - 2 ranks at stage 2, world-invariant, 2 micro-batches each.
The engine's stage and world tests compare with 1 rank stage 0, which shares any weighting it
has; this one holds it to the Trainer's.

--mutation M --expect-mismatch weights the reference otherwise and passes only if a world's
comparison fails: "micro-batch-means" (each micro-batch's own mean, the means averaged: DeepSpeed
scaling each micro-batch's loss by 1/gradient_accumulation_steps, and the Trainer before 4.46),
"rank-counts" (each rank's count, the ranks' losses averaged: the Trainer 4.46's default,
average_tokens_across_devices off, with windows 0-1 on rank 0 and 2-3 on rank 1).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (SetupError, check, exit_status,  # noqa: E402
                            MPIRUN_ARGUMENT, mutation_oracle_arguments, run_tool,
                            write_byte_windows)

STEPS, SEQ_LEN, LR = 6, 16, 1e-3
COUNTED = (2, 5, 16, 11)  # counted targets of each window
HYPER = (LR, 0.1, (0.9, 0.95), 1e-8)  # lr, weight decay, betas, eps: zerotrain's defaults
TOLERANCE = 1e-4  # test_oracle.py's fp32 bound (relative; float64 reference)
IGNORE = -100  # PyTorch's and transformers' ignore_index
MUTATIONS = ("micro-batch-means", "rank-counts")


def write_masked_windows(path, sample):
    """len(COUNTED) windows of SEQ_LEN + 1 byte tokens with a /loss_mask counting COUNTED[w] of
    window w's targets (tokens w·SEQ_LEN + 1 ... w·SEQ_LEN + SEQ_LEN), chosen at random. Returns
    the windows' tokens [W, SEQ_LEN + 1] and targets [W, SEQ_LEN] (IGNORE where not counted)."""
    import h5py
    import numpy as np
    import torch
    data = write_byte_windows(path, sample, len(COUNTED), SEQ_LEN)
    rng = np.random.default_rng(1234)
    mask = np.zeros(len(data), dtype=np.uint8)
    for w, n in enumerate(COUNTED):
        mask[w * SEQ_LEN + 1 + rng.choice(SEQ_LEN, size=n, replace=False)] = 1
    with h5py.File(path, "r+") as f:
        f.create_dataset("loss_mask", data=mask)
    windows = np.stack([data[w * SEQ_LEN:(w + 1) * SEQ_LEN + 1] for w in range(len(COUNTED))])
    counted = np.stack([mask[w * SEQ_LEN + 1:(w + 1) * SEQ_LEN + 1] for w in range(len(COUNTED))])
    tokens = torch.from_numpy(windows.astype(np.int64))
    targets = tokens[:, 1:].clone()
    targets[torch.from_numpy(counted) == 0] = IGNORE
    return tokens, targets


def trainer_loss(targets, mutation=None):
    """loss_fn(logits [W, T, V], unmasked targets) for adamw_clipped_trajectory: the Trainer's
    sum over micro-batches (one window each) of fixed_cross_entropy(..., num_items_in_batch=the
    global count), or a mutation's weighting (module docstring)."""
    from transformers.loss.loss_utils import fixed_cross_entropy
    W = targets.shape[0]
    counts = [int((targets[w] != IGNORE).sum()) for w in range(W)]

    def window_loss(logits, w, count):
        return fixed_cross_entropy(logits[w], targets[w], num_items_in_batch=count,
                                   ignore_index=IGNORE)

    def loss(logits, _unmasked):
        if mutation == "micro-batch-means":
            return sum(window_loss(logits, w, None) for w in range(W)) / W
        if mutation == "rank-counts":
            ranks = [range(0, W // 2), range(W // 2, W)]
            return sum(sum(window_loss(logits, w, sum(counts[v] for v in r)) for w in r)
                       for r in ranks) / len(ranks)
        return sum(window_loss(logits, w, sum(counts)) for w in range(W))
    return loss


def train_args(zt, work, out, world_args):
    return [zt, "train", "--model", work("model"), "--data", work("tok.h5"), "--out", out,
            "--precision", "fp32", "--steps", str(STEPS), "--seq-len", str(SEQ_LEN),
            "--lr", str(LR), "--min-lr", str(LR), "--warmup-steps", "0", "--clip", "0",
            "--save-every", str(STEPS), "--log-every", "0"] + world_args


def checks(args, work, torch):
    import llama_reference as ref
    from trajectory_checks import (check_final_masters, check_losses_and_norms, metrics_lines,
                                   relative)
    zt = args.zerotrain
    run_tool([zt, "init", "--preset", "tiny", "--seed", "1234", "--out", work("model")])
    tokens, targets = write_masked_windows(
        work("tok.h5"), os.path.join(args.source_dir, "inputs", "data", "sample.txt"))
    config = ref.load_config(work("model"))
    weights = ref.load_weights(work("model"), torch.float64)

    def trajectory(mutation):
        return ref.adamw_clipped_trajectory(weights, config, tokens, set(weights), STEPS, HYPER,
                                            0, loss_fn=trainer_loss(targets, mutation))
    losses, norms, masters = trajectory(args.mutation)
    print("PyTorch loss: " + " ".join(f"{x:.7f}" for x in losses))
    print("PyTorch grad_norm: " + " ".join(f"{x:.7f}" for x in norms))
    if not args.mutation:  # the weightings this test tells apart differ well beyond its bound
        for other in MUTATIONS:
            theirs = trajectory(other)
            if relative(theirs[1][0], norms[0]) < 100 * TOLERANCE:
                raise SetupError(f"the {other} weighting's first grad_norm {theirs[1][0]} is "
                                 f"within {100 * TOLERANCE} of the Trainer's {norms[0]}")
    mpirun = [args.mpirun, "--oversubscribe", "-n", "2"]
    worlds = [
        ("1 rank stage 0, 4 micro-batches", [], ["--micro-batch", "1", "--grad-accum", "4"]),
        ("2 ranks stage 1, 2 micro-batches each", mpirun,
         ["--zero-stage", "1", "--micro-batch", "1", "--grad-accum", "2"]),
        ("2 ranks stage 3, micro-batch 2", mpirun,
         ["--zero-stage", "3", "--micro-batch", "2", "--grad-accum", "1"]),
        ("2 ranks stage 2 world-invariant, 2 micro-batches each", mpirun,
         ["--zero-stage", "2", "--world-invariant", "--micro-batch", "1", "--grad-accum", "2"]),
    ]
    for i, (what, launcher, world_args) in enumerate(worlds):
        out = work(f"run{i}")
        run_tool(launcher + train_args(zt, work, out, world_args))
        lines = metrics_lines(what, out, STEPS)
        check(all(m["loss_tokens"] == sum(COUNTED) for m in lines),
              f"{what}: loss_tokens {[m['loss_tokens'] for m in lines]}, want {sum(COUNTED)}")
        check_losses_and_norms(what, lines, losses, norms, TOLERANCE)
        check_final_masters(what, out, STEPS, masters, TOLERANCE)


def main():
    args, work, torch = mutation_oracle_arguments(__doc__.split("\n")[0], MUTATIONS,
                                                  "transformers", extra=[MPIRUN_ARGUMENT])
    return exit_status(lambda: checks(args, work, torch), mutation=args.mutation,
                       mutation_fails="vs PyTorch")


if __name__ == "__main__":
    sys.exit(main())
