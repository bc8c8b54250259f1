"""The reference models of test_hf_families.py: each family built by transformers (Qwen3's and
SmolLM3's on its Llama, with q/k norms or layers without RoPE added; Gemma 3, OLMo 3, GLM 4 from
their own reference modules), saved as the family's checkpoint and read back in fp32."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import check, require_venv_modules  # noqa: E402

torch, transformers = require_venv_modules("torch", "transformers")
from gemma3_reference import (GEMMA3_KEYS, build_gemma3, save_tensors,  # noqa: E402
                              write_gemma3_config)
from olmo3_reference import OLMO3_KEYS, build_olmo3, write_olmo3_config  # noqa: E402
from glm4_reference import GLM4_KEYS, build_glm4, write_glm4_config  # noqa: E402
from ministral3_reference import as_transformers4, write_ministral3_config  # noqa: E402
from hf_families_table import (FAMILIES, GLM4, MINISTRAL3, MODEL_TYPES, OLMO3,  # noqa: E402
                               QWEN3_KEYS, REFERENCE_OVERRIDES, SMOLLM3_NO_ROPE_LAYERS,
                               WRITTEN_AS)


class HeadRMSNorm(torch.nn.Module):
    """Qwen3RMSNorm over each head's hd values: weight · (x · rsqrt(mean(x²) + eps))."""

    def __init__(self, head_dim, eps):
        super().__init__()
        self.head_dim, self.eps = head_dim, eps
        self.weight = torch.nn.Parameter(torch.ones(head_dim))

    def forward(self, x):
        heads = x.view(*x.shape[:-1], -1, self.head_dim)
        normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * normed).view(x.shape)


def add_qk_norms(model, config):
    """Qwen3's attention on transformers' Llama: q_norm/k_norm modules (named as Qwen3 names its
    tensors) applied to q_proj's and k_proj's outputs by forward hooks."""
    for layer in model.model.layers:
        attn = layer.self_attn
        attn.q_norm = HeadRMSNorm(config.head_dim, config.rms_norm_eps)
        attn.k_norm = HeadRMSNorm(config.head_dim, config.rms_norm_eps)
        attn.q_proj.register_forward_hook(lambda mod, inp, out, n=attn.q_norm: n(out))
        attn.k_proj.register_forward_hook(lambda mod, inp, out, n=attn.k_norm: n(out))
    return model


def drop_rope(model, no_rope_layers):
    """SmolLM3's NoPE layers on transformers' Llama: each layer whose no_rope_layers entry is 0
    gets the identity rotation (cos 1, sin 0) in place of the model's, which is what
    SmolLM3Attention computes when it skips apply_rotary_pos_emb (q·1 + rotate_half(q)·0 = q)."""
    for layer, rotates in zip(model.model.layers, no_rope_layers):
        if rotates:
            continue
        attn = layer.self_attn
        forward = attn.forward

        def unrotated(*args, forward=forward, **kwargs):
            cos, sin = kwargs["position_embeddings"]
            kwargs["position_embeddings"] = (torch.ones_like(cos), torch.zeros_like(sin))
            return forward(*args, **kwargs)
        attn.forward = unrotated
    return model


def randomize_small_tensors(model):
    """Biases ~ N(0, 0.1²), q/k norm weights (OLMo 2's and Granite's every norm weight)
    ~ 1 + N(0, 0.1²) and Gemma's norm weights ~ N(0, 0.1²): transformers starts them at 0, 1 and 0, where leaving one out would change
    nothing."""
    gemma = model.config.model_type in ("gemma", "gemma2")
    # OLMo 2's, Granite's and GLM's other norms too (~ 1 + N(0, 0.1²)): at 1, a norm weight left
    # out would change neither the loss nor any gradient.
    every_norm = model.config.model_type in ("olmo2", "granite", "glm")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias") or (gemma and name.endswith("norm.weight")):
                param.normal_(0.0, 0.1)
            elif name.endswith("q_norm.weight") or name.endswith("k_norm.weight") or (
                    every_norm and name.endswith("norm.weight")):
                param.normal_(1.0, 0.1)


def build_reference(family, config):
    if family.startswith("gemma3"):
        return build_gemma3(config)
    if family in OLMO3:
        return build_olmo3(config)
    if family in GLM4:
        return build_glm4(config)
    model = getattr(transformers, FAMILIES[family][1])(config)
    if family.startswith("smollm3"):
        return drop_rope(model, SMOLLM3_NO_ROPE_LAYERS)
    return add_qk_norms(model, config) if family.startswith("qwen3") else model


def save_written_as(family, model, config, out_dir):
    """A Qwen3, SmolLM3 or Gemma 3 checkpoint (config.json as Qwen3Config, SmolLM3Config or
    Gemma3TextConfig writes it, one safetensors file)."""
    save_tensors(model, config, out_dir)
    if family.startswith("gemma3"):
        write_gemma3_config(config, out_dir)
        return
    if family in OLMO3:
        write_olmo3_config(config, out_dir)
        return
    if family in GLM4 | MINISTRAL3:
        (write_glm4_config if family in GLM4 else write_ministral3_config)(config, out_dir)
        return
    saved = {k: v for k, v in config.to_dict().items()
             if k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                      "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings",
                      "head_dim", "hidden_act", "attention_dropout", "initializer_range")}
    if family.startswith("qwen3"):
        saved.update(QWEN3_KEYS, model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                     torch_dtype="bfloat16")
    else:  # SmolLM3's own keys, with a tie its config would default to anyway
        saved.update(model_type="smollm3", architectures=["SmolLM3ForCausalLM"],
                     no_rope_layers=SMOLLM3_NO_ROPE_LAYERS, no_rope_layer_interval=4,
                     use_sliding_window=False, sliding_window=None, attention_bias=False,
                     mlp_bias=False, pad_token_id=config.pad_token_id, torch_dtype="bfloat16")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(saved, f, indent=2)


