#!/usr/bin/env python3
"""Evaluation on held-out data during training against transformers (CTest label "oracle").

Runs in the project venv (.venv/, ./run.sh deps). Independently of zerotrain's code:

  1. transformers builds a small random Llama, rounded to bf16 and saved; `zerotrain import` reads
     it. Two byte datasets come from far-apart pieces of inputs/data/sample.txt: the training data
     and a held-out set.
  2. Two ranks train it at ZeRO stage 3 in fp32 for 4 steps with --eval-batches 2 --eval-every 2
     --eval-data HELD, saving a checkpoint after steps 2 and 4. The same run without evaluation
     must have the same losses, learning rates and gradient norms, bit for bit: evaluating does
     not touch the trajectory.
  3. The reference: the checkpoint's fp32 masters of step s loaded into the transformers model,
     its mean next-token loss over the held-out set's first K·N·B = 8 windows (float64
     log-softmax). metrics.jsonl's eval_loss of steps 2 and 4 must meet it; steps 1 and 3 have
     none; report.json's history holds the same figures and its end-of-training eval equals step
     4's bit for bit; trace.json has each rank's two eval spans.
  4. Built-in mutations: the reference over the training data's windows, and the reference of the
     other step's weights, must each miss the figure; the check sees which data and which weights
     are scored.
  5. A run stopped after step 2 and resumed logs the same eval_loss figures bit for bit; with step
     2's metrics.jsonl line deleted before the resume (a kill before it was written), its
     report.json's history still holds step 2's figure, from the checkpoint's copy of the line.
  6. --eval-batches all on a set of 13 windows and 5 bytes (the last micro-batch half padding,
     the last round one rank's padding only): each eval_loss counts all 13·T targets and meets
     transformers' loss over the 13 windows, which the reference over 12 misses. `zerotrain eval
     --batches all` counts the same windows, and gives the same loss, at 1 and 2 ranks and
     micro-batches 1, 13 and 4.
  7. Bad input is refused before training, naming the file or option: held-out data of another
     tokenizer, one too short for K·N·B windows, one whose windows count no target (a loss mask
     of zeros), one without document boundaries for a run that trains with document masks, and
     --eval-every without --eval-batches.

Bound (both sides fp32 on the same weights, test_hf_families.py's derivation): loss
10·u·√n·(2L + 2)·max(1, |loss|), u = 2^-24, n the widest contraction.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (U_FP32, argument_parser, check, checkpoint_masters,  # noqa: E402
                            exit_status, fp32_model_bound, fresh_work_dir, refused, run_tool)
from test_hf_families import COMMON, hf_loss, imported_random_llama, np, torch  # noqa: E402

SEQ_LEN, MICRO_BATCH, RANKS, EVAL_BATCHES, STEPS = 32, 2, 2, 2, 4
EVAL_WINDOWS = EVAL_BATCHES * RANKS * MICRO_BATCH
# --eval-batches all: 13 windows and 5 bytes; 7 batches of 2, in 4 rounds of 2 ranks.
ALL_WINDOWS, ALL_ROUNDS = 13, 4
ALL_BYTES = ALL_WINDOWS * (SEQ_LEN + 1) + 5
TRAIN_BYTES, HELD_OUT_OFFSET, HELD_OUT_BYTES = slice(0, 40000), 300000, 20000
# The widest contraction (n in the bound above).
WIDEST = max(COMMON["hidden_size"], COMMON["intermediate_size"], COMMON["vocab_size"])


def loss_bound(want):
    """The bound above on an fp32 eval_loss against transformers' figure `want`."""
    return fp32_model_bound(WIDEST, COMMON["num_hidden_layers"], want)


def byte_dataset(zt, work, name, text):
    """A byte-level dataset of `text`; returns (its path, its tokens)."""
    txt = os.path.join(work, name + ".txt")
    with open(txt, "wb") as f:
        f.write(text)
    path = os.path.join(work, name + ".h5")
    run_tool([zt, "prepare-data", "--text", txt, "--out", path])
    return path, np.frombuffer(text, dtype=np.uint8).astype(np.int64)


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_args(zt, model, data, out, *extra):
    return [zt, "train", "--model", model, "--data", data, "--out", out, "--steps", str(STEPS),
            "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN), "--zero-stage", "3",
            "--precision", "fp32", "--lr", "1e-3", "--warmup-steps", "0", "--seed", "7",
            "--log-every", "0", "--comm-timeout", "60", *extra]


