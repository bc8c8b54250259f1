#!/usr/bin/env python3
"""GGUF import and export against llama.cpp's gguf package and transformers' GGUF loader (CTest
label "oracle", in the project venv).

1. Dequantization: a file written by gguf's GGUFWriter holds 3 rows of 512 elements of each type
   zerotrain reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K),
   random block bytes with finite fp16 scales. zt_gguf_dequant's fp32 values equal
   gguf.quants.dequantize's bit for bit.
2. Models: a tiny random Llama (untied, K-quants and legacy quants across its tensors, q/k rows
   permuted as llama.cpp's converter permutes them) and a tiny Qwen2 (biases, tied embeddings,
   no permutation) are written as GGUF files with a byte-level BPE vocabulary trained here and a
   ChatML template. transformers' GGUF loader reads each (its lm_head restored to the embedding
   when output.weight is absent: transformers 4.46 forgets the tie). `zerotrain import FILE.gguf`
   gives the same tensors (after the one rounding to bf16) bit for bit, `eval` the same loss as
   transformers on the bf16 weights (the bound of test_hf_families.py), and the rebuilt
   tokenizer the same ids as transformers' GGUF tokenizer on the sample text and a chat
   rendering.
3. Export: the imported Llama exported as F32 and BF16 imports back bit for bit with the same
   tokenizer files; as Q8_0 its bytes equal gguf.quants.quantize of the same values in GGUF's row
   order; transformers' GGUF loader on the BF16 export gives `eval`'s loss. A Mistral window
   is written as llama.attention.sliding_window, with a warning that llama.cpp does not apply
   it, and imports back.
4. Bad files are refused naming the file and the tensor or key, leaving no output.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fp32_model_bound,  # noqa: E402
                            fresh_work_dir, require_venv_modules, run_tool)

gguf, h5py, np, tokenizers, torch, transformers = require_venv_modules(
    "gguf", "h5py", "numpy", "tokenizers", "torch", "transformers")
from gguf_reference import model_dir_tensors, read_gguf, transformers_gguf_model  # noqa: E402
from llama_reference import read_float32  # noqa: E402
from test_hf_families import hf_loss, last_json_line  # noqa: E402

Q = gguf.GGMLQuantizationType
# Byte offsets of each type's fp16 scale fields in a block: set to small finite values.
SCALE_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
                Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
          "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SHAPE = dict(hidden=256, ffn=512, layers=2, heads=4, kv_heads=2, context=256)


def random_blocks(rng, qtype, rows, cols, scale=0.01):
    """rows × cols elements of qtype as raw bytes: random quants, fp16 scales ~ N(0, scale²)."""
    block, size = gguf.constants.GGML_QUANT_SIZES[qtype]
    if qtype in (Q.F32, Q.F16):
        return (rng.standard_normal((rows, cols)) * 0.1).astype(
            np.float32 if qtype == Q.F32 else np.float16)
    if qtype == Q.BF16:
        x = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, -1)
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for offset in SCALE_FIELDS[qtype]:
        d = (rng.standard_normal(raw.shape[:2]) * scale).astype(np.float16)
        raw[:, :, offset:offset + 2] = d.view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw.reshape(rows, -1)


def dequantized(raw, qtype):
    if qtype in (Q.F32, Q.F16):
        return raw.astype(np.float32)
    return gguf.quants.dequantize(raw, qtype).astype(np.float32)


def write_gguf(path, arch, metadata, tensors, vocab, chat_template=CHATML):
    """tensors: name -> (raw array, qtype or None for F32/F16 arrays); chat_template: a string or
    the list form [{"name", "template"}], as gguf's add_chat_template takes them."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny " + arch)  # transformers' loader reads general.name
    for key, (kind, value) in metadata.items():
        getattr(w, "add_" + kind)(key, value) if kind != "raw" else w.add_key_value(*value)
    tokens, types, merges = vocab
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(chat_template)
    for name, (raw, qtype) in tensors.items():
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def train_vocab(sample, work):
    """A byte-level BPE of 512 tokens trained on the sample, the ChatML specials first."""
    from tokenizers import models, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train([sample], trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIALS,
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    saved = json.loads(tok.to_str())
    vocab = saved["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    check(len(tokens) == 512 and None not in tokens, "the trained vocabulary is not 512 tokens")
    types = [3 if t in SPECIALS else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]]
    return tokens, types, merges


def permute(rows, heads):
    """llama.cpp's converter: within each head, the two halves of the rows interleaved."""
    n, cols = rows.shape
    return rows.reshape(heads, 2, n // heads // 2, cols).swapaxes(1, 2).reshape(n, cols)


def model_tensors(rng, arch, vocab_size):
    """GGUF tensors of a random model: (raw, qtype) by name, types cycling over the quants."""
    s = SHAPE
    hd = s["hidden"] // s["heads"]
    types = [Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K,
             Q.F16, Q.BF16, Q.F32]
    out = {}

    def matrix(name, rows, cols):
        qtype = types[len(out) % len(types)]
        raw = random_blocks(rng, qtype, rows, cols)
        out[name] = (raw, None if qtype in (Q.F32, Q.F16) else qtype)

    def vector(name, n, mean=0.0):
        out[name] = ((mean + 0.1 * rng.standard_normal(n)).astype(np.float32), None)

    matrix("token_embd.weight", vocab_size, s["hidden"])
    for i in range(s["layers"]):
        b = f"blk.{i}."
        vector(b + "attn_norm.weight", s["hidden"], 1.0)
        vector(b + "ffn_norm.weight", s["hidden"], 1.0)
        matrix(b + "attn_q.weight", s["heads"] * hd, s["hidden"])
        matrix(b + "attn_k.weight", s["kv_heads"] * hd, s["hidden"])
        matrix(b + "attn_v.weight", s["kv_heads"] * hd, s["hidden"])
        matrix(b + "attn_output.weight", s["hidden"], s["heads"] * hd)
        matrix(b + "ffn_gate.weight", s["ffn"], s["hidden"])
        matrix(b + "ffn_up.weight", s["ffn"], s["hidden"])
        matrix(b + "ffn_down.weight", s["hidden"], s["ffn"])
        if arch == "qwen2":
            for proj, n in (("q", s["heads"] * hd), ("k", s["kv_heads"] * hd),
                            ("v", s["kv_heads"] * hd)):
                vector(b + f"attn_{proj}.bias", n)
    vector("output_norm.weight", s["hidden"], 1.0)
    if arch == "llama":
        matrix("output.weight", vocab_size, s["hidden"])
    return out


def metadata(arch, vocab_size):
    s = SHAPE
    return {f"{arch}.{k}": v for k, v in {
        "context_length": ("uint32", s["context"]),
        "embedding_length": ("uint32", s["hidden"]),
        "block_count": ("uint32", s["layers"]),
        "feed_forward_length": ("uint32", s["ffn"]),
        "attention.head_count": ("uint32", s["heads"]),
        "attention.head_count_kv": ("uint32", s["kv_heads"]),
        "rope.freq_base": ("float32", 500000.0 if arch == "llama" else 1000000.0),
        "attention.layer_norm_rms_epsilon": ("float32", 1e-5),
        "vocab_size": ("uint32", vocab_size),
    }.items()}


def check_dequantization(work, dequant_tool):
    rng = np.random.default_rng(1)
    path = work("types.gguf")
    w = gguf.GGUFWriter(path, "llama")
    expected = {}
    for qtype in [Q.F32, Q.F16, Q.BF16] + list(SCALE_FIELDS):
        raw = random_blocks(rng, qtype, 3, 512)
        w.add_tensor(qtype.name, raw, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
        expected[qtype.name] = dequantized(raw, qtype).reshape(-1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.makedirs(work("types"))
    run_tool([dequant_tool, path, work("types")])
    for name, want in expected.items():
        got = np.fromfile(work("types", name + ".f32"), dtype=np.float32)
        same = got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        bad = "" if same else f": {int((got != want).sum())} of {want.size} values differ"
        check(same, f"{name}: zerotrain's dequantization differs from gguf's{bad}")
        print(f"ok   {name}: {want.size} values bitwise equal to gguf.quants.dequantize")


def check_model(work, zt, arch, vocab, sample):
    rng = np.random.default_rng(2 if arch == "llama" else 3)
    vocab_size = len(vocab[0])
    tensors = model_tensors(rng, arch, vocab_size)
    # Random q/k rows: both readers undo llama.cpp's permutation on the same stored bytes.
    gguf_dir = work(arch)
    os.makedirs(gguf_dir)
    write_gguf(os.path.join(gguf_dir, "model.gguf"), arch, metadata(arch, vocab_size), tensors,
               vocab)
    imported = work(arch + "_imported")
    run_tool([zt, "import", os.path.join(gguf_dir, "model.gguf"), "--out", imported])
    model = transformers_gguf_model(os.path.join(gguf_dir, "model.gguf"))
    state = model.state_dict()
    index = json.load(open(os.path.join(imported, "model.h5.index.json")))["weight_map"]
    for name, shard in sorted(index.items()):
        with h5py.File(os.path.join(imported, shard), "r") as f:
            got = read_float32(f[name])
        want = state[name].numpy()
        check(np.array_equal(got, want), f"{arch} {name}: zerotrain's import differs from "
              f"transformers' GGUF loader in {int((got != want).sum())} values")
    print(f"ok   {arch}: {len(index)} tensors bitwise equal to transformers' GGUF loader (bf16)")
    data = work(arch + "_data.h5")
    run_tool([zt, "prepare-data", "--tokenizer", imported, "--text", sample, "--document-eos",
              "off", "--out", data])
    with h5py.File(data, "r") as f:
        tokens = f["tokens"][:]
    reference_tok = transformers.AutoTokenizer.from_pretrained(gguf_dir, gguf_file="model.gguf")
    text = open(sample, encoding="utf-8").read()
    want = reference_tok(text, add_special_tokens=False)["input_ids"]
    check(tokens.tolist() == want, f"{arch}: the rebuilt tokenizer's ids differ from "
          "transformers' GGUF tokenizer's on the sample text")
    chat = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}]
    ours = transformers.AutoTokenizer.from_pretrained(imported)
    rendered = ours.apply_chat_template(chat, tokenize=False)
    check(rendered == reference_tok.apply_chat_template(chat, tokenize=False),
          f"{arch}: the chat template renders differently")
    check(ours(rendered, add_special_tokens=False)["input_ids"] ==
          reference_tok(rendered, add_special_tokens=False)["input_ids"],
          f"{arch}: the ids of a chat rendering differ")
    check(ours.eos_token == "<|im_end|>" and ours.bos_token == "<|im_start|>",
          f"{arch}: special tokens {ours.bos_token!r}/{ours.eos_token!r}")
    print(f"ok   {arch}: rebuilt tokenizer = transformers' GGUF tokenizer on {len(want)} tokens "
          "and a chat rendering")
    seq_len, micro_batch, batches = 32, 2, 2
    out = run_tool([zt, "eval", "--model", imported, "--data", data, "--batches", str(batches),
                    "--micro-batch", str(micro_batch), "--seq-len", str(seq_len)])
    zt_loss = last_json_line(out)["loss"]
    hf = hf_loss(model, tokens, range(micro_batch * batches), seq_len)
    bound = loss_bound(hf, vocab_size)
    print(f"{arch} eval: zerotrain {zt_loss:.9f} transformers {hf:.9f} |diff| "
          f"{abs(zt_loss - hf):.3e} bound {bound:.3e}")
    check(abs(zt_loss - hf) <= bound, f"{arch}: eval loss differs from transformers'")
    return imported, data, tokens, zt_loss


def loss_bound(loss, vocab_size):
    """test_hf_families.py's bound: both sides compute in fp32 on the same bf16 weights."""
    n = max(SHAPE["hidden"], SHAPE["ffn"], vocab_size)
    return fp32_model_bound(n, SHAPE["layers"], loss)


def check_export(work, zt, imported, data, tokens, zt_loss):
    original = model_dir_tensors(imported)
    for kind in ("f32", "bf16"):
        path = work(f"export_{kind}.gguf")
        run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", kind, "--out", path])
        back = work(f"reimported_{kind}")
        run_tool([zt, "import", path, "--out", back])
        again = model_dir_tensors(back)
        check(sorted(again) == sorted(original) and all(
            np.array_equal(again[k].view(np.uint32), original[k].view(np.uint32))
            for k in original), f"export --gguf-type {kind} does not import back bit for bit")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            check(open(os.path.join(back, name)).read() == open(os.path.join(imported, name)).read(),
                  f"export --gguf-type {kind}: {name} does not come back the same")
        print(f"ok   export --gguf-type {kind} imports back bit for bit, tokenizer included")
    path = work("export_q8_0.gguf")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "q8_0", "--out", path])
    reader = read_gguf(path)
    hd = SHAPE["hidden"] // SHAPE["heads"]
    hf_name_of = {v: k for k, v in gguf_names(original).items()}
    for t in reader.tensors:
        values = original[hf_name_of[t.name]]
        if t.name.endswith(("attn_q.weight", "attn_k.weight")):
            values = permute(values, values.shape[0] // hd)
        if t.tensor_type == Q.Q8_0:
            want = gguf.quants.quantize(values, Q.Q8_0)
            check(np.array_equal(np.asarray(t.data).reshape(-1), want.reshape(-1)),
                  f"export q8_0: {t.name}'s bytes differ from gguf.quants.quantize")
    print("ok   export --gguf-type q8_0: every Q8_0 tensor equals gguf.quants.quantize's bytes")
    # general.name, which llama.cpp and Ollama list: the imported file's, or --gguf-name.
    check(reader.fields["general.name"].contents() == "tiny llama",
          f"export: general.name {reader.fields['general.name'].contents()!r}, not the imported "
          "file's 'tiny llama'")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-name", "zerotrain tiny", "--out",
              work("export_named.gguf")])
    named = read_gguf(work("export_named.gguf")).fields["general.name"].contents()
    check(named == "zerotrain tiny", f"export --gguf-name: general.name {named!r}")
    print("ok   export: general.name is the imported file's, or --gguf-name's")
    model = transformers_gguf_model(work("export_bf16.gguf"))
    hf = hf_loss(model, tokens, range(4), 32)
    check(abs(hf - zt_loss) <= loss_bound(hf, model.config.vocab_size),
          f"transformers on the bf16 export: loss {hf} vs zerotrain eval {zt_loss}")
    print(f"ok   transformers' GGUF loader on the bf16 export: loss {hf:.9f} = eval {zt_loss:.9f}")


