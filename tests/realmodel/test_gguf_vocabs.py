#!/usr/bin/env python3
"""The tokenizers zerotrain rebuilds from GGUF vocabularies, against the real tokenizers they came
from (CTest label "realmodel", in the project venv).

llama.cpp keeps vocabulary-only GGUF files of real models' tokenizers beside the ids their
Hugging Face tokenizers give on a set of hard texts (models/ggml-vocab-NAME.gguf, .inp, .out:
`tokenizer.encode(text, add_special_tokens=False)` of the original tokenizer, written by
llama.cpp's convert_hf_to_gguf_update.py). ./run.sh deps takes them from PyPI's
llama-cpp-python sdist (pinned by SHA-256) into .deps/llama-cpp-vocab/.

For each vocabulary: SentencePiece BPE (llama-spm: Llama 2's tokenizer; phi-3: the same kind
with added chat tokens) and byte-level BPE (llama-bpe: Llama 3's; qwen2; gpt-2; refact and
starcoder, split as SmolLM's, the names Granite 3's GGUF files carry), a tiny random
Llama carrying that vocabulary's tokenizer metadata unchanged is written as GGUF and imported
with `zerotrain import`. The tokenizer files it rebuilds must give the original tokenizer's ids
on every text, decode them back to the text, add BOS as the metadata says (and, for a
SentencePiece file without the add_bos_token key, as llama.cpp does), and name the special tokens
and chat template of the metadata. The GGUF export of each holds the same tokens and token types
(unknown and control both count as special: llama.cpp's Phi-3 file types <unk> as control) and
imports back to the same ids; so does Llama 2's tokenizer rewritten in the newer Metaspace form
transformers writes, and the form with split=True is refused.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)

gguf, h5py, np, transformers = require_venv_modules("gguf", "h5py", "numpy", "transformers")
from gguf_reference import read_gguf  # noqa: E402

VOCABS = ["llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2", "refact", "starcoder"]
SEPARATOR = "\n__ggml_vocab_test__\n"
HIDDEN = 32


def cases(vocab_dir, name):
    """The texts and the original tokenizer's ids for them."""
    base = os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf")
    texts = open(base + ".inp", encoding="utf-8", newline="").read().split(SEPARATOR)
    if texts and texts[-1] == "":
        texts.pop()
    ids = [[int(t) for t in line.split()] for line in
           open(base + ".out", encoding="utf-8").read().split("\n")]
    check(len(ids) >= len(texts), f"{base}.out: {len(ids)} lines for {len(texts)} texts")
    return texts, ids[:len(texts)]


def tokenizer_fields(reader):
    """(key, value, type, element type) of every tokenizer.* metadata field, as stored."""
    T = gguf.GGUFValueType
    out = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == T.ARRAY else None
        out.append((key, field.contents(), vtype, sub))
    return out


def write_tiny_model(path, source, leave_out=(), pre=None):
    """A 1-layer random Llama whose tokenizer metadata is `source`'s, unchanged (less the keys
    in `leave_out`; with tokenizer.ggml.pre `pre` where given)."""
    reader = read_gguf(source)
    fields = [(k, pre, t, s) if pre and k == "tokenizer.ggml.pre" else (k, v, t, s)
              for k, v, t, s in tokenizer_fields(reader) if k not in leave_out]
    vocab_size = len(reader.fields["tokenizer.ggml.tokens"].contents())
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny llama with the vocabulary of " + os.path.basename(source))
    w.add_context_length(4096)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab_size)
    for key, value, vtype, sub in fields:
        w.add_key_value(key, value, vtype, sub_type=sub)

    def tensor(name, *shape):
        w.add_tensor(name, (0.02 * rng.standard_normal(shape)).astype(np.float16))

    tensor("token_embd.weight", vocab_size, HIDDEN)
    for name, shape in [("attn_q", (HIDDEN, HIDDEN)), ("attn_k", (HIDDEN, HIDDEN)),
                        ("attn_v", (HIDDEN, HIDDEN)), ("attn_output", (HIDDEN, HIDDEN)),
                        ("ffn_gate", (64, HIDDEN)), ("ffn_up", (64, HIDDEN)),
                        ("ffn_down", (HIDDEN, 64))]:
        tensor(f"blk.0.{name}.weight", *shape)
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {key: value for key, value, _, _ in fields}


