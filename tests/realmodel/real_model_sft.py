"""The chat SFT part of test_real_model.py: the shipped chat data prepared with SmolLM2's real
tokenizer and a ChatML template file, packed into 4 windows by --packing bfd, trained at 2 ranks
ZeRO-3 against transformers' loss of each whole conversation alone (and of the packed windows,
without document masks). `compare` and `bound` are the test's loss comparison and its bound."""

import itertools
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from oracle_harness import check, document_parts, require_venv_modules, run_tool  # noqa: E402

h5py, np, torch, transformers = require_venv_modules("h5py", "numpy", "torch", "transformers")


def completion_only_mask(ids, response, turn_start):
    """1 for the tokens after each `response` id sequence up to the next `turn_start` id."""
    mask, counting, i = [0] * len(ids), False, 0
    while i < len(ids):
        if ids[i:i + len(response)] == response:
            for j in range(i, i + len(response)):
                mask[j] = 0
            i += len(response)
            counting = True
            continue
        if ids[i] == turn_start:
            counting = False
        mask[i] = int(counting)
        i += 1
    return mask


def conversation_loss(model, ids, mask, starts, windows):
    """The masked loss over `windows`, token ranges [begin, end) (inputs all but the last token,
    targets all but the first), with each conversation's part of a window run alone: a target
    counts where the mask is 1 and it does not begin a conversation. Returns (loss, targets)."""
    total, counted = 0.0, 0
    with torch.no_grad():
        for begin, end in windows:
            for a, b in document_parts(starts, begin, end - 1):
                logits = model(input_ids=torch.tensor([ids[a:b]])).logits[0].double()
                logp = torch.log_softmax(logits, dim=-1)
                for i in range(a, b):
                    if mask[i + 1] == 1 and i + 1 not in starts:
                        total -= logp[i - a, ids[i + 1]].item()
                        counted += 1
    return total / counted, counted


def bfd_windows(starts, n, T):
    """--packing bfd (train's default for SFT data, io/window_packing.h) over n tokens of whole
    conversations, each at most T + 1 tokens: longest first (ties in order), each into the window
    with the least room that holds it (ties: the earliest), else into a new window. A list of
    windows, each a list of (begin, end) token ranges in the order they went in."""
    convs = list(zip(starts, starts[1:] + [n]))
    check(all(b - a <= T + 1 for a, b in convs), "a conversation is longer than a window")
    windows, room = [], []
    for a, b in sorted(convs, key=lambda c: -(c[1] - c[0])):  # sorted() is stable
        fits = [w for w in range(len(windows)) if room[w] >= b - a]
        if fits:
            w = min(fits, key=lambda w: (room[w], w))
        else:
            windows.append([])
            room.append(T + 1)
            w = len(windows) - 1
        windows[w].append((a, b))
        room[w] -= b - a
    return windows


def base_model_dir(work):
    """SmolLM2 as a base model's directory comes: the same weights (linked), its tokenizer without
    a chat template, which work("smollm2.jinja") holds instead, for --chat-template-file."""
    os.makedirs(work("base"), exist_ok=True)
    for name in os.listdir(work("model")):
        if name == "tokenizer_config.json":
            with open(work("model", name), encoding="utf-8") as f:
                config = json.load(f)
            with open(work("smollm2.jinja"), "w", encoding="utf-8") as f:
                f.write(config.pop("chat_template"))
            with open(work("base", name), "w", encoding="utf-8") as f:
                json.dump(config, f, ensure_ascii=False, indent=2)
        elif name.endswith(".h5"):
            os.symlink(work("model", name), work("base", name))
        else:
            shutil.copy(work("model", name), work("base", name))
    return work("base"), work("smollm2.jinja")


def check_sft_data(work, zt, data):
    """prepare-data of the shipped chat data with the real tokenizer and a ChatML template:
    apply_chat_template's ids, and the completion-only rule's mask. Returns (ids, mask, base
    model directory, template file)."""
    base, template = base_model_dir(work)
    run_tool([zt, "prepare-data", "--tokenizer", base, "--sft-jsonl", data,
              "--messages-field", "messages", "--chat-template-file", template, "--workers", "2",
              "--out", work("sft.h5")])
    tok = transformers.AutoTokenizer.from_pretrained(work("model"))
    want_ids = []
    for line in open(data, encoding="utf-8"):
        want_ids += tok.apply_chat_template(json.loads(line)["messages"], tokenize=True)
    with h5py.File(work("sft.h5"), "r") as f:
        ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
    check(ids == want_ids, "the SFT tokens are not apply_chat_template's")
    response = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    want_mask = completion_only_mask(ids, response, tok.convert_tokens_to_ids("<|im_start|>"))
    check(mask == want_mask, f"the loss mask differs from the completion-only rule at "
          f"{sum(a != b for a, b in zip(mask, want_mask))} tokens")
    print(f"ok   chat SFT data: {len(ids)} tokens as apply_chat_template renders them, "
          f"{sum(mask)} counted as the completion-only rule counts them")
    return ids, mask, base, template


