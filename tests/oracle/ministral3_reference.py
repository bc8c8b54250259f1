"""Ministral 3 (transformers 5's Ministral3ForCausalLM, the text model of Mistral AI's
Ministral-3-3B, -8B and -14B) for test_hf_families.py: Mistral's model with yarn RoPE whose
queries are multiplied after RoPE by 1 + llama_4_scaling_beta · ln(1 + ⌊position / original⌋),
which is 1 below the original length, where the reference runs: transformers 4.46's Llama with
the same yarn (its attention_factor given, as mscale and mscale_all_dim of 1 make it). The
checkpoint's config.json is written as Ministral3Config writes it: the RoPE keys in
rope_parameters alone."""

import json
import math
import os

MINISTRAL3_BETA = 0.1


def write_ministral3_config(config, out_dir):
    """out_dir/config.json as transformers 5 writes a Ministral3Config: rope_parameters holding
    rope_theta, the yarn keys Mistral AI's files give (mscale and mscale_all_dim 1, so a factor
    of 1 on cos and sin) and llama_4_scaling_beta; no rope_theta or rope_scaling beside it."""
    scaling = config.rope_scaling
    saved = {k: getattr(config, k) for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps",
        "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id", "head_dim",
        "attention_dropout", "hidden_act", "initializer_range", "use_cache")}
    saved.update(
        model_type="ministral3", architectures=["Ministral3ForCausalLM"], sliding_window=None,
        dtype="bfloat16", transformers_version="5.0.0",
        rope_parameters={"rope_type": "yarn", "type": "yarn", "rope_theta": config.rope_theta,
                         "factor": scaling["factor"],
                         "original_max_position_embeddings":
                             scaling["original_max_position_embeddings"],
                         "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "llama_4_scaling_beta": MINISTRAL3_BETA})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(dict(sorted(saved.items())), f, indent=2)


def yarn_mscale(factor, mscale):
    """transformers' get_mscale (DeepSeek's yarn magnitude)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def as_transformers4(saved):
    """A Ministral 3 config.json (rope_parameters) as transformers 4.x spells the same rotation:
    rope_theta and rope_scaling, the factor on cos and sin given as attention_factor (from mscale
    and mscale_all_dim, or the key itself). Checks that llama_4_scaling_beta is the reference's."""
    r = dict(saved["rope_parameters"])
    if r.get("llama_4_scaling_beta") != MINISTRAL3_BETA:
        raise AssertionError(f"llama_4_scaling_beta is {r.get('llama_4_scaling_beta')}, the "
                             f"reference's {MINISTRAL3_BETA}")
    factor = r["factor"]
    attention = r.get("attention_factor")
    if attention is None and "mscale" in r and "mscale_all_dim" in r:
        attention = yarn_mscale(factor, r["mscale"]) / yarn_mscale(factor, r["mscale_all_dim"])
    scaling = {"rope_type": r.get("rope_type", r.get("type")), "factor": factor,
               "original_max_position_embeddings": r["original_max_position_embeddings"],
               "beta_fast": r.get("beta_fast", 32.0), "beta_slow": r.get("beta_slow", 1.0)}
    if attention is not None:
        scaling["attention_factor"] = attention
    legacy = {k: v for k, v in saved.items() if k != "rope_parameters"}
    legacy.update(rope_theta=r["rope_theta"], rope_scaling=scaling)
    return legacy


def check_length_refused(zt, model_dir, data, original):
    """eval of sequences one position past the original length, where transformers would scale
    the queries, is refused naming that length; at the length itself it runs."""
    import subprocess
    from oracle_harness import check, run_tool
    cmd = [zt, "eval", "--model", model_dir, "--data", data, "--batches", "1", "--micro-batch",
           "1", "--precision", "fp32", "--seq-len"]
    run_tool(cmd + [str(original)])
    proc = subprocess.run(cmd + [str(original + 1)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.rstrip())
    named = f"Ministral 3's original_max_position_embeddings, {original}"
    check(proc.returncode != 0 and named in proc.stdout,
          f"eval at {original + 1} positions was not refused naming {named!r}")
    print(f"ok   Ministral 3: eval at {original} positions runs, at {original + 1} it is refused "
          "naming the length past which transformers scales the queries")
