#!/usr/bin/env python3
"""Frozen parameters (`train --trainable/--freeze`) against PyTorch with requires_grad=False (label
oracle).

The tiny preset trains lm_head, the final norm and layer 1's MLP (fp32 working params, constant
learning rate, no clipping) on one global batch of 2 windows, at 1 rank stage 0 and at 2 ranks
stage 3. The reference is llama_reference.py's plain-PyTorch Llama in float64: every tensor a
leaf, requires_grad only on the trainable ones (chosen here with Python's re.search, an
independent reading of the patterns), torch.optim.AdamW over those alone with zerotrain's
weight-decay rule.
1. Each step's loss (metrics.jsonl) and each trainable tensor's final fp32 master (read from the
   last checkpoint's rank files) equal the reference's within test_oracle.py's fp32 bound, 1e-4
   relative.
2. Every frozen tensor's final master is bitwise its initial value, and OUT/final/ holds it
   bitwise as the starting model did; `consolidate` of the checkpoint writes the whole model,
   bitwise OUT/final/; run.json counts the trainable parameters and names the frozen tensors.
3. In bf16 (2 ranks stage 3) the checkpoint's rank files store the frozen groups' values in 16
   bits, read back bitwise the starting model's, and consolidate to OUT/final/ bitwise.
4. A resume with another trainable set is refused naming a tensor, and the checkpoint stays;
   a pattern that matches nothing is refused naming it.
5. `estimate` of the 6B analysis's projection-only case (6b, lm_head and the final norm, bf16, one
   GPU): 2 bytes per parameter plus 16 per trainable one; a checkpoint of it holds 2 bytes per
   parameter plus 10 more per trainable one.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, checkpoint_masters, refused,  # noqa: E402
                            exit_status, fresh_work_dir, run_tool, write_byte_windows)
import llama_reference as ref  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

TRAINABLE = [r"^lm_head\.", r"^model\.norm\.", r"layers\.1\.mlp\."]
STEPS, SEQ_LEN, WINDOWS, LR = 4, 16, 2, 1e-3
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.95), 1e-8, 0.1
TOLERANCE = 1e-4  # test_oracle.py's fp32 bound (relative; float64 reference)


def write_tokens(path, sample):
    """A dataset of exactly WINDOWS windows of SEQ_LEN + 1 tokens: every step's global batch is
    all of them. Returns the windows [WINDOWS, SEQ_LEN + 1]."""
    data = write_byte_windows(path, sample, WINDOWS, SEQ_LEN)
    windows = [data[w * SEQ_LEN: w * SEQ_LEN + SEQ_LEN + 1].astype(np.int64)
               for w in range(WINDOWS)]
    return torch.from_numpy(np.stack(windows))


def rel_error(got, want):
    want = want.to(torch.float64)
    return ((torch.from_numpy(np.asarray(got, dtype=np.float64)) - want).norm() /
            max(want.norm().item(), 1e-30)).item()


def model_tensors(model_dir):
    return ref.load_weights(model_dir, torch.float32)


def train_args(zt, work, out, world_args, precision="fp32"):
    return [zt, "train", "--model", work("model"), "--data", work("tok.h5"), "--out", out,
            "--precision", precision, "--steps", str(STEPS), "--seq-len", str(SEQ_LEN),
            "--lr", str(LR), "--min-lr", str(LR), "--warmup-steps", "0", "--clip", "0",
            "--save-every", str(STEPS), "--log-every", "0"] + world_args + \
        [a for p in TRAINABLE for a in ("--trainable", p)]


def check_bf16_checkpoint(zt, work, mpirun, initial, trainable):
    """bf16 at 2 ranks stage 3: every rank file stores the frozen groups' values in 16 bits and
    the trained groups' state in 32; read back, each frozen tensor is the starting model's bitwise;
    the checkpoint consolidates to OUT/final/, bitwise, whose frozen tensors are the start's."""
    import h5py
    out = work("two-bf16")
    run_tool([mpirun, "--oversubscribe", "-n", "2"] + train_args(
        zt, work, out, ["--micro-batch", "1", "--grad-accum", "1", "--zero-stage", "3"], "bf16"))
    step = os.path.join(out, "checkpoints", f"step-{STEPS:08d}")
    sizes = set()
    for r in range(2):
        with h5py.File(os.path.join(step, f"rank-{r:05d}.h5"), "r") as f:
            for group in f.values():
                size = group["master"].id.get_type().get_size()
                sizes.add((size, "m" in group))
    check(sizes == {(2, False), (4, True)},
          f"bf16: (bytes per stored master element, has moments) in the rank files: {sizes}")
    for name, (value, frozen) in checkpoint_masters(step).items():
        if frozen:
            check(np.array_equal(value, initial[name].numpy()), f"bf16: frozen {name} changed")
    final = model_tensors(os.path.join(out, "final"))
    run_tool([zt, "consolidate", step, "--out", out + "-consolidated"])
    consolidated = model_tensors(out + "-consolidated")
    check(set(consolidated) == set(final) and
          all(torch.equal(consolidated[n], final[n]) for n in final),
          "bf16: the consolidated checkpoint differs from final/")
    check(all(torch.equal(final[n], initial[n]) for n in initial if n not in trainable),
          "bf16: a frozen tensor of final/ changed")
    print("bf16: the frozen groups stored in 16 bits, read back bitwise the start's; the "
          "checkpoint consolidates to final/ bitwise")