def check_vocab(work, zt, vocab_dir, name):
    source = os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf")
    model_gguf = work(name + ".gguf")
    meta = write_tiny_model(model_gguf, source)
    imported = work(name + "_imported")
    run_tool([zt, "import", model_gguf, "--out", imported])
    check_tokenizer(imported, meta, vocab_dir, name)
    check_prompt_response(work, zt, imported, name)
    # Export writes the vocabulary back: the same tokens and token types, and a tokenizer that
    # imports to the same ids again. Unknown (2) and control (3) both mean a special token:
    # llama.cpp's Phi-3 file types <unk> as control and its padding tokens as unknown.
    exported = work(name + "_exported.gguf")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "f32", "--out", exported])
    back = {key: value for key, value, _, _ in tokenizer_fields(read_gguf(exported))}
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens"):
        check(back.get(key) == meta[key], f"{name}: the exported {key} differs from the source's")
    kinds = [[3 if t == 2 else t for t in m["tokenizer.ggml.token_type"]] for m in (back, meta)]
    differ = [i for i, (a, b) in enumerate(zip(*kinds)) if a != b]
    check(len(kinds[0]) == len(kinds[1]) and not differ,
          f"{name}: the exported token types differ from the source's at ids {differ[:10]}")
    reimported = work(name + "_reimported")
    run_tool([zt, "import", exported, "--out", reimported])
    check_tokenizer(reimported, meta, vocab_dir, name + " (exported, imported again)")


# Prompt/response pairs as users write them: the separator at the prompt's end, or a space
# opening the response, or neither (words the tokenizer may join across the boundary).
PAIRS = [("Question: What is 2+2?\nAnswer:", " 4"), ("Translate to French: cat\n", "chat"),
         ("Continue: once upon", " a time"), ("Spell it: abra", "cadabra")]


def check_prompt_response(work, zt, imported, name):
    """prepare-data's prompt/response SFT examples with this real tokenizer: tokenizer(prompt +
    response) and EOS, the tokens overlapping the response counted (transformers' offsets), which
    is TRL's prompt-completion encoding where tokenizer(prompt) is a prefix (it counts from its
    length); where the tokenizer joins the texts' boundary, from the token holding it. A
    response encoded on its own would open with a SentencePiece word-start space."""
    data, out = work(name + "_pairs.jsonl"), work(name + "_pairs.h5")
    with open(data, "w", encoding="utf-8") as f:
        for prompt, response in PAIRS:
            f.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    run_tool([zt, "prepare-data", "--tokenizer", imported, "--sft-jsonl", data, "--out", out])
    tok = transformers.AutoTokenizer.from_pretrained(imported)
    want_ids, want_mask = [], []
    for prompt, response in PAIRS:
        head = tok(prompt)["input_ids"]
        encoding = tok(prompt + response, return_offsets_mapping=True)
        whole = encoding["input_ids"]
        counted_from = next(i for i, (_, end) in enumerate(encoding["offset_mapping"])
                            if end > len(prompt))
        check(whole[:len(head)] != head or counted_from == len(head),
              f"{name}: {prompt!r} is a prefix of the pair's tokens, yet the response's first "
              f"token is {counted_from}, not TRL's {len(head)}")
        if whole[-1] != tok.eos_token_id:
            whole = whole + [tok.eos_token_id]
        want_ids += whole
        want_mask += [0] * counted_from + [1] * (len(whole) - counted_from)
    with h5py.File(out, "r") as f:
        ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
    check(ids == want_ids, f"{name}: the prompt/response ids are not tokenizer(prompt + response)"
          f"'s: {tok.convert_ids_to_tokens(ids)} vs {tok.convert_ids_to_tokens(want_ids)}")
    check(mask == want_mask, f"{name}: the prompt/response mask {mask} is not {want_mask}")
    print(f"ok   {name}: {len(PAIRS)} prompt/response pairs encoded as TRL encodes them, "
          f"{sum(mask)} tokens counted")


