#!/usr/bin/env python3
"""Packed documents against each document run alone through transformers (CTest label "oracle").

Runs in the project venv (.venv/, ./run.sh deps). Independently of zerotrain's code:

  1. transformers builds a small random Llama (grouped-query heads), rounded to bf16 and saved;
     `zerotrain import` reads it.
  2. `zerotrain prepare-data --text` packs eight text files of 1 to 40 bytes (pieces of
     inputs/data/sample.txt) into one byte dataset; its /doc_starts must be the files' offsets.
  3. The batch is the first B = 2 windows of T + 1 = 33 tokens. Window 0 holds three whole
     documents and the start of a fourth; window 1 begins inside that fourth document and holds
     a one-token document. The reference cuts each window's inputs into its documents' parts and
     runs every part alone through transformers (positions from 0, causal attention within the
     part). A target counts unless it is the first token of a document. Logits, the mean loss
     over the counted targets and every parameter's gradient (float64 autograd) are the reference.
  4. zt_oracle_dump --document-masking on (fp32) gives zerotrain's logits, loss and gradients of
     the same batch, and its first training step's loss; `zerotrain eval` gives the loss with the
     default --document-masking (auto: on for this dataset) and with off, which must equal
     transformers on the plain windows.
  5. The mutation is built in: the dump with --document-masking off must fail the comparison
     with the per-document reference.

RoPE's restart at each document is invisible here, as it must be: attention scores depend only on
position differences, so shifting a document's positions changes nothing but rounding. The
DocumentMasks unit tests check the positions themselves.

Bounds (both sides fp32 on the same bf16 weights, test_hf_families.py's derivation): loss
10·u·√n·(2L + 2)·max(1, |loss|), logits and gradients as relative norms, 10·u·√n·(2L + 2) and
10·u·√n·3·(2L + 2) (u = 2^-24, n the widest contraction).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (CheckFailed, argument_parser, check, document_parts,  # noqa: E402
                            exit_status, fp32_model_bound, run_tool)
from test_hf_families import (COMMON, h5py, imported_random_llama,  # noqa: E402
                              last_json_line, np, torch)

# Document lengths in bytes (starts 0, 11, 20, 28, 58, 59, 66, 80): window 0 (tokens 0..32) holds
# documents 0-2 and the start of 3; window 1 (tokens 33..65) the rest of 3, document 4 (one
# token) and document 5 but its last token.
DOC_LENGTHS = [11, 9, 8, 30, 1, 7, 14, 40]
SEQ_LEN, MICRO_BATCH = 32, 2


def write_documents(sample, work):
    """The text files, consecutive pieces of the sample; returns (paths, their bytes joined)."""
    with open(sample, "rb") as f:
        text = f.read(sum(DOC_LENGTHS))
    paths, offset = [], 0
    for i, n in enumerate(DOC_LENGTHS):
        path = os.path.join(work, f"doc{i}.txt")
        with open(path, "wb") as f:
            f.write(text[offset: offset + n])
        paths.append(path)
        offset += n
    return paths, np.frombuffer(text, dtype=np.uint8).astype(np.int64)


def reference(model, tokens, starts):
    """Per-document logits [B·T, V], the masked mean loss and its gradients (float64)."""
    model = model.double()
    model.zero_grad()
    start_set = set(int(s) for s in starts)
    logits_rows, losses, counted = [], [], 0
    for w in range(MICRO_BATCH):
        begin = w * (SEQ_LEN + 1)
        for a, b in document_parts(starts, begin, begin + SEQ_LEN):
            part = torch.from_numpy(tokens[a:b])
            logits = model(input_ids=part[None, :]).logits[0]
            logits_rows.append(logits)
            for i in range(a, b):  # input i predicts token i + 1 unless that starts a document
                if i + 1 in start_set:
                    continue
                target = torch.tensor([int(tokens[i + 1])])
                losses.append(torch.nn.functional.cross_entropy(logits[i - a][None, :], target,
                                                                reduction="sum"))
                counted += 1
    loss = torch.stack(losses).sum() / counted
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    logits = torch.cat(logits_rows).detach()
    model.float()
    return logits, loss.item(), counted, grads


def dump_batch(args, imported, data, work, masking):
    out = os.path.join(work, f"dump_{masking}.h5")
    run_tool([args.dump, "--model", imported, "--tokens", data, "--out", out, "--precision",
              "fp32", "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN), "--steps",
              "1", "--document-masking", masking])
    with h5py.File(out, "r") as f:
        return {"logits": torch.from_numpy(f["logits"][()]).double(),
                "loss": float(f["loss"][0]), "loss_grad_pass": float(f["loss_grad_pass"][0]),
                "step1": float(f["losses_adamw"][0]),
                "grad": {k: torch.from_numpy(f["grad/" + k][()]).double() for k in f["grad"]}}


def compare_dump(dump, want, bounds, label):
    """Every check of one dump against the reference; raises CheckFailed at the first miss."""
    logits, loss, _, grads = want
    rel = lambda got, ref: ((got - ref).norm() / ref.norm()).item()  # noqa: E731
    error = rel(dump["logits"], logits)
    print(f"{label}: logits ‖Δ‖/‖ref‖ {error:.3e} (bound {bounds['logits']:.3e})")
    check(error <= bounds["logits"], f"{label}: logits differ by {error:.3e}")
    for what in ("loss", "loss_grad_pass", "step1"):
        diff = abs(dump[what] - loss)
        print(f"{label}: {what} {dump[what]:.9f} reference {loss:.9f} |Δ| {diff:.3e}")
        check(diff <= bounds["loss"], f"{label}: {what} differs by {diff:.3e}")
    check(sorted(dump["grad"]) == sorted(grads), f"{label}: tensors differ from the reference's")
    worst = max((rel(dump["grad"][n], g), n) for n, g in grads.items())
    print(f"{label}: gradients, worst ‖Δ‖/‖ref‖ {worst[0]:.3e} ({worst[1]}), bound "
          f"{bounds['grad']:.3e}")
    check(worst[0] <= bounds["grad"], f"{label}: grad {worst[1]} differs by {worst[0]:.3e}")


def plain_windows_loss(model, tokens):
    """transformers' mean loss over the plain (unmasked) windows, float64 log-softmax."""
    total = 0.0
    with torch.no_grad():
        for w in range(MICRO_BATCH):
            chunk = torch.from_numpy(tokens[w * (SEQ_LEN + 1): (w + 1) * (SEQ_LEN + 1)])
            logp = torch.log_softmax(model(input_ids=chunk[None, :-1]).logits[0].double(), -1)
            total -= logp.gather(1, chunk[1:, None]).sum().item()
    return total / (MICRO_BATCH * SEQ_LEN)