def four_windows(work, ids):
    """work/sft4.h5: the first conversations, which --packing bfd packs into exactly 4 windows.
    Returns (T, their starts, the windows, the windows' pieces in order)."""
    # The first conversations that --packing bfd (auto for SFT data) packs into exactly 4 training
    # windows of whole conversations, so that the first step's global batch is all of them. At
    # 160 tokens a window holds two of the shipped conversations (46 to 131 tokens), and
    # the held-out rest still fills the 4 evaluation windows of 161 tokens.
    T = 160
    with h5py.File(work("sft.h5"), "r") as src:
        all_starts = [int(s) for s in src["doc_starts"][:]]
    ends = all_starts[1:] + [len(ids)]
    kept = 0
    while kept < len(all_starts) and len(bfd_windows(all_starts[:kept + 1], ends[kept], T)) <= 4:
        kept += 1
    starts, n = all_starts[:kept], ends[kept - 1]
    windows = bfd_windows(starts, n, T)
    pieces = [piece for window in windows for piece in window]  # each a whole conversation
    check(len(windows) == 4 and len(starts) > 4,
          f"{len(starts)} conversations in {len(windows)} windows, not more than 4 in 4")
    with h5py.File(work("sft.h5"), "r") as src, h5py.File(work("sft4.h5"), "w") as dst:
        for name, value in src.attrs.items():
            dst.attrs[name] = value
        for name in src:
            data_of = {"tokens": src[name][:n], "loss_mask": src[name][:n],
                       "doc_starts": np.array(starts, dtype=np.uint64)}.get(name, src[name][:])
            dst.create_dataset(name, data=data_of)
            for key, value in src[name].attrs.items():
                dst[name].attrs[key] = value
    return T, starts, windows, pieces


def held_out(work, zt, data, first, base, template):
    """The held-out set: the conversations from `first` on, prepared alike (the same real
    tokenizer files, which --eval-data must match), scored after step 3."""
    with open(data, encoding="utf-8") as f:
        held_lines = f.readlines()[first:]
    with open(work("held.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(held_lines)
    run_tool([zt, "prepare-data", "--tokenizer", base, "--sft-jsonl", work("held.jsonl"),
              "--messages-field", "messages", "--chat-template-file", template,
              "--out", work("held.h5")])
    with h5py.File(work("held.h5"), "r") as f:
        held = (f["tokens"][:].tolist(), f["loss_mask"][:].tolist(),
                [int(s) for s in f["doc_starts"][:]])
    return held


def packed_reference_loss(reference, ids, mask, windows):
    """transformers' loss of the same windows without document masks: the conversations attend to
    each other (the target at each conversation after a window's first still does not count).
    Returns (loss, targets)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for window_pieces in windows:
            window = torch.tensor([[t for a, b in window_pieces for t in ids[a:b]]])
            labels = window.clone()
            labels[0, torch.tensor([m for a, b in window_pieces for m in mask[a:b]]) == 0] = -100
            joins = list(itertools.accumulate(b - a for a, b in window_pieces))[:-1]
            labels[0, joins] = -100
            targets = int((labels[0, 1:] != -100).sum())
            total += reference(input_ids=window, labels=labels).loss.item() * targets
            count += targets
    return total / count, count


def check_sft(work, zt, source_dir, mpirun, reference, compare, bound):
    """Chat SFT on the real model: the data, then a 2-rank ZeRO-3 run on 4 packed windows whose
    first step is transformers' loss of each whole conversation alone; without document masks,
    the packed windows' loss."""
    data = os.path.join(source_dir, "inputs/data/chat/zerotrain_facts.jsonl")
    ids, mask, base, template = check_sft_data(work, zt, data)
    T, starts, windows, pieces = four_windows(work, ids)
    held = held_out(work, zt, data, len(starts), base, template)
    run_tool([mpirun, "-n", "2", "-x", "OMP_NUM_THREADS=1", zt, "train", "--model",
              work("model"), "--data", work("sft4.h5"), "--out", work("run"), "--zero-stage", "3",
              "--steps", "3", "--micro-batch", "2", "--seq-len", str(T), "--lr", "1e-5",
              "--warmup-steps", "0", "--eval-batches", "1", "--eval-every", "3", "--eval-data",
              work("held.h5"), "--comm-timeout", "120"])
    steps = [json.loads(line) for line in open(work("run", "metrics.jsonl"))]
    config = json.load(open(work("run", "run.json")))["config"]
    check(config["document_masking"] == "on" and config["packing"] == "bfd",
          "the chat SFT run did not pack whole conversations and mask them: "
          f"{config['packing']}, {config['document_masking']}")
    loss, counted = conversation_loss(reference, ids, mask, starts, pieces)
    check(steps[0]["loss_tokens"] == counted,
          f"step 1 counted {steps[0]['loss_tokens']} targets, the reference {counted}")
    compare("step 1 of 2-rank ZeRO-3 chat SFT, each whole conversation alone", steps[0]["loss"],
            loss)
    packed, count = packed_reference_loss(reference, ids, mask, windows)
    print(f"the packed windows' loss (no document masks) is {packed:.6f}")
    check(abs(packed - loss) > bound(packed),
          "the per-conversation reference equals the packed one: the check cannot see masks")
    # zerotrain's first step on the same data with --document-masking off is that loss: which
    # conversations share a window, in what order, and the targets at their joins, end to end.
    run_tool([mpirun, "-n", "2", "-x", "OMP_NUM_THREADS=1", zt, "train", "--model",
              work("model"), "--data", work("sft4.h5"), "--out", work("run_unmasked"),
              "--zero-stage", "3", "--steps", "1", "--micro-batch", "2", "--seq-len", str(T),
              "--lr", "1e-5", "--warmup-steps", "0", "--eval-batches", "0",
              "--document-masking", "off", "--comm-timeout", "120"])
    unmasked = json.loads(open(work("run_unmasked", "metrics.jsonl")).readline())
    check(unmasked["loss_tokens"] == count,
          f"without masks step 1 counted {unmasked['loss_tokens']} targets, the reference {count}")
    compare("step 1 without document masks, on the bfd windows written here",
            unmasked["loss"], packed)
    check(len(steps) == 3, f"{len(steps)} steps ran")
    check([s["step"] for s in steps if "eval_loss" in s] == [3], "eval_loss is not step 3's alone")
    return (ids, mask, starts, T, pieces), held