def check_bos_by_default(work, zt, vocab_dir):
    """A SentencePiece file from before the add_bos_token key: llama.cpp adds BOS, and so does
    the rebuilt tokenizer."""
    source = os.path.join(vocab_dir, "ggml-vocab-llama-spm.gguf")
    path = work("llama-spm-no-bos-key.gguf")
    meta = write_tiny_model(path, source, ("tokenizer.ggml.add_bos_token",
                                           "tokenizer.ggml.add_eos_token"))
    imported = work("llama-spm-no-bos-key_imported")
    run_tool([zt, "import", path, "--out", imported])
    ids = transformers.AutoTokenizer.from_pretrained(imported)("Hello world")["input_ids"]
    bos = meta["tokenizer.ggml.bos_token_id"]
    check(ids[0] == bos and ids.count(bos) == 1,
          f"without add_bos_token the rebuilt tokenizer gives {ids}, not BOS ({bos}) first")
    print(f"ok   llama-spm without add_bos_token: BOS added, as llama.cpp adds it ({ids})")


def check_dbrx(work, zt, vocab_dir):
    """llama.cpp's dbrx pre-tokenizer (cl100k's vocabularies: DBRX's, OLMo 2's) is Llama 3's split
    with the merges followed: its llama3 alone takes a pre-token found whole in the vocabulary as
    one token (ignore_merges). Llama 3's real vocabulary labelled dbrx imports to the tokenizer
    Llama 3's import gives with ignore_merges false (the tokenizers library's BPE then follows the
    merges): the same ids on every text, which differ from Llama 3's own on some (the flag is
    seen), and exports back as dbrx (Llama 3's own as llama-bpe, check_vocab)."""
    from tokenizers import Tokenizer
    path = work("llama-bpe-as-dbrx.gguf")
    write_tiny_model(path, os.path.join(vocab_dir, "ggml-vocab-llama-bpe.gguf"), pre="dbrx")
    imported = work("dbrx_imported")
    run_tool([zt, "import", path, "--out", imported])
    with open(os.path.join(work("llama-bpe_imported"), "tokenizer.json"), encoding="utf-8") as f:
        llama3 = json.load(f)
    check(llama3["model"]["ignore_merges"] is True, "llama-bpe: its import ignores no merges")
    llama3["model"]["ignore_merges"] = False
    want = Tokenizer.from_str(json.dumps(llama3))
    got = Tokenizer.from_file(os.path.join(imported, "tokenizer.json"))
    texts, llama3_ids = cases(vocab_dir, "llama-bpe")
    differ = 0
    for i, text in enumerate(texts):
        ids = got.encode(text, add_special_tokens=False).ids
        check(ids == want.encode(text, add_special_tokens=False).ids,
              f"dbrx text {i} {text!r}: ids {ids} are not the merges' {want.encode(text).ids}")
        differ += ids != llama3_ids[i]
    check(differ > 0, "dbrx: every text gives Llama 3's own ids: the flag is not seen")
    exported = work("dbrx_exported.gguf")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "f32", "--out", exported])
    pre = read_gguf(exported).fields["tokenizer.ggml.pre"].contents()
    check(pre == "dbrx", f"dbrx: exported with tokenizer.ggml.pre {pre!r}")
    print(f"ok   dbrx: Llama 3's vocabulary with its merges followed on {len(texts)} texts ({differ} "
          "unlike llama3's whole-word lookup), exported back as dbrx")


