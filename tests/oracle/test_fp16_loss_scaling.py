#!/usr/bin/python3
"""fp16 training's loss scaling against DeepSpeed's own scaler, on real runs (label oracle).

zerotrain trains the tiny preset with --precision fp16 --activations fp16, started at a loss
scale far above what fp16 activation gradients hold (2^24), so that the first steps overflow,
the scale comes down, grows again after each short window and overflows again. The runs: one
rank at stage 0 from a DeepSpeed JSON fp16 block (hysteresis 2), and two ranks at stage 2 from
the command line (consecutive hysteresis), each on a dataset of exactly one global batch, so
that every step sees the same tokens.

1. The overflow sequence of each run (metrics.jsonl "skipped") drives DeepSpeed 0.19.8's own
   DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py from the pinned sdist, built as
   DeepSpeed's fp16 config builds it): the scale before each of its updates equals the run's
   "loss_scale" of that step, exactly. A run must see both an overflow and a growth of the
   scale, or the test could not fail.
2. A skipped step leaves the weights as they were: with the same batch, the next step's loss
   equals the skipped step's (to 1e-12 relative; only the sum's order may change), while an
   applied update moves it by far more (1e-5 at least).
3. A skipped step does not advance the learning-rate schedule: each step's lr is the lr of the
   step that many updates in of a run without skips (the same run in bf16).
4. Resume: stopped after step 10 and resumed, the one-rank run's metrics lines of steps 11-20
   (loss, scale, skipped, lr) and its final/ model are bitwise those of the uninterrupted run;
   the checkpoint's manifest holds the scaler's state.
5. A resume with other loss-scaling settings warns and starts the scaler afresh. A static scale
   of 128 stays with nothing skipped; one of 2^24 skips every step without moving (the loss
   stays); an overflow at the minimum scale stops a two-rank run with an error naming it, on
   both ranks, and a non-zero exit.

--expect-mismatch feeds DeepSpeed each run's outcomes one step late and passes only if its
scales then differ from the run's: check 1 can fail.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (SetupError, argument_parser, check, exit_status,  # noqa: E402
                            fresh_work_dir, run_tool, write_byte_windows)
from test_loss_scaler import deepspeed_run, load_deepspeed_loss_scaler  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

SEQ_LEN, WINDOWS, STEPS = 32, 2, 20
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
SAME_LOSS, MOVED_LOSS = 1e-12, 1e-5


def train(tools, work, out, extra, ranks=1, check_exit=True):
    """`zerotrain train` on the test's model and data; tools = (zerotrain, mpirun)."""
    zt, mpirun = tools
    cmd = ([mpirun, "-np", str(ranks)] if ranks > 1 else []) + [
        zt, "train", "--model", work("model"), "--data", work("tok.h5"), "--out", out,
        "--steps", str(STEPS), "--seq-len", str(SEQ_LEN), "--lr", "1e-3", "--warmup-steps", "2",
        "--log-every", "0", "--backend", "cpu", "--comm-timeout", "60"] + extra
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, **MPI_ENV}, timeout=240)
    if check_exit and proc.returncode != 0:
        print(proc.stdout)
        raise SetupError(f"zerotrain train exited with {proc.returncode}")
    return proc


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def model_bits(model_dir):
    """Every tensor of a model directory's HDF5 shards, as raw bits."""
    out = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".h5"):
            with h5py.File(os.path.join(model_dir, name), "r") as f:
                f.visititems(lambda n, o: out.__setitem__(n, o[()].view(np.uint8).copy())
                             if isinstance(o, h5py.Dataset) else None)
    return out


def deepspeed_scales(ds, settings, overflows):
    """DeepSpeed's scale before each update, fed `overflows`: test_loss_scaler.py's run of its
    scaler built as DeepSpeed's fp16 config builds it (dynamic_loss_scale_args)."""
    case = dict(power=settings["initial_scale_power"], window=settings["loss_scale_window"],
                hysteresis=settings["hysteresis"],
                consecutive=settings["consecutive_hysteresis"],
                min_scale=settings["min_loss_scale"], loss_scale=settings["loss_scale"])
    scales, _, error_step = deepspeed_run(ds, case, overflows)
    if error_step is not None:
        raise SetupError(f"DeepSpeed's scaler stopped at step {error_step}: bad test settings")
    return scales