def check_same_rotation(hf_dir, saved, config):
    """The directory's config.json gives the reference's rotation: its rope_theta and
    rope_scaling give the inverse frequencies and the factor on cos and sin that transformers'
    own rope functions compute for the reference's config (an export's yarn, written with its
    band's ends, is compared by what it computes, not by its keys)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def rotation(c):
        scaling = c.rope_scaling or {}
        return ROPE_INIT_FUNCTIONS[scaling.get("rope_type", scaling.get("type", "default"))](
            c, "cpu")
    written = transformers.LlamaConfig(**{k: saved[k] for k in (
        "hidden_size", "num_attention_heads", "max_position_embeddings", "rope_theta", "head_dim",
        "partial_rotary_factor") if k in saved}, rope_scaling=saved.get("rope_scaling"))
    (want, want_factor), (got, got_factor) = rotation(config), rotation(written)
    # transformers 4.46 takes yarn's band from max_position_embeddings, not this key: compared
    # as it stands.
    original = "original_max_position_embeddings"
    check((saved.get("rope_scaling") or {}).get(original) ==
          (config.rope_scaling or {}).get(original),
          f"{hf_dir}/config.json: rope_scaling's {original} is not the reference's")
    check(torch.equal(want, got) and want_factor == got_factor,
          f"{hf_dir}/config.json: rope_theta {saved.get('rope_theta')} and rope_scaling "
          f"{saved.get('rope_scaling')} rotate otherwise than the reference's")


def load_reference(family, config, hf_dir):
    """The model of hf_dir in fp32: transformers' from_pretrained (with the family's
    REFERENCE_OVERRIDES), or for Qwen3 and SmolLM3 the reference above with every tensor of the
    directory's safetensors files loaded strictly."""
    if family not in WRITTEN_AS:
        return transformers.AutoModelForCausalLM.from_pretrained(
            hf_dir, torch_dtype=torch.float32, **REFERENCE_OVERRIDES.get(family, {}))
    import safetensors.torch
    with open(os.path.join(hf_dir, "config.json")) as f:
        saved = json.load(f)
    model_type = MODEL_TYPES.get(family, family)
    check(saved.get("model_type") == model_type,
          f"{hf_dir}/config.json is not a {model_type} config")
    if model_type == "ministral3":  # rope_parameters alone, read as 4.x's keys
        saved = as_transformers4(saved)
    # The reference is built from `config`: the directory's config.json must describe that model
    # (an export's too), key by key, with the keys whose defaults differ between families given.
    expected = {k: getattr(config, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
        "head_dim", "pad_token_id")}
    if family.startswith("smollm3"):
        expected["no_rope_layers"] = SMOLLM3_NO_ROPE_LAYERS
    if family in OLMO3:
        expected.update({k: getattr(config, k) for k in OLMO3_KEYS + ("attention_bias",)})
    if family in GLM4:
        expected.update({k: getattr(config, k) for k in GLM4_KEYS + ("attention_bias",)})
    check_same_rotation(hf_dir, saved, config)
    if family.startswith("gemma3"):
        expected.update({k: getattr(config, k) for k in GEMMA3_KEYS + (
            "query_pre_attn_scalar", "sliding_window", "attn_logit_softcapping",
            "final_logit_softcapping")})
        scaling = saved.get("rope_scaling") or {}
        got = (scaling.get("rope_type", scaling.get("type")), scaling.get("factor"))
        want = config.rope_scaling or {}
        check(got == ((want["rope_type"], want["factor"]) if want else (None, None)),
              f"{hf_dir}/config.json: 'rope_scaling' is {saved.get('rope_scaling')}, the "
              f"reference's {config.rope_scaling}")
    # Absent, head_dim is hidden_size / num_attention_heads and pad_token_id none (Qwen3's).
    absent = {"head_dim": config.hidden_size // config.num_attention_heads,
              "pad_token_id": None if family.startswith("qwen3") else "required"}
    for key, want in expected.items():
        got = saved.get(key, absent.get(key, "required"))
        check(got == want, f"{hf_dir}/config.json: '{key}' is {got}, the reference's {want}")
    model = build_reference(family, config)
    state = {}
    for name in sorted(os.listdir(hf_dir)):
        if name.endswith(".safetensors"):
            state.update(safetensors.torch.load_file(os.path.join(hf_dir, name)))
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    missing = set(model.state_dict()) - set(state) - {
        k for k in model.state_dict() if k.endswith("rotary_emb.inv_freq")}
    if config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    check(not missing and not set(state) - set(model.state_dict()),
          f"{hf_dir}: tensors differ from the reference's: missing {sorted(missing)}, "
          f"extra {sorted(set(state) - set(model.state_dict()))}")
    return model.float()
