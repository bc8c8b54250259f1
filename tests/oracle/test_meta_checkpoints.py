#!/usr/bin/env python3
"""Llama checkpoints in Meta's layout (params.json, consolidated.00.pth) imported as transformers'
convert_llama_weights_to_hf.py converts them (CTest label "oracle", in the project venv).

1. For Llama 2 (vocab_size -1, rope.freqs stored, no n_kv_heads), Llama 3.1 (grouped-query
   attention, ffn_dim_multiplier, use_scaled_rope) and Llama 3.2 (its head stored and tied):
   torch.save of Meta's state dict (random bf16 values), converted by transformers'
   write_model at that --llama_version, and the same directory imported by
   `zerotrain import META_DIR --llama-version V`: every tensor of the model directory is bitwise
   the import of the converter's output (q and k rows in rotate-half order), and the model's
   config (context length, llama3 RoPE scaling, tied head) is the same, and import.json's record
   of it is the converter's config.json; Llama 1, 3, Guard-3 and Code Llama (16384 positions)
   likewise, and a Llama 3.2 whose stored head differs from its embedding (tied, and said). The
   same for torchtune's
   tiny_fair_checkpoint.pt (tests/data/torch_checkpoints/SOURCES.md), the state dict of Meta's
   Llama 2 Transformer as torch 2 saved it; and for Llama 2 and 3.1 in two model-parallel
   shards (consolidated.00.pth and .01.pth, sliced as Meta's parallel layers slice them; the
   embedding by columns in Llama 2, by rows in Llama 3), which the converter joins.
   --tokenizer copies a Hugging Face tokenizer.json beside it.
2. Refused, naming the file, the key or the tensor, leaving no output: no --llama-version, a
   version that contradicts use_scaled_rope, --llama-version for a Hugging Face directory, a
   second shard holding whole matrices, a matrix cut otherwise than Meta's layers cut it, norms
   whose copies differ, a NaN in the second shard (named), 4 shards of 2 key/value heads, a gap
   in the shards' numbers, a tensor missing or left
   over, a shape params.json does not give, quantization_args, a NaN (named where the file holds
   it), an n_layers other than the file's, use_scaled_rope as a string, vocab_size -1 without an
   embedding, params.json without consolidated.00.pth; an unknown key is a warning
   (--strict-config refuses it).

--mutation unpermuted: the reference keeps Meta's q rows as stored, so the q_proj check must fail
(with --expect-mismatch, only it).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""
import json
import os
import shutil
import subprocess
import sys
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, exit_status, mutation_oracle_arguments, refused,  # noqa: E402
                            run_tool)

torch = None
VOCAB = 256
CASES = {
    "2": dict(dim=64, n_layers=2, n_heads=4, multiple_of=32, norm_eps=1e-05, vocab_size=-1),
    "3.1": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, multiple_of=48,
                ffn_dim_multiplier=1.3, norm_eps=1e-05, rope_theta=500000.0, use_scaled_rope=True),
    "3.2": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, multiple_of=32,
                ffn_dim_multiplier=1.5, norm_eps=1e-05, rope_theta=500000.0, use_scaled_rope=True,
                max_seq_len=4096),
}
# The other versions' rules, on Llama 2's shapes: Llama 1's context, Llama 3's unscaled RoPE,
# Guard-3's scaling, and Code Llama's 16384 positions (a Llama 2 with a larger rope_theta).
MORE_CASES = {
    "1": ("1", dict(CASES["2"], norm_eps=1e-06)),
    "3": ("3", dict(CASES["3.1"], use_scaled_rope=False)),
    "Guard-3": ("Guard-3", CASES["3.1"]),
    "codellama": ("2", dict(CASES["2"], rope_theta=1000000.0)),
}


def meta_state_dict(params, version, seed):
    """Meta's Transformer state dict for params (random bf16 values)."""
    from transformers.models.llama.convert_llama_weights_to_hf import compute_intermediate_size
    torch.manual_seed(seed)
    dim, heads = params["dim"], params["n_heads"]
    kv_dim = dim // heads * params.get("n_kv_heads", heads)
    hidden = compute_intermediate_size(dim, params.get("ffn_dim_multiplier", 1),
                                       params.get("multiple_of", 256))

    def rand(*shape):
        return (torch.randn(*shape) * 0.1).to(torch.bfloat16)
    sd = {"tok_embeddings.weight": rand(VOCAB, dim), "norm.weight": rand(dim) + 1,
          "output.weight": rand(VOCAB, dim)}
    for i in range(params["n_layers"]):
        p = f"layers.{i}."
        sd.update({p + "attention.wq.weight": rand(dim, dim), p + "attention.wk.weight":
                   rand(kv_dim, dim), p + "attention.wv.weight": rand(kv_dim, dim),
                   p + "attention.wo.weight": rand(dim, dim),
                   p + "feed_forward.w1.weight": rand(hidden, dim),
                   p + "feed_forward.w2.weight": rand(dim, hidden),
                   p + "feed_forward.w3.weight": rand(hidden, dim),
                   p + "attention_norm.weight": rand(dim) + 1,
                   p + "ffn_norm.weight": rand(dim) + 1})
    if version == "2":  # Llama 2's files keep RoPE's frequencies
        head_dim = dim // heads
        sd["rope.freqs"] = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    if version == "3.2":  # stored, and tied by the converter
        sd["output.weight"] = sd["tok_embeddings.weight"].clone()
    return sd