def reference_at(model, initial, step_dir, tokens, windows=EVAL_WINDOWS):
    """transformers' mean loss over the first `windows` windows of `tokens`, with the masters of
    the checkpoint at step_dir loaded (the model is restored to `initial` after)."""
    masters = {n: torch.from_numpy(v) for n, (v, _) in checkpoint_masters(step_dir).items()}
    missing, unexpected = model.load_state_dict(masters, strict=False)
    check(not unexpected and all(n.endswith("lm_head.weight") for n in missing),
          f"{step_dir}: tensors differ from transformers': {missing} {unexpected}")
    try:
        return hf_loss(model, tokens, range(windows), SEQ_LEN)
    finally:
        model.load_state_dict(initial)


def edited_copy(work, held, name, edit):
    """A copy of the dataset `held` as `name`.h5, edited by edit(h5py file)."""
    import h5py
    import shutil
    path = os.path.join(work, name + ".h5")
    shutil.copy(held, path)
    with h5py.File(path, "a") as f:
        edit(f)
    return path


def check_refusals(args, zt, work, imported, data, held):
    """Bad evaluation input is refused before the first step, naming the file or option."""
    other = os.path.join(work, "other.bin")  # nanoGPT's headerless uint16 tokens: vocabulary 300
    (np.arange(4000) % 300).astype(np.uint16).tofile(other)
    other_h5 = os.path.join(work, "other.h5")
    run_tool([zt, "prepare-data", "--nanogpt-bin", other, "--vocab-size", "300", "--out",
              other_h5])
    short, _ = byte_dataset(zt, work, "short", b"a few bytes, fewer than eight windows")
    # SFT data whose windows count no target: a loss mask of zeros.
    unscored = edited_copy(work, held, "unscored", lambda f: f.create_dataset(
        "loss_mask", data=np.zeros(f["tokens"].shape[0], dtype=np.uint8)))
    # A dataset of an older prepare-data, without /doc_starts; training data of two documents
    # trains with document masks (auto).
    streamless = edited_copy(work, held, "streamless", lambda f: f.__delitem__("doc_starts"))
    with open(os.path.join(args.source_dir, "inputs/data/sample.txt"), "rb") as f:
        sample = f.read(4000)
    documents = []
    for i in range(2):
        documents.append(os.path.join(work, f"document{i}.txt"))
        with open(documents[-1], "wb") as f:
            f.write(sample[i * 2000:(i + 1) * 2000])
    packed = os.path.join(work, "packed.h5")
    run_tool([zt, "prepare-data", "--text", *documents, "--out", packed])
    for name, train_data, extra, says in [
            ("another tokenizer", data, ["--eval-batches", "1", "--eval-data", other_h5],
             f"--eval-data '{other_h5}' was tokenized by"),
            ("too short", data, ["--eval-batches", "1", "--eval-data", short], f"'{short}' has"),
            ("no counted target", data, ["--eval-batches", "1", "--eval-data", unscored],
             f"'{unscored}': no target of the {RANKS * MICRO_BATCH} evaluated windows counts"),
            ("no document boundaries", packed,
             ["--eval-batches", "1", "--eval-data", streamless],
             f"--eval-data '{streamless}' has no document boundaries"),
            ("--eval-every alone", data, ["--eval-every", "2"],
             "--eval-every needs --eval-batches")]:
        out = os.path.join(work, "refused")
        refused([args.mpirun, "--oversubscribe", "-n", str(RANKS)] +
                train_args(zt, imported, train_data, out, *extra), says)
        check(not os.path.exists(os.path.join(out, "metrics.jsonl")),
              f"{name}: the refused run trained")
        print(f"refused before training: {name}")


