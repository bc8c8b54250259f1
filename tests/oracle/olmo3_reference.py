"""OLMo 3's model (Olmo3ForCausalLM, transformers 4.57) as a reference on transformers 4.49's
Olmo2ForCausalLM, for test_hf_families.py.

transformers 4.57, the first release with OLMo 3, needs torch 2.2 or later; Debian's is 1.13.
4.57's modeling_olmo3.py is its Olmo2 model with two changes, each made here to 4.49's modules
as 4.57 computes it:
  - a layer whose layer_types entry is "sliding_attention" (Olmo3Config's default: all but every
    fourth) also masks the keys j <= i - sliding_window (create_sliding_window_causal_mask keeps
    kv_idx > q_idx - sliding_window);
  - those layers rotate with Olmo3RotaryEmbedding(config, rope_type="default"): rope_theta, no
    scaling, cos and sin unscaled. The full-attention layers take the config's rope_scaling.
4.49's yarn takes its band from max_position_embeddings where 4.57 takes it from
original_max_position_embeddings: the families here set the two equal. The checkpoint is
written as 4.57 writes an OLMo 3 one (model_type "olmo3", layer_types, sliding_window)."""
import copy
import json
import os

import torch
import transformers

# The keys of the reference's config.json that OLMo 3 adds to OLMo 2's.
OLMO3_KEYS = ("sliding_window", "layer_types")


def olmo3_config(**kwargs):
    """An Olmo2Config carrying OLMo 3's keys. Its rope_scaling is set after construction: 4.49's
    Olmo2Config accepts linear and dynamic alone, where Olmo3Config takes yarn. layer_types
    defaults as Olmo3Config's does."""
    scaling = kwargs.pop("rope_scaling", None)
    window = kwargs.pop("sliding_window", 4096)
    types = kwargs.pop("layer_types", None)
    config = transformers.Olmo2Config(**kwargs)
    config.rope_scaling = scaling
    config.sliding_window = window
    config.layer_types = types or [
        "sliding_attention" if (i + 1) % 4 else "full_attention"
        for i in range(config.num_hidden_layers)]
    config.head_dim = config.hidden_size // config.num_attention_heads  # Olmo2Attention's
    config._attn_implementation = "eager"  # every mask materialized (torch 1.13 has no SDPA)
    return config


def slide(attn, rotary, window):
    """Makes attention module attn one of a sliding layer: its keys masked beyond the window and
    the rotation of `rotary` (unscaled) in place of the model's."""
    forward = attn.forward

    def windowed(hidden_states, position_embeddings, attention_mask, *args, **kwargs):
        positions = kwargs["cache_position"]
        position_embeddings = rotary(hidden_states, kwargs["position_ids"])
        keys = torch.arange(attention_mask.shape[-1])
        outside = keys[None, :] <= positions[:, None] - window
        attention_mask = attention_mask.masked_fill(outside, torch.finfo(attention_mask.dtype).min)
        return forward(hidden_states, position_embeddings, attention_mask, *args, **kwargs)
    attn.forward = windowed


def build_olmo3(config):
    """Olmo2ForCausalLM(config) made OLMo 3's (config: olmo3_config's)."""
    # (transformers 4.49: the module is absent from 4.46, which the other families run on)
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RotaryEmbedding
    model = transformers.Olmo2ForCausalLM(config)
    unscaled = copy.deepcopy(config)
    unscaled.rope_scaling = None
    rotary = Olmo2RotaryEmbedding(config=unscaled)
    for layer, kind in zip(model.model.layers, config.layer_types):
        if kind == "sliding_attention":
            slide(layer.self_attn, rotary, config.sliding_window)
    return model


def write_config_457(config, out_dir, model_type, architecture, family_keys):
    """out_dir/config.json as transformers 4.57 writes the config class of `model_type`: the
    keys every such class has, with `family_keys` of its own, sorted, its dtype and version."""
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
            "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "pad_token_id",
            "bos_token_id", "eos_token_id", "attention_bias", "attention_dropout", "hidden_act",
            "initializer_range", "use_cache") + family_keys
    saved = {k: getattr(config, k) for k in keys}
    saved.update(model_type=model_type, architectures=[architecture], dtype="bfloat16",
                 transformers_version="4.57.1")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(dict(sorted(saved.items())), f, indent=2)


def write_olmo3_config(config, out_dir):
    write_config_457(config, out_dir, "olmo3", "Olmo3ForCausalLM", OLMO3_KEYS)


def load_olmo3(config, hf_dir, dtype):
    """The reference with every tensor of hf_dir's model.safetensors loaded (strictly), in dtype,
    without a cache."""
    from gemma3_reference import load_tensors
    model = load_tensors(build_olmo3(config), config, hf_dir, dtype).eval()
    model.config.use_cache = False
    return model