def checks(args):
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    zt, work = args.zerotrain, args.work_dir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model, imported = imported_random_llama(zt, work)

    paths, tokens = write_documents(os.path.join(args.source_dir, "inputs/data/sample.txt"), work)
    data = os.path.join(work, "docs.h5")
    run_tool([zt, "prepare-data", "--text", *paths, "--out", data])
    expected_starts = np.cumsum([0] + DOC_LENGTHS[:-1])
    with h5py.File(data, "r") as f:
        check(np.array_equal(f["tokens"][()], tokens), "prepare-data changed the bytes")
        starts = f["doc_starts"][()]
    check(starts.dtype == np.uint64, f"/doc_starts is {starts.dtype}, not uint64")
    check(np.array_equal(starts, expected_starts),
          f"/doc_starts {starts.tolist()} is not the files' offsets {expected_starts.tolist()}")
    info = run_tool([zt, "info", data, "--json"])
    check('"documents": 8' in info, "info does not report the 8 documents")

    L, n = COMMON["num_hidden_layers"], max(COMMON["hidden_size"], COMMON["intermediate_size"],
                                            COMMON["vocab_size"])
    want = reference(model, tokens, expected_starts)
    base = fp32_model_bound(n, L)
    bounds = {"logits": base, "loss": base * max(1.0, abs(want[1])), "grad": 3 * base}
    print(f"reference: {want[2]} counted targets of {MICRO_BATCH * SEQ_LEN}, loss {want[1]:.9f}")
    # Targets 1..32 of window 0 hold starts 11, 20 and 28; targets 34..65 of window 1 hold 58, 59.
    check(want[2] == MICRO_BATCH * SEQ_LEN - 5,
          f"{want[2]} counted targets: five targets begin a document in this batch")

    compare_dump(dump_batch(args, imported, data, work, "on"), want, bounds, "masked")

    def zt_eval(*extra_args):
        out = run_tool([zt, "eval", "--model", imported, "--data", data, "--batches", "1",
                        "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN),
                        "--precision", "fp32", *extra_args])
        return last_json_line(out)

    masked = zt_eval()
    check(masked["document_masking"] == "on" and masked["loss_tokens"] == want[2],
          f"eval's default is not masking this dataset's documents: {masked}")
    check(abs(masked["loss"] - want[1]) <= bounds["loss"],
          f"eval (masked) {masked['loss']} vs reference {want[1]}")
    plain, plain_ref = zt_eval("--document-masking", "off"), plain_windows_loss(model, tokens)
    print(f"eval --document-masking off {plain['loss']:.9f}, transformers on the plain windows "
          f"{plain_ref:.9f}")
    check(abs(plain["loss"] - plain_ref) <= bounds["loss"], "eval --document-masking off "
          "differs from transformers on the plain windows")

    # The built-in mutation: without the masks the per-document reference must not be met.
    try:
        compare_dump(dump_batch(args, imported, data, work, "off"), want, bounds, "unmasked")
    except CheckFailed as e:
        print(f"without document masks the comparison fails, as it must: {e}")
        return
    raise CheckFailed("the unmasked dump also matches the per-document reference: the check "
                      "cannot see the masks")


def main():
    p = argument_parser(__doc__.split("\n")[0])
    p.add_argument("--dump", required=True, help="zt_oracle_dump binary")
    args = p.parse_args()
    return exit_status(lambda: checks(args))


if __name__ == "__main__":
    sys.exit(main())
