#!/usr/bin/env python3
"""LoRA on GLM-4 against Hugging Face PEFT itself (label oracle).

A small random GLM-4 (glm4_reference.py: transformers 4.49's GlmForCausalLM, which the test's
environment puts first on PYTHONPATH, with GLM-4's norms on the attention's and the MLP's outputs
as 4.57's Glm4ForCausalLM computes; two layers, RoPE in adjacent pairs on half of each head, q/k/v
biases, grouped heads, untied; every norm weight drawn around 1), written as a GLM-4 checkpoint
and imported. GLM's checkpoint holds gate and up as one mlp.gate_up_proj and q, k, v apart, so
PEFT's all-linear adapts six modules: q_proj, k_proj, v_proj, o_proj, gate_up_proj (one A on the
shared input, one B whose rows are gate's then up's) and down_proj; zerotrain adapts the same.
The adapters' products on o_proj and down_proj pass through GLM-4's output norms. The checks are
test_lora_gemma2.py's (check_all_linear_against_peft) on this model: at 1 rank stage 0 and 2
ranks stage 3 every step's loss, gradient norm, A/B gradients and Adam moments and the final
adapters equal PEFT 0.13.2's in float64 within test_lora.py's fp32 bound; PEFT loads the adapter
with zerotrain's evaluation loss.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import exit_status, lora_oracle_arguments  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402
import torch  # noqa: E402
from gemma3_reference import load_tensors, save_tensors  # noqa: E402
from glm4_reference import build_glm4, glm_config, write_glm4_config  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32, head_dim=16,
              partial_rotary_factor=0.5, attention_bias=True)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"]


def base_model(hf_dir):
    config = glm_config(**CONFIG)
    return load_tensors(build_glm4(config), config, hf_dir, torch.float64).eval()


def save_base(hf_dir):
    torch.manual_seed(1234)
    config = glm_config(**CONFIG)
    model = gemma2.randomize_norms(build_glm4(config), 1.0)  # at 1, one left out is invisible
    with torch.no_grad():  # the biases too: at 0, one left out would be invisible
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.1)
    save_tensors(model.to(torch.bfloat16), config, hf_dir)
    write_glm4_config(config, hf_dir)


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], [])
    return exit_status(lambda: gemma2.check_all_linear_against_peft(
        args, work, "GLM-4", save_base, base_model, targets=TARGETS))


if __name__ == "__main__":
    sys.exit(main())