def write_meta_dir(target, params, sd):
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    with open(os.path.join(target, "params.json"), "w") as f:
        json.dump(params, f)
    torch.save(sd, os.path.join(target, "consolidated.00.pth"))
    return target


def model_dir_bits(model_dir):
    """Every tensor of a zerotrain model directory, its bf16 values widened to float32."""
    from llama_reference import load_weights
    return load_weights(model_dir, torch.float32)


def config_of(zt, model_dir):
    return json.loads(run_tool([zt, "info", model_dir, "--json"]))["config"]


def compare_with_converter(zt, work, tag, meta, version, vocab, mutation, sd, shards=1):
    """`import META --llama-version V` against the import of transformers' write_model output:
    the same bits and config. Returns what the import printed as read past."""
    from transformers.models.llama.convert_llama_weights_to_hf import write_model
    write_model(work(f"hf_{tag}"), meta, safe_serialization=True, llama_version=version,
                vocab_size=vocab, num_shards=shards)
    run_tool([zt, "import", work(f"hf_{tag}"), "--out", work(f"from_hf_{tag}")])
    out = run_tool([zt, "import", meta, "--llama-version", version, "--out",
                    work(f"from_meta_{tag}")])
    want, got = model_dir_bits(work(f"from_hf_{tag}")), model_dir_bits(work(f"from_meta_{tag}"))
    if mutation == "unpermuted":
        want["model.layers.0.self_attn.q_proj.weight"] = sd["layers.0.attention.wq.weight"].float()
    check(set(got) == set(want), f"{tag}: tensors {sorted(set(got) ^ set(want))}")
    for name in sorted(want):
        check(torch.equal(got[name], want[name]), f"{tag}: {name} is not the converter's")
    config, reference = config_of(zt, work(f"from_meta_{tag}")), config_of(zt,
                                                                           work(f"from_hf_{tag}"))
    check(config == reference, f"{tag}: config {config} is not the converter's {reference}")
    with open(work(f"from_meta_{tag}", "import.json")) as f:
        recorded = json.load(f)["hf_config"]
    with open(work(f"hf_{tag}", "config.json")) as f:
        written = json.load(f)
    check(all(written.get(k) == v for k, v in recorded.items()),
          f"{tag}: import.json's hf_config differs from the converter's config.json at "
          f"{[k for k, v in recorded.items() if written.get(k) != v]}")
    what = ("Llama " + tag if tag in CASES or tag in MORE_CASES else
            f"Llama {tag[3:]} in 2 model-parallel shards" if tag.startswith("mp_") else tag)
    print(f"ok   {what}: {len(got)} tensors bitwise the converter's, the same config "
          f"(max_position_embeddings {config['max_position_embeddings']}, rope_scaling "
          f"{config.get('rope_scaling')}, tied {config['tie_word_embeddings']}); "
          f"{[line.strip() for line in out.splitlines() if 'ignored' in line]}")
    return out


def check_version(zt, work, version, mutation, tag=None, params=None):
    tag, params = tag or version, params or CASES[version]
    sd = meta_state_dict(params, version, seed=len(tag))
    meta = write_meta_dir(work(f"meta_{tag}"), params, sd)
    compare_with_converter(zt, work, tag, meta, version, VOCAB, mutation, sd)
    return sd


