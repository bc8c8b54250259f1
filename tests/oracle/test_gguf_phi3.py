#!/usr/bin/env python3
"""Phi-3 GGUF files (llama.cpp's phi3 architecture) against transformers (CTest label "oracle", in
the project venv).

A tiny random transformers Phi3ForCausalLM, rounded to bf16, is written as llama.cpp's converter
writes a Phi-3 checkpoint, independently of zerotrain's code:
  - the metadata by Phi3MiniModel.set_gguf_parameters and the longrope tensors and attention
    factor by Phi3MiniModel.generate_extra_tensors, both taken from convert_hf_to_gguf.py and run
    on the model's hyperparameters with a real gguf.GGUFWriter;
  - every tensor under the name gguf's TensorNameMap gives the Hugging Face name for
    MODEL_ARCH.PHI3, its rows as stored (the converter moves no rows of a Phi-3: qkv_proj becomes
    attn_qkv and gate_up_proj ffn_up whole); the fused tensors of layer 1 quantized to Q8_0;
  - the vocabulary, special ids and chat template of llama.cpp's ggml-vocab-phi-3.gguf (the real
    Phi-3-mini tokenizer as llama.cpp's converter wrote it).

Checks:
  1. a Phi-3 (sliding window 2047 as mini-4k's, which covers every window here): transformers'
     GGUF loader reads the file as Phi3ForCausalLM; `zerotrain import FILE.gguf` gives a phi3
     model whose every tensor equals the loader's (split at transformers' points, then rounded
     once to bf16) and whose `eval` loss equals the loader's model's within the bound of
     test_hf_families.py;
  2. a longrope Phi-3 (Phi-3.5-mini's scaling, original length 32, F32 tensors): the import of
     the GGUF file is the import of the same model saved by transformers' save_pretrained (every
     tensor, the config's longrope factors, lengths and window, and `eval`'s loss bit for bit),
     which oracle_hf_phi3_longrope checks against transformers; and `eval`'s loss equals
     transformers' Phi3ForCausalLM's within the bound;
  3. the longrope file with another attn_factor, or with a phi3.rope.scaling.type, is refused
     naming the key;
  4. `export --format gguf` of each import writes every phi3.* key the converter wrote with its
     value, the same tensor names, and the longrope factor tensors; as F32 it imports back bit for
     bit (config and tensors), and as Q8_0 the fused attn_qkv's bytes are gguf.quants.quantize of
     the import's q, k and v rows joined.
  5. (--partial-rotary, under transformers 4.49) check 2 and check 4 for Phi-4-mini's shape:
     partial_rotary_factor 0.75, which the converter writes as phi3.rope.dimension_count 12 of
     16 with 6 longrope factors, and which the import reads back as the factor.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fp32_model_bound,  # noqa: E402
                            fresh_work_dir, last_json_line, refused, require_venv_modules,
                            run_tool)

gguf, h5py, np, torch, transformers = require_venv_modules(
    "gguf", "h5py", "numpy", "torch", "transformers")
from gguf_reference import (class_methods, model_dir_tensors, read_gguf,  # noqa: E402
                            transformers_gguf_model)
from test_hf_families import hf_loss  # noqa: E402

SHAPE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
             initializer_range=0.1, rope_theta=10000.0, pad_token_id=32000, bos_token_id=1,
             eos_token_id=32000)
# Phi-4-mini's: one factor per rotated pair (partial_rotary_factor 0.75: 12 of 16 elements).
LONGROPE_PARTIAL = {"type": "longrope", "short_factor": [1.0, 1.3, 2.1, 3.7, 5.3, 8.9],
                    "long_factor": [20.0, 21.0, 22.0, 23.0, 24.0, 25.0]}
LONGROPE = {"type": "longrope",
            "short_factor": [1.0, 1.08, 2.02, 3.3, 4.1, 6.07, 8.3, 10.1],
            "long_factor": [20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0]}
SEQ_LEN, MICRO_BATCH, BATCHES = 32, 2, 2


def converter_methods(converter):
    """Phi3MiniModel's set_gguf_parameters and generate_extra_tensors, their source taken from
    convert_hf_to_gguf.py (the module itself imports packages Debian's torch lacks)."""
    try:
        return tuple(class_methods(converter, "Phi3MiniModel",
                                   ("set_gguf_parameters", "generate_extra_tensors"),
                                   {"math": math, "torch": torch, "gguf": gguf}))
    except AssertionError as e:
        check(False, f"{e} (the methods this test runs)")


def copy_vocabulary(writer, vocab_file):
    """The tokenizer metadata of llama.cpp's ggml-vocab-phi-3.gguf, as it stands."""
    source = read_gguf(vocab_file)
    fields = source.fields

    def value(key):
        return fields[key].contents()
    check(value("general.architecture") == "phi3", f"{vocab_file} is not a phi3 vocabulary")
    for method, key in (("tokenizer_model", "model"), ("tokenizer_pre", "pre"),
                        ("token_list", "tokens"), ("token_scores", "scores"),
                        ("token_types", "token_type"), ("bos_token_id", "bos_token_id"),
                        ("eos_token_id", "eos_token_id"), ("unk_token_id", "unknown_token_id"),
                        ("pad_token_id", "padding_token_id"), ("add_bos_token", "add_bos_token"),
                        ("add_eos_token", "add_eos_token")):
        getattr(writer, "add_" + method)(value("tokenizer.ggml." + key))
    writer.add_chat_template(value("tokenizer.chat_template"))
    return len(value("tokenizer.ggml.tokens"))


def write_phi3_gguf(path, model, hparams, methods, vocab_file, attn_factor=None, quantize=True,
                    rope_scaling_type=None):
    """The model as llama.cpp's converter writes it (module docstring). attn_factor replaces the
    converter's value (a file whose factor disagrees with its lengths); quantize=False keeps every
    tensor F32 (the bf16 values exactly); rope_scaling_type adds a phi3.rope.scaling.type, which
    llama.cpp's phi3 does not have."""
    set_parameters, extra_tensors = methods
    writer = gguf.GGUFWriter(path, "phi3")
    writer.add_name("tiny phi3")

    class Converter:  # what the two methods read of the converter's ModelBase
        def __init__(self):
            self.hparams, self.gguf_writer, self.ftype = hparams, writer, 0

        def find_hparam(self, keys, optional=False):
            return next((hparams[k] for k in keys if k in hparams), None)

        def format_tensor_name(self, kind):
            return gguf.TENSOR_NAMES[kind] + ".weight"

    converter = Converter()
    set_parameters(converter)
    extra = list(extra_tensors(converter))
    if attn_factor is not None:
        key = "phi3.rope.scaling.attn_factor"
        check(key in writer.kv_data[0], f"the converter wrote no {key}")
        writer.kv_data[0][key].value = attn_factor
    if rope_scaling_type is not None:
        writer.add_string("phi3.rope.scaling.type", rope_scaling_type)
    copy_vocabulary(writer, vocab_file)
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.PHI3, hparams["num_hidden_layers"])
    for hf_name, value in model.state_dict().items():
        data = value.float().numpy()
        name = names.get_name(hf_name, try_suffixes=(".weight",))
        check(name is not None, f"gguf maps no phi3 tensor to {hf_name}")
        if quantize and name.startswith("blk.1.") and name.endswith(("attn_qkv.weight",
                                                                     "ffn_up.weight")):
            writer.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, data)
    for name, tensor in extra:
        writer.add_tensor(name, tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def random_phi3(vocab_size, **extra):
    """A transformers Phi3ForCausalLM with std-0.1 weights, rounded to bf16, in fp32 eval mode."""
    config = transformers.Phi3Config(vocab_size=vocab_size, **SHAPE, **extra)
    model = transformers.Phi3ForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return config, model.eval()


def split_like_transformers(tensors, config):
    """The loader's fused tensors as zerotrain's separate ones (test_hf_families.split_fused)."""
    from test_hf_families import split_fused
    return split_fused(tensors, config)


def phi3_metadata(reader):
    """The file's phi3.* keys and their values (floats as fp32, as GGUF stores them)."""
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("phi3."):
            value = field.contents()
            out[key] = float(np.float32(value)) if isinstance(value, float) else value
    return out


def check_export(zt, work, source_gguf, imported, tag):
    """Check 4 for one import of `source_gguf` (written by the converter's code)."""
    exported = work(f"{tag}-export.gguf")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "f32", "--out", exported])
    source, ours = read_gguf(source_gguf), read_gguf(exported)
    want, got = phi3_metadata(source), phi3_metadata(ours)
    missing = {k: v for k, v in want.items() if got.get(k) != v}
    check(not missing, f"{tag}: the export's phi3 keys differ from the converter's: "
          f"{ {k: (v, got.get(k)) for k, v in missing.items()} }")
    check(sorted(t.name for t in ours.tensors) == sorted(t.name for t in source.tensors),
          f"{tag}: the export's tensor names differ from the converter's")
    for t in source.tensors:
        if t.name.startswith("rope_factors"):
            mine = next(o for o in ours.tensors if o.name == t.name)
            check(np.array_equal(np.asarray(mine.data), np.asarray(t.data)),
                  f"{tag}: tensor {t.name} differs from the converter's")
    back = work(f"{tag}-reimported")
    run_tool([zt, "import", exported, "--out", back])
    a, b = model_dir_tensors(imported), model_dir_tensors(back)
    check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
          f"{tag}: the F32 export does not import back bit for bit")
    configs = [json.load(open(os.path.join(d, "config.json"))) for d in (imported, back)]
    check(configs[0] == configs[1], f"{tag}: the re-import's config.json differs: {configs}")
    quantized = work(f"{tag}-export-q8.gguf")
    run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "q8_0", "--out",
              quantized])
    qkv = next(t for t in read_gguf(quantized).tensors if t.name == "blk.0.attn_qkv.weight")
    rows = np.concatenate([a[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv"])
    expected = gguf.quants.quantize(rows.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    check(np.array_equal(np.asarray(qkv.data).reshape(-1).view(np.uint8),
                         expected.reshape(-1).view(np.uint8)),
          f"{tag}: the Q8_0 export's blk.0.attn_qkv.weight is not gguf's quantization of q, k, v")
    print(f"{tag}: the GGUF export writes the converter's phi3 keys and tensor names, and "
          "imports back bit for bit", flush=True)


def zt_eval(zt, model_dir, data):
    out = run_tool([zt, "eval", "--model", model_dir, "--data", data, "--batches", str(BATCHES),
                    "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN),
                    "--precision", "fp32"])
    return last_json_line(out)["loss"]


def compare_losses(what, zt_value, reference, layers, vocab_size):
    bound = fp32_model_bound(max(SHAPE["hidden_size"], SHAPE["intermediate_size"], vocab_size),
                             layers, reference)
    diff = abs(zt_value - reference)
    print(f"{what}: zerotrain {zt_value:.9f} transformers {reference:.9f} |diff| {diff:.3e} "
          f"bound {bound:.3e}", flush=True)
    check(diff <= bound, f"{what}: |{zt_value} - {reference}| = {diff} > {bound}")


def longrope_import(zt, work, methods, vocab_file, data, tokens, tag, rope_scaling, source_dir,
                    **extra):
    """Check 2 for one longrope model (extra: partial_rotary_factor for Phi-4-mini's shape) on the
    tokens of `data` (None: the source's sample text, tokenized by the GGUF import): returns its
    config and transformers model."""
    vocab_size = len(read_gguf(vocab_file).fields["tokenizer.ggml.tokens"].contents())
    config, model = random_phi3(vocab_size, sliding_window=None, rope_scaling=rope_scaling,
                                original_max_position_embeddings=SEQ_LEN, **extra)
    longrope = work(tag, "phi3.gguf")
    os.makedirs(os.path.dirname(longrope))
    write_phi3_gguf(longrope, model, config.to_dict(), methods, vocab_file, quantize=False)
    imported = work(tag + "-imported")
    run_tool([zt, "import", longrope, "--out", imported])
    if data is None:  # tokenized by the import's tokenizer (the vocabulary of the file)
        data = work(tag + "-data.h5")
        run_tool([zt, "prepare-data", "--tokenizer", imported, "--text",
                  os.path.join(source_dir, "inputs/data/sample.txt"), "--out", data])
        with h5py.File(data, "r") as f:
            tokens = f["/tokens"][:]
    hf_dir, from_hf = work(tag + "-hf"), work(tag + "-hf-imported")
    model.save_pretrained(hf_dir, safe_serialization=True)
    run_tool([zt, "import", hf_dir, "--out", from_hf])
    a, b = model_dir_tensors(imported), model_dir_tensors(from_hf)
    check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
          f"{tag}: the GGUF import's tensors differ from the safetensors import's")
    configs = [json.load(open(os.path.join(d, "config.json"))) for d in (imported, from_hf)]
    # GGUF stores the factors in fp32, as transformers and zerotrain compute with them.
    for c in configs:
        for key in ("short_factor", "long_factor"):
            c["rope_scaling"][key] = np.float32(c["rope_scaling"][key]).tolist()
    for key in ("rope_scaling", "original_max_position_embeddings", "sliding_window",
                "max_position_embeddings", "pad_token_id", "model_type", "partial_rotary_factor"):
        check(configs[0].get(key) == configs[1].get(key),
              f"{tag}: config.json '{key}': the GGUF import's {configs[0].get(key)} differs "
              f"from the safetensors import's {configs[1].get(key)}")
    gguf_loss, hf_import_loss = zt_eval(zt, imported, data), zt_eval(zt, from_hf, data)
    check(gguf_loss == hf_import_loss,
          f"{tag}: eval: the GGUF import's loss {gguf_loss} is not the safetensors import's "
          f"{hf_import_loss}")
    print(f"the {tag} GGUF import is the safetensors import: tensors, config, loss", flush=True)
    windows = list(range(MICRO_BATCH * BATCHES))
    compare_losses(f"phi3 {tag} GGUF loss", gguf_loss, hf_loss(model, tokens, windows, SEQ_LEN),
                   SHAPE["num_hidden_layers"], vocab_size)
    check_export(zt, work, longrope, imported, tag)
    return config, model


def main():
    p = argument_parser(__doc__.split("\n")[0])
    p.add_argument("--converter", required=True, help="llama.cpp's convert_hf_to_gguf.py")
    p.add_argument("--vocab", required=True, help="llama.cpp's ggml-vocab-phi-3.gguf")
    p.add_argument("--partial-rotary", action="store_true",
                   help="check 5 alone (transformers 4.49, whose Phi3 applies the factor)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    work = fresh_work_dir(args.work_dir)
    zt = args.zerotrain
    methods = converter_methods(args.converter)
    vocab_size = len(read_gguf(args.vocab).fields["tokenizer.ggml.tokens"].contents())
    layers = SHAPE["num_hidden_layers"]

    def partial_rotary_checks():
        # 5. Phi-4-mini's shape: check 2 with RoPE on 12 of each head's 16 elements.
        version = tuple(int(x) for x in transformers.__version__.split(".")[:2])
        check(version >= (4, 49), f"transformers {transformers.__version__}: the partial "
              "rotation needs 4.49 (.venv/transformers-4.49 first on PYTHONPATH)")
        longrope_import(zt, work, methods, args.vocab, None, None, "partial-rotary",
                        LONGROPE_PARTIAL, args.source_dir, partial_rotary_factor=0.75)
        metadata = phi3_metadata(read_gguf(work("partial-rotary", "phi3.gguf")))
        check(metadata["phi3.rope.dimension_count"] == 12,
              f"the converter wrote phi3.rope.dimension_count "
              f"{metadata['phi3.rope.dimension_count']}, not 12")

    if args.partial_rotary:
        return exit_status(partial_rotary_checks)

    def checks():
        # 1. A Phi-3-mini-4k-like model through transformers' GGUF loader.
        config, model = random_phi3(vocab_size, sliding_window=2047)
        hparams = {**config.to_dict(), "sliding_window": 2047}
        plain = work("plain", "phi3.gguf")
        os.makedirs(os.path.dirname(plain))
        write_phi3_gguf(plain, model, hparams, methods, args.vocab)
        imported = work("plain-imported")
        run_tool([zt, "import", plain, "--out", imported])
        data = work("data.h5")
        run_tool([zt, "prepare-data", "--tokenizer", imported, "--text",
                  os.path.join(args.source_dir, "inputs/data/sample.txt"), "--out", data])
        with h5py.File(data, "r") as f:
            tokens = f["/tokens"][:]
        loader = transformers_gguf_model(plain)
        check(type(loader).__name__ == "Phi3ForCausalLM",
              f"transformers' GGUF loader reads the file as {type(loader).__name__}")
        want = split_like_transformers(
            {k: v.detach() for k, v in loader.state_dict().items()
             if not k.endswith("rotary_emb.inv_freq")}, loader.config)
        got = model_dir_tensors(imported)
        check(sorted(got) == sorted(want),
              f"the import's tensors {sorted(set(got) ^ set(want))} differ from the loader's")
        for name, value in want.items():
            check(np.array_equal(got[name], value.numpy()), f"tensor {name} differs")
        print(f"the import's {len(got)} tensors equal transformers' GGUF loader's", flush=True)
        windows = list(range(MICRO_BATCH * BATCHES))
        compare_losses("phi3 GGUF loss", zt_eval(zt, imported, data),
                       hf_loss(loader, tokens, windows, SEQ_LEN), layers, vocab_size)
        check_export(zt, work, plain, imported, "plain")

        # 2. Longrope (Phi-3.5-mini's scaling) against transformers' Phi3ForCausalLM itself.
        config, model = longrope_import(zt, work, methods, args.vocab, data, tokens, "longrope",
                                        LONGROPE, args.source_dir)

        # 3. An attention factor the lengths do not give is refused by name.
        wrong = work("wrong", "phi3.gguf")
        os.makedirs(os.path.dirname(wrong))
        write_phi3_gguf(wrong, model, config.to_dict(), methods, args.vocab, attn_factor=1.0)
        out = work("wrong-imported")
        refused([zt, "import", wrong, "--out", out], "metadata 'phi3.rope.scaling.attn_factor'")
        check(not os.path.exists(out), "a refused import left its output")
        write_phi3_gguf(wrong, model, config.to_dict(), methods, args.vocab,
                        rope_scaling_type="linear")
        refused([zt, "import", wrong, "--out", out],
                "metadata 'phi3.rope.scaling.type' in a phi3 file")
        check(not os.path.exists(out), "a refused import left its output")
        shutil.rmtree(work("wrong"))

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