def check_metaspace_export(work, zt, vocab_dir):
    """A SentencePiece tokenizer.json in the newer form transformers writes (no normalizer, a
    Metaspace pre-tokenizer, legacy=False) exports as the same llama vocabulary; with split=True
    (which stops merges across U+2581) export refuses it, naming the file."""
    import shutil
    import subprocess
    imported = work("llama-spm_imported")
    meta = {key: value for key, value, _, _ in tokenizer_fields(
        read_gguf(work("llama-spm.gguf")))}
    for split in (False, True):
        model = work(f"llama-spm_metaspace_split{int(split)}")
        shutil.copytree(imported, model)
        path = os.path.join(model, "tokenizer.json")
        tok = json.load(open(path, encoding="utf-8"))
        tok["normalizer"] = None
        tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                                "prepend_scheme": "first", "split": split}
        tok["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                          "prepend_scheme": "first", "split": split}
        json.dump(tok, open(path, "w", encoding="utf-8"), ensure_ascii=False)
        exported = work(f"llama-spm_metaspace_split{int(split)}.gguf")
        proc = subprocess.run([zt, "export", model, "--format", "gguf", "--gguf-type", "f32",
                               "--out", exported], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if split:
            check(proc.returncode != 0 and "tokenizer.json" in proc.stdout and
                  not os.path.exists(exported),
                  f"a Metaspace pre-tokenizer with split=True was not refused: {proc.stdout}")
            print("ok   export refuses a Metaspace pre-tokenizer with split=True, naming the file")
            continue
        check(proc.returncode == 0, f"export of the Metaspace form failed: {proc.stdout}")
        reimported = work("llama-spm_metaspace_reimported")
        run_tool([zt, "import", exported, "--out", reimported])
        check_tokenizer(reimported, meta, vocab_dir, "llama-spm (Metaspace form, exported)")


def check_tokenizer(imported, meta, vocab_dir, label):
    name = label.split()[0]
    tok = transformers.AutoTokenizer.from_pretrained(imported)
    texts, want = cases(vocab_dir, name)
    for i, (text, ids) in enumerate(zip(texts, want)):
        got = tok(text, add_special_tokens=False)["input_ids"]
        check(got == ids, f"{label} text {i} {text!r}: ids {got} differ from the original "
              f"tokenizer's {ids}")
        back = tok.decode(got)
        check(back == text, f"{label} text {i} {text!r}: decodes to {back!r}")
    tokens = meta["tokenizer.ggml.tokens"]
    bos = meta.get("tokenizer.ggml.bos_token_id")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    with_specials = tok("Hello world")["input_ids"]
    plain = tok("Hello world", add_special_tokens=False)["input_ids"]
    adds_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    check(with_specials == ([bos] if adds_bos else []) + plain,
          f"{name}: with special tokens {with_specials}, without {plain}; "
          f"add_bos_token is {adds_bos}")
    check(bos is None or tok.bos_token == tokens[bos], f"{name}: bos_token {tok.bos_token!r}")
    check(eos is None or tok.eos_token == tokens[eos], f"{name}: eos_token {tok.eos_token!r}")
    template = meta.get("tokenizer.chat_template")
    check(tok.chat_template == template, f"{name}: the chat template differs from the metadata's")
    detail = ""
    if template:
        chat = [{"role": "user", "content": "What is 2 + 2?"}]
        rendered = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = tok(rendered, add_special_tokens=False)["input_ids"]
        specials = [t for t in tok.convert_ids_to_tokens(ids) if t in tok.all_special_tokens
                    or t in tok.get_added_vocab()]
        check(specials, f"{name}: the chat rendering {rendered!r} holds no added token")
        detail = f"; its chat template renders with added tokens {specials}"
    print(f"ok   {label} ({meta['tokenizer.ggml.model']}, {len(tokens)} tokens): "
          f"{len(texts)} texts give the original tokenizer's ids and decode back{detail}")


def main():
    parser = argument_parser(__doc__)
    parser.add_argument("--vocab-dir", required=True,
                        help="llama.cpp's models/ folder of ggml-vocab-* files")
    args = parser.parse_args()
    work = fresh_work_dir(args.work_dir)
    for name in VOCABS:
        if not os.path.exists(os.path.join(args.vocab_dir, f"ggml-vocab-{name}.gguf")):
            print(f"SETUP ERROR: {args.vocab_dir} has no ggml-vocab-{name}.gguf (./run.sh deps)")
            return 2

    def checks():
        for name in VOCABS:
            check_vocab(work, args.zerotrain, args.vocab_dir, name)
        check_bos_by_default(work, args.zerotrain, args.vocab_dir)
        check_dbrx(work, args.zerotrain, args.vocab_dir)
        check_metaspace_export(work, args.zerotrain, args.vocab_dir)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
