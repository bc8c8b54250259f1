"""GLM-4's model (Glm4ForCausalLM, transformers 4.51 and later) as a reference on transformers
4.49's GlmForCausalLM, for test_hf_families.py.

Those releases need a newer torch than Debian's 1.13. transformers 4.57's modeling_glm4.py is
its GLM model (the same attention, rotation and fused gate_up MLP) with one change, made here to
4.49's modules as 4.57 computes it: each layer normalizes the attention's output
(post_self_attn_layernorm) and the MLP's (post_mlp_layernorm), each an RMSNorm of GLM's own
arithmetic, before its residual add:
    h = h + post_self_attn_layernorm(attn(input_layernorm(h)))
    h = h + post_mlp_layernorm(mlp(post_attention_layernorm(h)))
The two norms are modules of the decoder layer under those names, applied by forward hooks on
its self_attn and mlp, so that the state dict names the tensors as a Glm4 checkpoint does. The
checkpoint is written as 4.57 writes a GLM-4 one (model_type "glm4", Glm4ForCausalLM)."""
import transformers

from olmo3_reference import write_config_457

# Glm4Config's keys beside the ones every config writes.
GLM4_KEYS = ("partial_rotary_factor", "head_dim")


def glm_config(**kwargs):
    """A GlmConfig (4.49) with its rope_scaling set after construction, as Glm4Config takes it;
    eager attention (torch 1.13 has no SDPA)."""
    scaling = kwargs.pop("rope_scaling", None)
    config = transformers.GlmConfig(**kwargs)
    config.rope_scaling = scaling
    config._attn_implementation = "eager"
    return config


def add_output_norms(layer, config):
    """GLM-4's norms on layer's attention output and MLP output."""
    from transformers.models.glm.modeling_glm import GlmRMSNorm
    layer.post_self_attn_layernorm = GlmRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    layer.post_mlp_layernorm = GlmRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    layer.self_attn.register_forward_hook(
        lambda mod, inp, out, n=layer.post_self_attn_layernorm: (n(out[0]),) + tuple(out[1:]))
    layer.mlp.register_forward_hook(lambda mod, inp, out, n=layer.post_mlp_layernorm: n(out))


def build_glm4(config):
    """GlmForCausalLM(config) made GLM-4's."""
    model = transformers.GlmForCausalLM(config)
    for layer in model.model.layers:
        add_output_norms(layer, config)
    return model


def write_glm4_config(config, out_dir):
    write_config_457(config, out_dir, "glm4", "Glm4ForCausalLM", GLM4_KEYS)