def model_parallel_shards(sd, n, version):
    """Meta's model-parallel slices of sd: ColumnParallelLinear by rows, RowParallelLinear by
    columns, the embedding by columns in Llama 1 and 2 (ParallelEmbedding) and by rows in Llama 3
    (VocabParallelEmbedding), the norms and rope.freqs copied."""
    by_columns = ("attention.wo.weight", "feed_forward.w2.weight")
    shards = [{} for _ in range(n)]
    for name, t in sd.items():
        if t.dim() == 1:
            parts = [t.clone() for _ in range(n)]
        else:
            columns = name.endswith(by_columns) or (name == "tok_embeddings.weight"
                                                     and version in ("1", "2"))
            parts = [p.clone() for p in t.chunk(n, dim=1 if columns else 0)]
        for shard, part in zip(shards, parts):
            shard[name] = part
    return shards


def check_model_parallel(zt, work, version, mutation):
    """Two shards; vocab_size -1 (the embedding's rows tell it, times the shards where they split
    its rows)."""
    params = dict(CASES[version], vocab_size=-1)
    sd = meta_state_dict(params, version, seed=7)
    meta = write_meta_dir(work(f"meta_mp_{version}"), params, {})
    os.remove(os.path.join(meta, "consolidated.00.pth"))
    for i, shard in enumerate(model_parallel_shards(sd, 2, version)):
        torch.save(shard, os.path.join(meta, f"consolidated.0{i}.pth"))
    compare_with_converter(zt, work, f"mp_{version}", meta, version, VOCAB, mutation, sd, 2)


def check_torchtune_file(zt, work, source_dir):
    """torchtune's tiny_fair_checkpoint.pt: Meta's Llama 2 Transformer as torch 2 saved it, with
    the params.json of the constructor arguments torchtune's tests give."""
    from test_torch_real_files import check_sources
    data = os.path.join(source_dir, "tests", "data", "torch_checkpoints")
    check_sources(data)
    params = dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=4, vocab_size=500, multiple_of=256,
                  norm_eps=1e-05)
    meta = work("meta_torchtune")
    os.makedirs(meta)
    with open(os.path.join(meta, "params.json"), "w") as f:
        json.dump(params, f)
    shutil.copyfile(os.path.join(data, "torchtune", "tiny_fair_checkpoint.pt"),
                    os.path.join(meta, "consolidated.00.pth"))
    compare_with_converter(zt, work, "torchtune's tiny_fair_checkpoint.pt", meta, "2", 500, None,
                           None)


def check_tied_head_that_differs(zt, work):
    """A Llama 3.2 whose stored output.weight is not its embedding: tied as the converter ties it,
    the difference said."""
    params = CASES["3.2"]
    sd = meta_state_dict(params, "3.2", seed=11)
    sd["output.weight"] = sd["output.weight"] + 1
    meta = write_meta_dir(work("meta_untied_3.2"), params, sd)
    out = compare_with_converter(zt, work, "untied_3.2", meta, "3.2", VOCAB, None, sd)
    check("output.weight (tie_word_embeddings: differs from the embedding at element 0" in out,
          "the import did not say that the stored head differs from the embedding")


def check_tokenizer(zt, work):
    from tokenizers import Tokenizer, models
    tokens = {f"t{i}": i for i in range(VOCAB)}
    os.makedirs(work("tokenizer"))
    Tokenizer(models.WordLevel(vocab=tokens, unk_token="t0")).save(work("tokenizer",
                                                                        "tokenizer.json"))
    run_tool([zt, "import", work("meta_3.1"), "--llama-version", "3.1", "--tokenizer",
              work("tokenizer"), "--out", work("with_tokenizer")])
    with open(work("tokenizer", "tokenizer.json")) as a, \
            open(work("with_tokenizer", "tokenizer.json")) as b:
        check(json.load(a) == json.load(b), "--tokenizer: tokenizer.json was not copied")
    print("ok   --tokenizer copies a Hugging Face tokenizer.json beside the model")