def gguf_names(tensors):
    out = {}
    for name in tensors:
        if name == "model.embed_tokens.weight":
            out[name] = "token_embd.weight"
        elif name == "model.norm.weight":
            out[name] = "output_norm.weight"
        elif name == "lm_head.weight":
            out[name] = "output.weight"
        else:
            layer, rest = name.split(".")[2], ".".join(name.split(".")[3:])
            short = {"input_layernorm.weight": "attn_norm.weight",
                     "post_attention_layernorm.weight": "ffn_norm.weight",
                     "self_attn.o_proj.weight": "attn_output.weight"}.get(rest)
            if short is None:
                short = rest.replace("self_attn.", "attn_").replace("_proj", "").replace(
                    "mlp.", "ffn_")
            out[name] = f"blk.{layer}.{short}"
    return out


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def converter_rope_factors(converter, theta, rope_scaling):
    """rope_freqs.weight as llama.cpp's converter computes it: LlamaModel.generate_extra_tensors,
    its source taken from convert_hf_to_gguf.py (the module itself imports packages Debian's torch
    lacks) and run on the model's hyperparameters."""
    import ast
    import math
    tree = ast.parse(open(converter, encoding="utf-8").read())
    llama = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlamaModel")
    method = next(n for n in llama.body
                  if isinstance(n, ast.FunctionDef) and n.name == "generate_extra_tensors")
    method.returns = None
    method.args.args[0].annotation = None
    namespace = {"math": math, "torch": torch, "gguf": gguf}
    exec(compile(ast.Module([method], []), converter, "exec"), namespace)
    # The converter reads original_max_position_embeddings from the top level of config.json
    # (8192 when absent), not from rope_scaling: the model's value is given there too.
    hparams = {"rope_theta": theta, "hidden_size": SHAPE["hidden"],
               "num_attention_heads": SHAPE["heads"], "rope_scaling": rope_scaling,
               "original_max_position_embeddings":
                   rope_scaling["original_max_position_embeddings"]}

    class Model:
        def __init__(self):
            self.hparams = hparams

        def find_hparam(self, keys, optional=False):
            return next((hparams[k] for k in keys if k in hparams), None)

        def format_tensor_name(self, kind):
            return gguf.TENSOR_NAMES[kind] + ".weight"

    (name, factors), = list(namespace["generate_extra_tensors"](Model()))
    check(name == "rope_freqs.weight", f"the converter names its tensor {name!r}")
    return factors.numpy().astype(np.float32)


