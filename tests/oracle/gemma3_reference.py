"""Gemma 3's text model (Gemma3ForCausalLM, transformers 4.50) as a reference on transformers
4.46.3's Gemma2ForCausalLM, for test_hf_families.py.

transformers 4.50 and later, the releases with Gemma 3, do not import on Debian's torch 1.13
(their modeling_utils needs torch.distributed.tensor). Gemma 3's text model is Gemma 2's with
three changes, each made here to 4.46's modules as 4.50's modeling_gemma3.py computes it:
  - q_norm and k_norm (Gemma3RMSNorm over each head's head_dim values, in fp32, scaling by
    1 + weight) on the projections' outputs, before RoPE;
  - a layer slides when (layer_idx + 1) % sliding_window_pattern != 0 (Gemma 2: every even
    layer), with the same mask, keys j > i − sliding_window;
  - the sliding layers rotate with rope_local_base_freq, unscaled; the others with rope_theta
    and rope_scaling (linear: inv_freq / factor).
No soft caps (Gemma3TextConfig's defaults, None, which Gemma 2's eager attention skips). The
checkpoint is written as Gemma 3 names its tensors (self_attn.q_norm.weight, ...) with a
config.json as Gemma3TextConfig writes it."""
import json
import os

import torch
import transformers
from transformers.models.gemma2.modeling_gemma2 import Gemma2RotaryEmbedding

# The keys of the reference's config.json that Gemma 3 adds to Gemma 2's.
GEMMA3_KEYS = ("sliding_window_pattern", "rope_local_base_freq")


class GemmaHeadNorm(torch.nn.Module):
    """Gemma3RMSNorm over each head's head_dim values: x·rsqrt(mean(x²) + eps)·(1 + weight),
    computed in fp32 and returned in x's type."""

    def __init__(self, head_dim, eps):
        super().__init__()
        self.head_dim, self.eps = head_dim, eps
        self.weight = torch.nn.Parameter(torch.zeros(head_dim))

    def forward(self, x):
        heads = x.view(*x.shape[:-1], -1, self.head_dim).float()
        normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).view(x.shape).type_as(x)


def is_sliding(config, layer_idx):
    return bool((layer_idx + 1) % config.sliding_window_pattern)


def hook_qk_norms(model):
    """Applies each attention's q_norm and k_norm to the outputs of its q_proj and k_proj as they
    are now: after PEFT has wrapped a projection, to the wrapper's (base plus adapter), as Gemma 3
    normalizes the whole projection."""
    for module in model.modules():
        if hasattr(module, "q_norm") and hasattr(module, "q_proj"):
            module.q_proj.register_forward_hook(lambda mod, inp, out, n=module.q_norm: n(out))
            module.k_proj.register_forward_hook(lambda mod, inp, out, n=module.k_norm: n(out))


def build_gemma3(config, norm_hooks=True):
    """Gemma2ForCausalLM(config) made Gemma 3's: config is a Gemma2Config with Gemma 3's
    sliding_window_pattern and rope_local_base_freq set on it. norm_hooks False: the q/k norms
    are there but not applied until hook_qk_norms (after PEFT wraps the projections)."""
    model = transformers.Gemma2ForCausalLM(config)
    scaling = config.rope_scaling or {}
    for idx, layer in enumerate(model.model.layers):
        sliding = is_sliding(config, idx)
        layer.is_sliding = sliding  # the decoder layer's mask
        attn = layer.self_attn
        attn.sliding_window = config.sliding_window if sliding else None
        attn.rotary_emb = Gemma2RotaryEmbedding(
            config.head_dim, max_position_embeddings=config.max_position_embeddings,
            base=config.rope_local_base_freq if sliding else config.rope_theta)
        if not sliding and scaling.get("rope_type", scaling.get("type")) == "linear":
            attn.rotary_emb.inv_freq /= scaling["factor"]
        attn.q_norm = GemmaHeadNorm(config.head_dim, config.rms_norm_eps)
        attn.k_norm = GemmaHeadNorm(config.head_dim, config.rms_norm_eps)
    if norm_hooks:
        hook_qk_norms(model)
    return model


def save_tensors(model, config, out_dir):
    """The model's tensors as one model.safetensors (a tied head and the rotary buffers left
    out), as save_pretrained writes them."""
    import safetensors.torch
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()
               if not k.endswith("rotary_emb.inv_freq")
               and not (config.tie_word_embeddings and k == "lm_head.weight")}
    safetensors.torch.save_file(tensors, os.path.join(out_dir, "model.safetensors"),
                                metadata={"format": "pt"})


def load_gemma3(config, hf_dir, dtype, norm_hooks=True):
    """The reference with every tensor of hf_dir's model.safetensors loaded (strictly), in
    dtype."""
    return load_tensors(build_gemma3(config, norm_hooks), config, hf_dir, dtype)


def load_tensors(model, config, hf_dir, dtype):
    """model with every tensor of hf_dir's model.safetensors loaded (strictly: a tied head and
    the rotary buffers aside), in dtype."""
    import safetensors.torch
    state = safetensors.torch.load_file(os.path.join(hf_dir, "model.safetensors"))
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()},
                                                strict=False)
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")
               and not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"{hf_dir}: missing {missing}, unexpected {unexpected}")
    return model.to(dtype)


def gemma3_config_json(config):
    """config.json of the reference as Gemma3TextConfig (transformers 4.50) writes one."""
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "pad_token_id",
            "query_pre_attn_scalar", "sliding_window", "attn_logit_softcapping",
            "final_logit_softcapping", "attention_bias", "attention_dropout",
            "initializer_range") + GEMMA3_KEYS
    saved = {k: getattr(config, k) for k in keys}
    saved.update(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
                 hidden_activation="gelu_pytorch_tanh", cache_implementation="hybrid",
                 torch_dtype="bfloat16")
    return saved


def write_gemma3_config(config, out_dir):
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(gemma3_config_json(config), f, indent=2)