def check_run(name, lines, settings, ds, reference_lrs, shift):
    overflows = [line["skipped"] for line in lines]
    scales = [line["loss_scale"] for line in lines]
    print(f"{name}: skipped {''.join('1' if o else '0' for o in overflows)}")
    print(f"{name}: scales  {' '.join(f'2^{int(np.log2(s))}' for s in scales)}")
    check(any(overflows) and not all(overflows), f"{name}: no mix of overflows and updates")
    check(any(b > a for a, b in zip(scales, scales[1:])), f"{name}: the scale never grew")
    if shift:  # --expect-mismatch: DeepSpeed fed the outcomes one step late must disagree
        want = deepspeed_scales(ds, settings, [False] * shift + overflows[:-shift])
        check(scales != want, f"{name}: outcomes shifted by {shift} still give the same scales")
        print(f"{name}: with the outcomes shifted by {shift}, DeepSpeed's scales differ")
        return
    want = deepspeed_scales(ds, settings, overflows)
    check(scales == want, f"{name}: zerotrain's scales {scales} differ from DeepSpeed's {want}")
    updates = 0
    for i, line in enumerate(lines):
        check(line["lr"] == reference_lrs[updates],
              f"{name}: step {line['step']} lr {line['lr']} is not the lr after {updates} "
              f"updates ({reference_lrs[updates]})")
        if i + 1 < len(lines) and lines[i + 1]["loss"] is not None and line["loss"] is not None:
            change = abs(lines[i + 1]["loss"] - line["loss"]) / abs(line["loss"])
            if line["skipped"]:
                check(change <= SAME_LOSS, f"{name}: step {line['step']} was skipped but the "
                      f"next loss moved by {change:.3e}")
            else:
                check(change >= MOVED_LOSS, f"{name}: step {line['step']} updated but the next "
                      f"loss moved by only {change:.3e}")
        updates += 0 if line["skipped"] else 1
    print(f"{name}: every scale equals DeepSpeed's; {sum(overflows)} skipped steps kept the "
          "weights and the schedule")


