"""What the oracles of whole training runs share (test_gradient_clipping.py,
test_loss_weighting.py): a run's metrics.jsonl checked step by step against a reference
trajectory (loss, and grad_norm before clipping), and its last checkpoint's fp32 masters against
the reference's final ones, each within a relative bound."""

import json
import os

import numpy as np
import torch

from oracle_harness import check, checkpoint_masters


def relative(got, want):
    return abs(got - want) / max(abs(want), 1e-30)


def metrics_lines(what, out, steps):
    """OUT/metrics.jsonl's lines, one per step."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    check(len(lines) == steps, f"{what}: {len(lines)} metrics lines, want {steps}")
    return lines


def check_losses_and_norms(what, lines, want_losses, want_norms, tolerance):
    """Each step's loss and grad_norm within `tolerance` (relative) of the reference's."""
    for step, (m, loss, norm) in enumerate(zip(lines, want_losses, want_norms), start=1):
        check(relative(m["loss"], loss) < tolerance,
              f"{what}: step {step} loss {m['loss']} vs PyTorch {loss}")
        check(relative(m["grad_norm"], norm) < tolerance,
              f"{what}: step {step} grad_norm {m['grad_norm']} vs PyTorch {norm}")
    print(f"{what}: grad_norm " + " ".join(f"{m['grad_norm']:.7f}" for m in lines))


def check_final_masters(what, out, step, want_masters, tolerance):
    """Every tensor's fp32 master in OUT's checkpoint of `step` within `tolerance` (relative, in
    the Frobenius norm) of the reference's."""
    masters = checkpoint_masters(os.path.join(out, "checkpoints", f"step-{step:08d}"))
    check(set(masters) == set(want_masters), f"{what}: the checkpoint's tensors")
    worst = 0.0
    for name, (value, _) in masters.items():
        want = want_masters[name]
        err = ((torch.from_numpy(value.astype(np.float64)) - want).norm() /
               max(want.norm().item(), 1e-30)).item()
        worst = max(worst, err)
        check(err < tolerance, f"{what}: final master {name} differs from PyTorch by {err:.2e}")
    print(f"{what}: final masters within {worst:.2e} of PyTorch")