def check_llama3_rope(work, zt, vocab, sample, converter):
    """Llama 3.1-style rope scaling through GGUF: a file carrying llama.cpp's rope_freqs.weight
    imports with the parameters it came from, evaluates as transformers does with them (and
    visibly unlike the model without them), and exports the converter's factors bit for bit."""
    rng = np.random.default_rng(4)
    vocab_size = len(vocab[0])
    theta = 10000.0
    factors = converter_rope_factors(converter, theta, LLAMA3_ROPE)
    tensors = model_tensors(rng, "llama", vocab_size)
    tensors["rope_freqs.weight"] = (factors, None)
    meta = metadata("llama", vocab_size)
    meta["llama.rope.freq_base"] = ("float32", theta)
    os.makedirs(work("llama3"))
    path = work("llama3", "model.gguf")
    write_gguf(path, "llama", meta, tensors, vocab)
    imported = work("llama3_imported")
    run_tool([zt, "import", path, "--out", imported])
    got = json.load(open(os.path.join(imported, "config.json")))["rope_scaling"]
    check({k: got.get(k) for k in LLAMA3_ROPE} == LLAMA3_ROPE,
          f"rope_scaling {got}, the factors came from {LLAMA3_ROPE}")
    print(f"ok   rope_freqs.weight imports as rope_scaling {LLAMA3_ROPE}")
    plain = transformers_gguf_model(path)  # transformers' GGUF loader ignores rope_freqs.weight
    config = plain.config.to_dict()
    config["rope_scaling"] = dict(LLAMA3_ROPE)
    scaled = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    scaled.load_state_dict(plain.state_dict())
    data = work("llama3_data.h5")
    run_tool([zt, "prepare-data", "--tokenizer", imported, "--text", sample, "--out", data])
    with h5py.File(data, "r") as f:
        tokens = f["tokens"][:]
    out = run_tool([zt, "eval", "--model", imported, "--data", data, "--batches", "2",
                    "--micro-batch", "2", "--seq-len", "32"])
    zt_loss = last_json_line(out)["loss"]
    want, unscaled = (hf_loss(m, tokens, range(4), 32) for m in (scaled, plain))
    bound = loss_bound(want, vocab_size)
    print(f"llama3 eval: zerotrain {zt_loss:.9f} transformers {want:.9f} without the scaling "
          f"{unscaled:.9f} bound {bound:.3e}")
    check(abs(zt_loss - want) <= bound, "eval with llama3 rope scaling differs from transformers'")
    check(abs(unscaled - want) > bound, "the check cannot see the rope scaling")
    exported = work("llama3_export.gguf")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "f32", "--out", exported])
    written = next(t for t in read_gguf(exported).tensors if t.name == "rope_freqs.weight")
    written = np.asarray(written.data, dtype=np.float32).reshape(-1)
    check(np.array_equal(written.view(np.uint32), factors.view(np.uint32)),
          f"export's rope_freqs.weight {written} differs from the converter's {factors}")
    back = work("llama3_reimported")
    run_tool([zt, "import", exported, "--out", back])
    again, original = model_dir_tensors(back), model_dir_tensors(imported)
    check(all(np.array_equal(again[k], original[k]) for k in original) and
          json.load(open(os.path.join(back, "config.json")))["rope_scaling"] == got,
          "the llama3 export does not import back the same")
    print("ok   export writes the converter's rope_freqs.weight bit for bit; it imports back the same")