class LossScalingOracle:
    """The check's parts, run in order by run(): dynamic scaling at 1 and 2 ranks against
    DeepSpeed's LossScaler, then (without --expect-mismatch) the resume, a resume with other
    settings, static scales and the minimum scale."""

    def __init__(self, args, work):
        self.args, self.work, self.zt = args, work, args.zerotrain
        self.tools = (args.zerotrain, args.mpirun)
        self.shift = 1 if args.expect_mismatch else 0

    def run(self):
        self.dynamic_scaling()
        if self.shift:
            return
        self.resume()
        self.static_scales()

    def dynamic_scaling(self):
        """1 rank stage 0 from a DeepSpeed JSON, 2 ranks stage 2 from the command line."""
        args, work, zt, tools, shift = self.args, self.work, self.zt, self.tools, self.shift
        ds = load_deepspeed_loss_scaler(args.deepspeed_sdist, args.work_dir)
        run_tool([zt, "init", "--preset", "tiny", "--seed", "1234", "--out", work("model")])
        write_byte_windows(work("tok.h5"), os.path.join(args.source_dir, "inputs", "data",
                                                        "sample.txt"), WINDOWS, SEQ_LEN)
        train(tools, work, work("bf16"), ["--micro-batch", "2"])
        reference_lrs = [line["lr"] for line in metrics(work("bf16"))]

        # 1 rank, stage 0, from a DeepSpeed JSON fp16 block.
        one = {"loss_scale": 0, "initial_scale_power": 24, "loss_scale_window": 4,
               "hysteresis": 2, "consecutive_hysteresis": False, "min_loss_scale": 1}
        # One window per micro-batch: each epoch's permutation reorders the windows, and a
        # micro-batch's loss depends on the order of its rows (BLAS kernels treat row positions
        # differently on some CPUs), while a sum of two micro-batches' losses does not.
        config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                  "fp16": {"enabled": True, **one}, "zero_optimization": {"stage": 0}}
        with open(work("fp16.json"), "w") as f:
            json.dump(config, f)
        ds_args = ["--deepspeed", work("fp16.json"), "--activations", "fp16", "--save-every",
                   "10"]
        train(tools, work, work("one"), ds_args)
        with open(work("one", "run.json")) as f:
            run = json.load(f)
        check(run["config"]["precision"] == "fp16", "the fp16 block did not select fp16")
        check(run["config"]["loss_scaling"] == one,
              f"run.json's loss_scaling {run['config']['loss_scaling']} is not the file's {one}")
        lines = metrics(work("one"))
        check_run("1 rank, stage 0", lines, one, ds, reference_lrs, shift)

        # 2 ranks, stage 2, from the command line, consecutive hysteresis.
        two = {"loss_scale": 0, "initial_scale_power": 23, "loss_scale_window": 3,
               "hysteresis": 2, "consecutive_hysteresis": True, "min_loss_scale": 1}
        train(tools, work, work("two"), [
            "--precision", "fp16", "--activations", "fp16", "--zero-stage", "2",
            "--micro-batch", "1", "--initial-scale-power", "23", "--loss-scale-window", "3",
            "--hysteresis", "2", "--consecutive-hysteresis"], ranks=2)
        check_run("2 ranks, stage 2", metrics(work("two")), two, ds, reference_lrs, shift)
        self.ds_args, self.lines = ds_args, lines

    def resume(self):
        """A resume is the uninterrupted run bitwise; other settings start the scaler afresh."""
        work, tools, ds_args, lines = self.work, self.tools, self.ds_args, self.lines
        # Resume: stop after step 10, resume, compare with the uninterrupted run.
        train(tools, work, work("resumed"), ds_args + ["--stop-after-step", "10"], check_exit=False)
        with open(os.path.join(work("resumed"), "checkpoints", "step-00000010",
                               "manifest.json")) as f:
            scaling = json.load(f).get("loss_scaling", {})
        check("scaler" in scaling and scaling["scaler"]["cur_scale"] == lines[10]["loss_scale"],
              f"the step-10 checkpoint's loss_scaling {scaling} does not hold the scale step 11 "
              f"uses ({lines[10]['loss_scale']})")
        train(tools, work, work("resumed"), ds_args + ["--resume", "auto"])
        keys = ("step", "loss", "loss_scale", "skipped", "lr", "grad_norm")
        resumed = metrics(work("resumed"))
        for a, b in zip(lines[10:], resumed[10:]):
            check(all(a[k] == b[k] for k in keys), f"resumed step {b['step']} differs: "
                  f"{ {k: b[k] for k in keys} } vs { {k: a[k] for k in keys} }")
        check(len(resumed) == STEPS, f"the resumed run has {len(resumed)} metrics lines")
        a, b = model_bits(work("one", "final")), model_bits(work("resumed", "final"))
        check(len(a) > 0 and a.keys() == b.keys() and all(np.array_equal(a[n], b[n]) for n in a),
              "the resumed run's final/ tensors differ from the uninterrupted run's")
        print("resume: steps 11-20 and final/ bitwise those of the uninterrupted run")

        # A resume with other loss-scaling settings starts the scaler afresh, and says so.
        proc = train(tools, work, work("rescaled"), ds_args + [
            "--resume", os.path.join(work("resumed"), "checkpoints", "step-00000010"),
            "--loss-scale-window", "5"])
        check("loss-scaling settings differ" in proc.stdout,
              "a resume with another --loss-scale-window does not warn")
        step11 = next(line for line in metrics(work("rescaled")) if line["step"] == 11)
        check(step11["loss_scale"] == 2 ** 24,
              "the scaler did not start afresh at 2^initial_scale_power")

    def static_scales(self):
        """Static scales, and the run stopped at the minimum scale."""
        work, tools = self.work, self.tools
        # Static scales: 128 never overflows; 2^24 (fp16 activations) overflows every step and is
        # skipped every time without moving, leaving the weights (and so the loss) as they were.
        train(tools, work, work("static"), ["--precision", "fp16", "--micro-batch", "2",
                                            "--loss-scale", "128"])
        static = metrics(work("static"))
        check(all(line["loss_scale"] == 128 and not line["skipped"] for line in static),
              "a static loss scale of 128 moved or skipped a step")
        train(tools, work, work("static_overflow"), ["--precision", "fp16", "--micro-batch", "1",
                                                     "--grad-accum", "2",
                                                     "--loss-scale", str(2 ** 24)])
        static = metrics(work("static_overflow"))
        check(all(line["loss_scale"] == 2 ** 24 and line["skipped"] for line in static),
              "a static loss scale of 2^24 did not skip every step at that scale")
        check(all(line["loss"] == static[0]["loss"] for line in static),
              "skipped steps at a static scale changed the loss")
        print("static scales: 128 never skips; 2^24 skips every step, the loss unchanged")
        proc = train(tools, work, work("floor"), [
            "--precision", "fp16", "--activations", "fp16", "--micro-batch", "1",
            "--initial-scale-power", "24", "--hysteresis", "1", "--min-loss-scale", "8388608"],
            ranks=2, check_exit=False)
        print(proc.stdout[-2000:])
        check(proc.returncode != 0, "an overflow at the minimum loss scale did not stop the run")
        check(proc.stdout.count("minimum loss scale") == 2,
              "the stop at the minimum loss scale is not reported by both ranks")
        print(f"the minimum scale stopped the run (exit {proc.returncode})")


def main():
    parser = argument_parser(__doc__.split("\n")[0], deepspeed_sdist=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = fresh_work_dir(args.work_dir)
    return exit_status(lambda: LossScalingOracle(args, work).run())


if __name__ == "__main__":
    sys.exit(main())