def check_every_window(args, zt, work, models, data, step_dir, sample):
    """--eval-batches all scores every whole window of a set of ALL_WINDOWS windows and a few
    bytes: rounds of N·B windows, the last batch part padding and the last round one rank's
    padding only. The figure is transformers' over all of them, and `zerotrain eval --batches all`
    counts the same windows at 1 and 2 ranks and other micro-batches."""
    model, initial, imported = models
    every, every_tokens = byte_dataset(zt, work, "every",
                                       sample[HELD_OUT_OFFSET:HELD_OUT_OFFSET + ALL_BYTES])
    out = os.path.join(work, "every_run")
    run_tool([args.mpirun, "--oversubscribe", "-n", str(RANKS)] + train_args(
        zt, imported, data, out, "--eval-batches", "all", "--eval-every", "2", "--eval-data",
        every))
    lines = metrics(out)
    figures = {m["step"]: (m["eval_loss"], m["eval_loss_tokens"]) for m in lines if "eval_loss" in m}
    check(sorted(figures) == [2, 4], f"eval_loss is logged after steps {sorted(figures)}")
    for step, (got, counted) in figures.items():
        # The trajectory is the main run's, bit for bit (checked there): its checkpoints hold
        # these weights.
        want = reference_at(model, initial, step_dir(step), every_tokens, ALL_WINDOWS)
        bound = loss_bound(want)
        print(f"--eval-batches all, step {step}: eval_loss {got:.9f} over {counted} targets, "
              f"transformers {want:.9f} over {ALL_WINDOWS * SEQ_LEN}, |Δ| {abs(got - want):.3e}")
        check(counted == ALL_WINDOWS * SEQ_LEN, f"step {step}: {counted} targets counted")
        check(abs(got - want) <= bound, f"step {step}: eval_loss {got} vs transformers {want}")
        fewer = reference_at(model, initial, step_dir(step), every_tokens, ALL_WINDOWS - 1)
        check(abs(got - fewer) > bound, f"step {step}: the reference without the last window "
              f"({fewer}) also meets eval_loss: the check cannot see it")
        print(f"step {step}: the reference over {ALL_WINDOWS - 1} windows misses it "
              f"({fewer:.9f}), as it must")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)["eval"]
    check(report["windows"] == ALL_WINDOWS and report["batches"] == ALL_ROUNDS,
          f"report.json's eval: {report}")
    final = os.path.join(out, "final")
    scored = []
    for ranks, micro_batch in [(1, 1), (1, ALL_WINDOWS), (2, 4)]:
        printed = run_tool(
            [args.mpirun, "--oversubscribe", "-n", str(ranks), zt, "eval", "--model", final,
             "--data", every, "--batches", "all", "--micro-batch", str(micro_batch), "--seq-len",
             str(SEQ_LEN), "--precision", "fp32"])
        result = json.loads([line for line in printed.splitlines() if line.startswith("{")][-1])
        check(result["windows"] == ALL_WINDOWS and result["loss_tokens"] == ALL_WINDOWS * SEQ_LEN,
              f"eval --batches all at {ranks} rank(s), micro-batch {micro_batch}: {result}")
        scored.append(result["loss"])
    check(max(scored) - min(scored) <= 10 * U_FP32 * WIDEST ** 0.5 * max(1.0, abs(scored[0])),
          f"eval --batches all differs with ranks and micro-batch: {scored}")
    print(f"eval --batches all: {ALL_WINDOWS} windows at 1 and 2 ranks, micro-batch 1, "
          f"{ALL_WINDOWS} and 4: {scored}")