def meta_variant(work, sd, name, change_params=None, change_sd=None, extra_file=None):
    """Llama 3.1's Meta directory as work/bad_NAME, its params and tensors changed; with
    extra_file, consolidated.00.pth copied under that name beside it."""
    p = dict(CASES["3.1"])
    s = dict(sd)
    if change_params:
        change_params(p)
    if change_sd:
        change_sd(s)
    target = write_meta_dir(work("bad_" + name), p, s)
    if extra_file:
        shutil.copyfile(os.path.join(work("meta_3.1"), "consolidated.00.pth"),
                        os.path.join(target, extra_file))
    return target


def meta_shards(work, sd, name, n, change=None):
    """Llama 3.1's Meta directory cut into n model-parallel shards, `change(shards)` applied."""
    target = write_meta_dir(work("bad_" + name), CASES["3.1"], {})
    os.remove(os.path.join(target, "consolidated.00.pth"))
    shards = model_parallel_shards(sd, n, "3.1")
    if change:
        change(shards)
    for i, shard in enumerate(shards):
        torch.save(shard, os.path.join(target, f"consolidated.0{i}.pth"))
    return target


def refuses_import(zt, work, meta, says, extra=()):
    out = work("refused_out")
    refused([zt, "import", meta, "--out", out] + list(extra), says)
    check(not os.path.exists(out), f"a refused import left {out}")


def check_option_refusals(zt, work):
    """--llama-version missing, contradicting use_scaled_rope, unknown, or given a Hugging Face
    directory; info of a Meta directory."""
    base = work("meta_3.1")
    refuses = partial(refuses_import, zt, work)
    refuses(base, "say which Llama it is with --llama-version")
    refused([zt, "info", base], "is a Llama checkpoint in Meta's layout: `info " +
            os.path.join(base, "consolidated.00.pth") + "` lists its tensors")
    refuses(base, "use_scaled_rope is true, which Llama 3.1, 3.2 and Guard-3 have; "
            "--llama-version is 3", ["--llama-version", "3"])
    refuses(base, "--llama-version must be 1, 2, 3, 3.1, 3.2 or Guard-3, got '3.3'",
            ["--llama-version", "3.3"])
    refuses(work("hf_3.1"), "--llama-version applies to a Meta checkpoint",
            ["--llama-version", "3.1"])


def check_shard_refusals(zt, work, sd):
    """Model-parallel shards that do not fit: a whole matrix in a shard, one cut the other way,
    norm copies that differ, a NaN in the second shard, shards that do not divide, a gap."""
    variant, sharded = partial(meta_variant, work, sd), partial(meta_shards, work, sd)
    refuses = partial(refuses_import, zt, work)
    v = ["--llama-version", "3.1"]
    whole = variant("whole", extra_file="consolidated.01.pth")
    refuses(whole, os.path.join(whole, "consolidated.00.pth") + "': tensor 'tok_embeddings.weight' "
            "has shape [256,64], params.json (as transformers' converter reads it, its rows cut "
            "among the model-parallel shards as Meta's layers cut them) gives [128,64]", v)

    def wo_by_rows(shards):
        whole = sd["layers.0.attention.wo.weight"]
        for shard, part in zip(shards, whole.chunk(2, dim=0)):
            shard["layers.0.attention.wo.weight"] = part.clone()
    rows = sharded("wo_rows", 2, wo_by_rows)
    refuses(rows, os.path.join(rows, "consolidated.00.pth") + "': tensor "
            "'layers.0.attention.wo.weight' has shape [32,64], params.json (as transformers' "
            "converter reads it, its columns cut", v)

    def other_norm(shards):
        shards[1]["norm.weight"] = shards[1]["norm.weight"] + 1
    norms = sharded("norms", 2, other_norm)
    refuses(norms, os.path.join(norms, "consolidated.01.pth") + "': tensor 'norm.weight' is not "
            "the copy consolidated.00.pth holds", v)

    def nan_in_second(shards):
        shards[1]["layers.1.feed_forward.w1.weight"][2, 7] = float("nan")
    second = sharded("nan_second", 2, nan_in_second)
    refuses(second, os.path.join(second, "consolidated.01.pth") + "': tensor "
            "'layers.1.feed_forward.w1.weight' holds a value that is not finite in bf16, at "
            "[122, 7] of the whole tensor", v)
    refuses(sharded("four", 4), "holds 4 model-parallel shards, which do not divide", v)
    gap = variant("gap", extra_file="consolidated.02.pth")
    refuses(gap, os.path.join(gap, "consolidated.02.pth") + "' is not consolidated.01.pth", v)