def check_estimates(zt):
    """The 6B analysis's projection-only estimate, and the checkpoint bytes of frozen tensors."""
    est = json.loads(run_tool([zt, "estimate", "--preset", "6b", "--json", "--trainable",
                               r"^lm_head\.", "--trainable", r"^model\.norm\."]))
    psi, trained = est["psi"], 32000 * 4096 + 4096
    check(est["trainable_psi"] == trained, f"estimate trainable_psi {est['trainable_psi']}")
    stage0 = est["stages"][0]
    check(stage0["params"] == 2 * psi and stage0["grads"] == 4 * trained and
          stage0["optimizer"] == 12 * trained,
          f"6b projection-only stage 0 states: {stage0}")
    check(stage0["theory_model_states"] == 2 * psi + 16 * trained,
          f"6b projection-only theory {stage0['theory_model_states']}")
    # A checkpoint: 12 bytes per element of the head's and the norm's groups (all trainable),
    # 2 per element of the rest (bf16, frozen).
    check(est["checkpoint_bytes"] == 12 * trained + 2 * (psi - trained),
          f"6b projection-only checkpoint_bytes {est['checkpoint_bytes']}")
    # With --checkpoint-frozen digest (LoRA's default) the frozen groups take no bytes.
    est = json.loads(run_tool([zt, "estimate", "--preset", "6b", "--json", "--trainable",
                               r"^lm_head\.", "--trainable", r"^model\.norm\.",
                               "--checkpoint-frozen", "digest"]))
    check(est["checkpoint_bytes"] == 12 * trained,
          f"6b projection-only checkpoint_bytes with digests {est['checkpoint_bytes']}")
    for frozen in ("auto", "values"):
        lora = json.loads(run_tool([zt, "estimate", "--preset", "6b", "--json",
                                    "--lora-rank", "16", "--lora-targets", "q_proj",
                                    "--checkpoint-frozen", frozen]))
        c = lora["model_config"]  # r·(in + out) for each layer's q_proj [d, d]
        adapters = c["num_hidden_layers"] * 16 * 2 * c["hidden_size"]
        want = 12 * adapters + (0 if frozen == "auto" else 2 * (lora["psi"] - adapters))
        check(lora["state_psi"] == adapters and lora["checkpoint_bytes"] == want,
              f"6b LoRA q_proj --checkpoint-frozen {frozen}: checkpoint_bytes "
              f"{lora['checkpoint_bytes']}, want {want} (adapters {adapters})")
    print(f"6b projection-only: model states {stage0['model_states'] / 2**30:.2f} GiB "
          f"(everything trainable: {18 * psi / 2**30:.2f} GiB)")