def checks(args):
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    zt = args.zerotrain
    fresh_work_dir(args.work_dir)
    work = args.work_dir
    model, imported = imported_random_llama(zt, work)
    initial = {n: t.clone() for n, t in model.state_dict().items()}
    with open(os.path.join(args.source_dir, "inputs/data/sample.txt"), "rb") as f:
        sample = f.read()
    data, train_tokens = byte_dataset(zt, work, "train", sample[TRAIN_BYTES])
    held, held_tokens = byte_dataset(
        zt, work, "held", sample[HELD_OUT_OFFSET:HELD_OUT_OFFSET + HELD_OUT_BYTES])
    mpirun = [args.mpirun, "--oversubscribe", "-n", str(RANKS)]
    evaluated = ["--eval-batches", str(EVAL_BATCHES), "--eval-every", "2", "--eval-data", held]

    run = os.path.join(work, "run")
    run_tool(mpirun + train_args(zt, imported, data, run, *evaluated, "--save-every", "2"))
    plain = os.path.join(work, "plain")
    run_tool(mpirun + train_args(zt, imported, data, plain))
    lines, plain_lines = metrics(run), metrics(plain)
    for key in ("loss", "lr", "grad_norm"):
        check([m[key] for m in lines] == [m[key] for m in plain_lines],
              f"evaluating changed the training {key}s: {[m[key] for m in lines]} vs "
              f"{[m[key] for m in plain_lines]}")
    print("the losses, learning rates and gradient norms equal the run without evaluation")
    check([m["step"] for m in lines if "eval_loss" in m] == [2, 4],
          f"eval_loss is logged after steps {[m['step'] for m in lines if 'eval_loss' in m]}")
    figures = {m["step"]: m["eval_loss"] for m in lines if "eval_loss" in m}
    check(all(m["eval_loss_tokens"] == EVAL_WINDOWS * SEQ_LEN for m in lines if "eval_loss" in m),
          "eval_loss_tokens is not every target of the windows")

    step_dir = lambda s: os.path.join(run, "checkpoints", f"step-{s:08d}")  # noqa: E731
    for step, got in figures.items():
        want = reference_at(model, initial, step_dir(step), held_tokens)
        bound = loss_bound(want)
        print(f"step {step}: eval_loss {got:.9f}, transformers {want:.9f}, |Δ| "
              f"{abs(got - want):.3e} (bound {bound:.3e})")
        check(abs(got - want) <= bound, f"step {step}: eval_loss {got} vs transformers {want}")
        for label, wrong in [
                ("the training data's windows",
                 reference_at(model, initial, step_dir(step), train_tokens)),
                ("the other step's weights",
                 reference_at(model, initial, step_dir(6 - step), held_tokens))]:
            check(abs(got - wrong) > bound, f"step {step}: the reference over {label} "
                  f"({wrong}) also meets eval_loss: the check cannot see it")
            print(f"step {step}: the reference over {label} misses it ({wrong:.9f}), as it must")

    with open(os.path.join(run, "report.json")) as f:
        report = json.load(f)
    check([(e["step"], e["loss"]) for e in report.get("eval_history", [])] ==
          sorted(figures.items()), f"report.json's eval_history {report.get('eval_history')}")
    check(report["eval"]["loss"] == figures[4] and report["eval"]["data"] == held,
          f"the end-of-training eval {report['eval']} is not step 4's ({figures[4]}) on {held}")
    with open(os.path.join(run, "trace.json")) as f:
        spans = [e for e in json.load(f)["traceEvents"] if e.get("name") == "eval"]
    check(sorted(e["args"]["step"] for e in spans) == [2, 2, 4, 4],
          f"trace.json's eval spans: {[e['args'] for e in spans]}")
    print("report.json: the history and the end-of-training eval are metrics.jsonl's figures; "
          "trace.json has each rank's eval spans")

    resumed = os.path.join(work, "resumed")
    first = subprocess.run(mpirun + train_args(zt, imported, data, resumed, *evaluated,
                                               "--save-every", "2", "--stop-after-step", "2"))
    check(first.returncode == 124, f"--stop-after-step 2 exited {first.returncode}, not 124")
    # A kill between the checkpoint's commit and the line's write: the checkpoint's own copy of
    # step 2's line (with its eval_loss) is what the resumed log and report get back.
    log = os.path.join(resumed, "metrics.jsonl")
    with open(log) as f:
        kept = [line for line in f if json.loads(line)["step"] != 2]
    with open(log, "w") as f:
        f.writelines(kept)
    run_tool(mpirun + train_args(zt, imported, data, resumed, *evaluated, "--resume", "auto"))
    again = {m["step"]: m["eval_loss"] for m in metrics(resumed) if "eval_loss" in m}
    check(again == figures, f"the resumed run's eval_loss {again} differs from {figures}")
    with open(os.path.join(resumed, "report.json")) as f:  # step 2's read back from its line
        history = [(e["step"], e["loss"]) for e in json.load(f).get("eval_history", [])]
    check(history == sorted(figures.items()), f"the resumed run's eval_history {history}")
    print("stopped after step 2, its log line lost, and resumed: the same eval_loss figures and "
          "history, bit for bit")

    check_every_window(args, zt, work, (model, initial, imported), data, step_dir, sample)
    check_refusals(args, zt, work, imported, data, held)


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    return exit_status(lambda: checks(args))


if __name__ == "__main__":
    sys.exit(main())
