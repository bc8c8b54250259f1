#!/usr/bin/python3
"""Full fine-tuning's gradient norm and clipping against PyTorch (CTest label "oracle").

The tiny preset trains every tensor (constant learning rate) for STEPS steps on one global batch
of 2 windows, with --clip CLIP, a threshold between the norms of the trajectory: some steps
clip, some do not. The reference is llama_reference.py's plain-PyTorch Llama in float64 with
torch.nn.utils.clip_grad_norm_ (the call the Hugging Face Trainer makes; DeepSpeed's ZeRO
optimizers scale by the same clip / (norm + 1e-6)) and torch.optim.AdamW with zerotrain's
weight-decay rule.

1. Every world below logs, each step, the loss and the gradient norm before clipping
   (metrics.jsonl's loss and grad_norm) of the reference within test_oracle.py's fp32 bound,
   1e-4 relative, and every final fp32 master (the last checkpoint's rank files) too. Its
   clip_scale is clip / (grad_norm + 1e-6) where the reference clipped and 1 where it did not.
   The worlds, fp32 unless said:
   - 1 rank stage 0 with 2 micro-batches; 2 ranks at stage 1;
   - 2 ranks at stage 2 with the CPU optimizer offload speculating each group's update during
     the backward, undone and redone when the norm clips: metrics.jsonl's
     host_adam.speculation says "redone" exactly at the steps the reference clipped;
   - 2 ranks at stage 3 with the optimizer on NVMe;
   - 2 ranks at stage 2 in fp16 (fp16 working weights, fp32 activations, a static loss scale of
     1024): the norm and the clipping are the unscaled gradients', against a reference whose
     gradients are taken at fp16-rounded working weights (test_oracle.py's fp16 mode, the fp32
     bound); every step at the scale, none skipped.
2. --clip 0 at 1 rank: the norms of the unclipped reference, clip_scale 1 at every step.

Every stage is also compared with stage 0 by the engine's own tests; this one holds each to
PyTorch, so a norm that every stage gets wrong alike (a dropped group, a norm taken after
clipping, fp16's norm left scaled) fails here. --mutation M --expect-mismatch mutates the
reference and passes only if the grad_norm comparison fails: "head-left-out" (lm_head frozen
in the reference, so its gradient is outside the norm; step 1's losses still agree, its norm
does not), "after-clip" (the norm reported after clipping), "scaled" (fp16's norm times the loss
scale).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (SetupError, check, exit_status,  # noqa: E402
                            MPIRUN_ARGUMENT, mutation_oracle_arguments, run_tool,
                            write_byte_windows)
from trajectory_checks import (check_final_masters, check_losses_and_norms,  # noqa: E402
                               metrics_lines, relative)
import llama_reference as ref  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

STEPS, SEQ_LEN, WINDOWS, LR, CLIP = 8, 16, 2, 1e-3, 2.4
HYPER = (LR, 0.1, (0.9, 0.95), 1e-8)  # lr, weight decay, betas, eps: zerotrain's defaults
TOLERANCE = 1e-4  # test_oracle.py's fp32 bound (relative; float64 reference)
# Neither side may sit so near CLIP that the two could decide a step differently.
MARGIN = 100 * TOLERANCE
# fp16: a static loss scale, a power of two, so that scaling and unscaling are exact.
LOSS_SCALE = 1024
FP16 = ["--precision", "fp16", "--activations", "fp32", "--loss-scale", str(LOSS_SCALE)]
MUTATIONS = ("head-left-out", "after-clip", "scaled")


def reference(weights, config, tokens, clip, fp16=False, mutation=None):
    """adamw_clipped_trajectory of every tensor (fp16: at fp16-rounded working weights), or its
    mutation: (losses, norms, final masters)."""
    trainable = set(weights)
    if mutation == "head-left-out":  # lm_head frozen: a norm without its gradient
        trainable -= {"lm_head.weight"}
    losses, norms, masters = ref.adamw_clipped_trajectory(
        weights, config, tokens, trainable, STEPS, HYPER, clip,
        ref.round_to_fp16 if fp16 else None)
    if mutation == "after-clip":
        norms = [n * min(1.0, clip / (n + 1e-6)) if clip > 0 else n for n in norms]
    if mutation == "scaled" and fp16:  # the norm of the gradients still times the loss scale
        norms = [n * LOSS_SCALE for n in norms]
    return losses, norms, masters


def train_args(zt, work, out, clip, world_args, precision=("--precision", "fp32")):
    return [zt, "train", "--model", work("model"), "--data", work("tok.h5"), "--out", out,
            "--steps", str(STEPS), "--seq-len", str(SEQ_LEN), "--lr", str(LR), "--min-lr",
            str(LR), "--warmup-steps", "0", "--clip", str(clip), "--save-every", str(STEPS),
            "--log-every", "0", "--micro-batch", "1"] + list(precision) + world_args


def check_metrics(what, out, want_losses, want_norms, clip, speculating=False, loss_scale=None):
    """Each step's loss and grad_norm against the reference; clip_scale from the reference's
    decision to clip; with `speculating`, the offload's speculated update redone where it
    clipped and kept where it did not; with `loss_scale` (fp16), every step at that scale and
    none skipped."""
    lines = metrics_lines(what, out, STEPS)
    check_losses_and_norms(what, lines, want_losses, want_norms, TOLERANCE)
    for step, (m, norm) in enumerate(zip(lines, want_norms), start=1):
        # --clip is held as a float32 (2.4 becomes 2.4000000954).
        want_scale = float(np.float32(clip)) / (m["grad_norm"] + 1e-6) if 0 < clip < norm else 1.0
        # (The message names no grad_norm: the mutation variants pass on that comparison.)
        check(relative(m["clip_scale"], want_scale) < 1e-12,
              f"{what}: step {step} clip_scale {m['clip_scale']}, want {want_scale} (the run's "
              f"norm {m['grad_norm']}, PyTorch's {norm}, clip {clip})")
        if loss_scale is not None:
            check(m.get("loss_scale") == loss_scale and not m.get("skipped"),
                  f"{what}: step {step} loss_scale {m.get('loss_scale')}, skipped "
                  f"{m.get('skipped')}")
        if speculating:
            want = "redone" if 0 < clip < norm else "kept"
            got = m.get("host_adam", {}).get("speculation")
            check(got == want, f"{what}: step {step} host_adam.speculation {got}, want {want}")


def reference_runs(zt, work, source_dir, mutation):
    """The tiny model, its windows, and PyTorch's trajectories: fp32 and fp16 with CLIP, fp32
    without."""
    run_tool([zt, "init", "--preset", "tiny", "--seed", "1234", "--out", work("model")])
    data = write_byte_windows(work("tok.h5"), os.path.join(source_dir, "inputs", "data",
                                                           "sample.txt"), WINDOWS, SEQ_LEN)
    tokens = torch.from_numpy(np.stack([data[w * SEQ_LEN:(w + 1) * SEQ_LEN + 1]
                                        for w in range(WINDOWS)]).astype(np.int64))
    config = ref.load_config(work("model"))
    weights = ref.load_weights(work("model"), torch.float64)
    references = {
        "fp32": reference(weights, config, tokens, CLIP, mutation=mutation),
        "fp16": reference(weights, config, tokens, CLIP, fp16=True, mutation=mutation),
        "unclipped": reference(weights, config, tokens, 0, mutation=mutation)}
    for name in ("fp32", "fp16"):
        norms = references[name][1]
        print(f"PyTorch {name} grad_norm, --clip {CLIP}: " + " ".join(f"{n:.7f}" for n in norms))
        if mutation:
            continue
        if not any(n > CLIP for n in norms) or all(n > CLIP for n in norms):
            raise SetupError(f"--clip {CLIP} does not split the {name} reference's norms {norms}")
        if any(relative(n, CLIP) < MARGIN for n in norms):
            raise SetupError(f"a {name} reference norm lies within {MARGIN} of --clip {CLIP}")
    return references


def checks(args, work):
    zt = args.zerotrain
    references = reference_runs(zt, work, args.source_dir, args.mutation)
    mpirun = [args.mpirun, "--oversubscribe", "-n", "2"]
    worlds = [  # (what, launcher, arguments, reference)
        ("1 rank stage 0", [], ["--grad-accum", "2"], "fp32"),
        ("2 ranks stage 1", mpirun, ["--zero-stage", "1"], "fp32"),
        ("2 ranks stage 2, CPU offload speculating", mpirun,
         ["--zero-stage", "2", "--offload-optimizer", "cpu", "--offload-optimizer-overlap", "on"],
         "fp32"),
        ("2 ranks stage 3, NVMe offload", mpirun,
         ["--zero-stage", "3", "--offload-optimizer", "nvme", "--nvme-path", work("nvme")],
         "fp32"),
        (f"2 ranks stage 2, fp16 (loss scale {LOSS_SCALE})", mpirun, ["--zero-stage", "2"],
         "fp16"),
        ("1 rank stage 0, --clip 0", [], ["--grad-accum", "2"], "unclipped"),
    ]
    for i, (what, launcher, world_args, name) in enumerate(worlds):
        out = work(f"run{i}")
        clip = 0 if name == "unclipped" else CLIP
        precision = FP16 if name == "fp16" else ("--precision", "fp32")
        run_tool(launcher + train_args(zt, work, out, clip, world_args, precision))
        losses, norms, masters = references[name]
        check_metrics(what, out, losses, norms, clip, "speculating" in what,
                      LOSS_SCALE if name == "fp16" else None)
        check_final_masters(what, out, STEPS, masters, TOLERANCE)


def main():
    args, work, _ = mutation_oracle_arguments(__doc__.split("\n")[0], MUTATIONS,
                                              extra=[MPIRUN_ARGUMENT])
    os.makedirs(work("nvme"))
    return exit_status(lambda: checks(args, work), mutation=args.mutation,
                       mutation_fails="grad_norm")


if __name__ == "__main__":
    sys.exit(main())