class FrozenOracle:
    """The check's parts, run in order by run(): PyTorch's reference training of the selected
    tensors, each world's run against it, the bf16 checkpoint, the refusals and the estimates."""

    def __init__(self, args, work):
        self.args, self.work, self.zt = args, work, args.zerotrain

    def run(self):
        self.reference_run()
        runs = {"1 rank stage 0": (self.work("one"), ["--micro-batch", "1", "--grad-accum", "2"],
                                   []),
                "2 ranks stage 3": (self.work("two"), ["--micro-batch", "1", "--grad-accum", "1",
                                                       "--zero-stage", "3"],
                                    [self.args.mpirun, "--oversubscribe", "-n", "2"])}
        for what, (out, world_args, launcher) in runs.items():
            self.check_run(what, out, world_args, launcher)
        check_bf16_checkpoint(self.zt, self.work, self.args.mpirun, self.initial, self.trainable)
        self.refusals()
        check_estimates(self.zt)

    def reference_run(self):
        """The tiny model, its tokens, and PyTorch's training of the selected tensors."""
        zt, work, args = self.zt, self.work, self.args
        run_tool([zt, "init", "--preset", "tiny", "--seed", "1234", "--out", work("model")])
        tokens = write_tokens(work("tok.h5"), os.path.join(args.source_dir, "inputs", "data",
                                                           "sample.txt"))
        config = ref.load_config(work("model"))
        weights = ref.load_weights(work("model"), torch.float64)
        trainable = {n for n in weights if any(re.search(p, n) for p in TRAINABLE)}
        check(len(trainable) == 5, f"the patterns select {sorted(trainable)}")
        want_losses, _, want_masters = ref.adamw_clipped_trajectory(
            weights, config, tokens, trainable, STEPS, (LR, WEIGHT_DECAY, BETAS, EPS), clip=0)
        print("reference losses: " + " ".join(f"{x:.7f}" for x in want_losses))
        initial = model_tensors(work("model"))
        self.weights, self.trainable, self.initial = weights, trainable, initial
        self.want_losses, self.want_masters = want_losses, want_masters

    def check_run(self, what, out, world_args, launcher):
        """One world's run: losses, masters, final/, consolidate and run.json."""
        zt, work, weights, trainable, want_losses, want_masters, initial = (
            self.zt, self.work, self.weights, self.trainable, self.want_losses, self.want_masters,
            self.initial)
        run_tool(launcher + train_args(zt, work, out, world_args))
        with open(os.path.join(out, "metrics.jsonl")) as f:
            losses = [json.loads(line)["loss"] for line in f]
        print(f"{what} losses:   " + " ".join(f"{x:.7f}" for x in losses))
        check(len(losses) == STEPS, f"{what}: {len(losses)} metrics lines")
        for step, (got, want) in enumerate(zip(losses, want_losses), start=1):
            err = abs(got - want) / abs(want)
            check(err < TOLERANCE, f"{what}: step {step} loss {got} vs {want} ({err:.2e})")
        masters = checkpoint_masters(os.path.join(out, "checkpoints", f"step-{STEPS:08d}"))
        worst = 0.0
        for name, (value, frozen) in masters.items():
            check(frozen == (name not in trainable),
                  f"{what}: the checkpoint records {name} as frozen={frozen}")
            if name in trainable:
                err = rel_error(value, want_masters[name])
                worst = max(worst, err)
                check(err < TOLERANCE, f"{what}: {name} differs from PyTorch by {err:.2e}")
                check(not np.array_equal(value, initial[name].numpy()),
                      f"{what}: {name} did not train")
            else:
                check(np.array_equal(value, initial[name].numpy()),
                      f"{what}: frozen {name} changed")
        print(f"{what}: trainable masters within {worst:.2e} of PyTorch, frozen ones bitwise")
        final = model_tensors(os.path.join(out, "final"))
        for name in initial:
            if name not in trainable:
                check(torch.equal(final[name], initial[name]), f"{what}: final/{name} changed")
        # The checkpoint consolidates to the whole model, bitwise final/.
        run_tool([zt, "consolidate", os.path.join(out, "checkpoints", f"step-{STEPS:08d}"),
                  "--out", out + "-consolidated"])
        consolidated = model_tensors(out + "-consolidated")
        check(set(consolidated) == set(final) and
              all(torch.equal(consolidated[n], final[n]) for n in final),
              f"{what}: the consolidated checkpoint differs from final/")
        with open(os.path.join(out, "run.json")) as f:
            run = json.load(f)
        check(run["trainable_parameters"] == sum(weights[n].numel() for n in trainable),
              f"{what}: run.json trainable_parameters {run['trainable_parameters']}")
        check(sorted(run["frozen_tensors"]) == sorted(set(weights) - trainable),
              f"{what}: run.json frozen_tensors")

    def refusals(self):
        """Bad input: a resume that freezes a trained tensor, a pattern matching nothing."""
        zt, work = self.zt, self.work
        out = work("one")
        refused([zt, "train", "--model", work("model"), "--data", work("tok.h5"), "--out", out,
                 "--resume", "auto", "--steps", str(STEPS + 2), "--micro-batch", "1",
                 "--grad-accum", "2", "--seq-len", str(SEQ_LEN), "--precision", "fp32",
                 "--trainable", r"^lm_head\."],
                "trainable in the checkpoint, frozen now: model.layers.1.mlp.")
        with open(os.path.join(out, "checkpoints", "latest")) as f:
            check(f.read().strip() == f"step-{STEPS:08d}", "the refused resume moved latest")
        refused(train_args(zt, work, work("bad"), ["--trainable", "q_porj"]),
                "--trainable 'q_porj' matches no tensor")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = fresh_work_dir(args.work_dir)
    return exit_status(lambda: FrozenOracle(args, work).run())


if __name__ == "__main__":
    sys.exit(main())