def check_tensor_refusals(zt, work, sd):
    """Tensors and params.json keys that do not fit: a tensor missing, extra, of another shape or
    not finite; quantization, n_layers, use_scaled_rope as a string, vocab_size -1 without an
    embedding, no weights file, an unknown key (a warning, refused under --strict-config)."""
    variant, refuses = partial(meta_variant, work, sd), partial(refuses_import, zt, work)
    v = ["--llama-version", "3.1"]
    refuses(variant("missing", change_sd=lambda s: s.pop("layers.1.feed_forward.w3.weight")),
            "has no tensor 'layers.1.feed_forward.w3.weight'", v)
    refuses(variant("extra", change_sd=lambda s: s.update(extra=torch.zeros(2))),
            "has tensor 'extra', which the model of params.json does not have", v)
    refuses(variant("shape", change_params=lambda p: p.update(multiple_of=32)),
            "tensor 'layers.0.feed_forward.w1.weight' has shape [240,64], params.json (as "
            "transformers' converter reads it) gives [224,64]", v)
    refuses(variant("quantized", change_params=lambda p: p.update(
        quantization_args={"scheme": "int4_weight_int8_dynamic_activation"})),
        "key 'quantization_args'", v)

    def nan(s):
        s["layers.1.attention.wk.weight"] = s["layers.1.attention.wk.weight"].clone()
        s["layers.1.attention.wk.weight"][3, 5] = float("nan")
    refuses(variant("nan", change_sd=nan), "tensor 'layers.1.attention.wk.weight' holds a value "
            "that is not finite in bf16, at [3, 5] of the whole tensor", v)
    refuses(variant("layers", change_params=lambda p: p.update(n_layers=10 ** 9)),
            "n_layers is 1000000000, but '" + work("bad_layers", "consolidated.00.pth") +
            "' holds 2 (distinct layers.N. names)", v)
    refuses(variant("scaled_string", change_params=lambda p: p.update(use_scaled_rope="true")),
            "key 'use_scaled_rope' must be true or false, got \"true\"", v)
    refuses(variant("no_embedding", change_params=lambda p: p.update(vocab_size=-1),
                    change_sd=lambda s: s.pop("tok_embeddings.weight")),
            "has no tok_embeddings.weight to tell the vocabulary size", v)
    no_weights = variant("no_weights")
    os.remove(os.path.join(no_weights, "consolidated.00.pth"))
    refuses(no_weights, "has Meta's params.json but no consolidated.00.pth", v)
    unknown = variant("unknown", change_params=lambda p: p.update(new_setting=1))
    refuses(unknown, "key 'new_setting' is not one zerotrain reads or knows",
            v + ["--strict-config"])
    proc = subprocess.run([zt, "import", unknown, "--out", work("unknown_out")] + v,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(proc.returncode == 0 and "warning: params.json key 'new_setting'" in proc.stdout,
          f"an unknown params.json key: exit {proc.returncode}, {proc.stdout}")
    print("ok   bad Meta directories are refused naming the file, key or tensor; an unknown key "
          "is a warning")


def check_refusals(zt, work, sd):
    check_option_refusals(zt, work)
    check_shard_refusals(zt, work, sd)
    check_tensor_refusals(zt, work, sd)


def main():
    global torch
    args, work, torch = mutation_oracle_arguments(__doc__.split("\n")[0], ["unpermuted"],
                                                  "transformers", "h5py", "tokenizers")

    def checks():
        check_version(args.zerotrain, work, "2", args.mutation)
        sd = check_version(args.zerotrain, work, "3.1", args.mutation)
        check_version(args.zerotrain, work, "3.2", args.mutation)
        for tag, (version, params) in MORE_CASES.items():
            check_version(args.zerotrain, work, version, args.mutation, tag, params)
        check_torchtune_file(args.zerotrain, work, args.source_dir)
        check_model_parallel(args.zerotrain, work, "2", args.mutation)
        check_model_parallel(args.zerotrain, work, "3.1", args.mutation)
        check_tied_head_that_differs(args.zerotrain, work)
        check_tokenizer(args.zerotrain, work)
        check_refusals(args.zerotrain, work, sd)

    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       "q_proj.weight is not the converter's")


if __name__ == "__main__":
    sys.exit(main())