def check_refusals(work, zt, source_gguf):
    raw = open(source_gguf, "rb").read()
    cases = [("truncated.gguf", raw[:len(raw) - 1000], ["truncated.gguf", "output.weight"]),
             ("not.gguf", b"GGUX" + raw[4:], ["not.gguf"]),
             ("version.gguf", raw[:4] + (99).to_bytes(4, "little") + raw[8:],
              ["version.gguf", "version 99"])]
    for name, content, named in cases:
        path = work(name)
        open(path, "wb").write(content)
        out = work(name + "_out")
        proc = subprocess.run([zt, "import", path, "--out", out], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        print(proc.stdout.strip())
        check(proc.returncode != 0, f"{name}: accepted")
        for part in named:
            check(part in proc.stdout, f"{name}: the error does not name {part!r}")
        check(not os.path.exists(out), f"{name}: {out} was left behind")
    print("ok   bad GGUF files are refused by name, leaving nothing")


def check_sliding_window(work, zt, imported):
    """A Mistral model's window travels in llama.attention.sliding_window: the export says that
    llama.cpp does not apply it, and an import reads it back (so eval past it is refused)."""
    mistral = work("mistral_window")
    shutil.copytree(imported, mistral)
    path = os.path.join(mistral, "config.json")
    config = json.load(open(path))
    config.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=16)
    for key in ("attention_bias", "mlp_bias"):
        config.pop(key, None)
    with open(path, "w") as f:
        json.dump(config, f)
    proc = subprocess.run([zt, "export", mistral, "--format", "gguf", "--gguf-type", "f32",
                           "--out", work("mistral_window.gguf")], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    check(proc.returncode == 0, f"export of a model with a window failed: {proc.stderr}")
    check("sliding window of 16 tokens" in proc.stderr and "does not apply it" in proc.stderr,
          f"the export does not warn that llama.cpp ignores the window: {proc.stderr!r}")
    fields = read_gguf(work("mistral_window.gguf")).fields
    check(int(fields["llama.attention.sliding_window"].contents()) == 16,
          "the GGUF file does not record the window")
    run_tool([zt, "import", work("mistral_window.gguf"), "--out", work("mistral_window_back")])
    back = json.load(open(work("mistral_window_back", "config.json")))
    check(back.get("sliding_window") == 16 and back.get("model_type") == "mistral",
          f"the window does not import back: {back}")
    print("ok   a Mistral window travels in llama.attention.sliding_window; the export warns that "
          "llama.cpp ignores it")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--dequant", required=True, help="zt_gguf_dequant binary")
    parser.add_argument("--converter", required=True,
                        help="llama.cpp's convert_hf_to_gguf.py (./run.sh deps)")
    args = parser.parse_args()
    if not os.path.exists(args.converter):
        print(f"SETUP ERROR: no {args.converter} (./run.sh deps)")
        return 2
    torch.set_num_threads(1)
    work = fresh_work_dir(args.work_dir)
    sample = os.path.join(args.source_dir, "inputs/data/sample.txt")
    transformers.logging.set_verbosity_error()

    def checks():
        check_dequantization(work, args.dequant)
        vocab = train_vocab(sample, work(""))
        imported, data, tokens, loss = check_model(work, args.zerotrain, "llama", vocab, sample)
        check_model(work, args.zerotrain, "qwen2", vocab, sample)
        check_export(work, args.zerotrain, imported, data, tokens, loss)
        check_sliding_window(work, args.zerotrain, imported)
        check_llama3_rope(work, args.zerotrain, vocab, sample, args.converter)
        check_refusals(work, args.zerotrain, work("llama", "model.gguf"))

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
