#!/usr/bin/env python3
"""LoRA on Gemma 3 against Hugging Face PEFT itself (label oracle).

A small random Gemma 3 text model (gemma3_reference.py: transformers 4.46.3's Gemma2ForCausalLM
changed as 4.50's Gemma3ForCausalLM computes it; q/k norms, the window of 6 keys on every layer
but each second, two RoPE bases; norm weights drawn around 0), saved as Gemma 3's checkpoint and
imported. Gemma 3 normalizes each head of q_proj's and k_proj's whole output, so an adapter on
them adds its product before that norm, as PEFT's LoRA layer (which wraps the projection, the
norm applied to the wrapper's output) does. The reference is PEFT 0.13.2's
get_peft_model(model, LoraConfig(target_modules="all-linear")) in float64 on the same weights,
lora_A set to zerotrain's initial A, lora_B zero, trained with torch.optim.AdamW, as in
test_lora.py (whose constants this uses: r 4, alpha 8, STEPS steps on 2 windows).
1. --lora-targets all-linear adapts Gemma 3's seven projections, PEFT's modules (its q/k norms
   are no Linear: neither adapts them).
2. 1 rank stage 0 (2 micro-batches) and 2 ranks stage 3: each step's loss and gradient norm, each
   step's gradient and Adam moments of every lora_A and lora_B, and the final adapters equal
   PEFT's within test_lora.py's fp32 bound (1e-4 relative).
3. PeftModel.from_pretrained(base, OUT/final) loads the adapter; its loss is zerotrain's
   end-of-run evaluation's.
--mutation norm-before-adapter: the reference normalizes q and k before the adapters add their
products (the norm hooked on the wrapped projection): the comparison must then fail.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import exit_status, lora_oracle_arguments  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402
import torch  # noqa: E402
from gemma3_reference import (hook_qk_norms, load_gemma3, save_tensors,  # noqa: E402
                              write_gemma3_config)

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32, query_pre_attn_scalar=12,
              attn_logit_softcapping=None, final_logit_softcapping=None, sliding_window=6,
              rope_theta=1000000.0, rope_scaling=None, sliding_window_pattern=2,
              rope_local_base_freq=100.0)


def gemma3_config():
    from transformers import Gemma2Config
    return Gemma2Config(**CONFIG)


def base_model(hf_dir, norm_hooks):
    """The saved Gemma 3 in float64 (its bf16 weights exactly), without a cache; the q/k norms
    applied by hook_qk_norms once PEFT has wrapped the projections (norm_hooks False)."""
    model = load_gemma3(gemma3_config(), hf_dir, torch.float64, norm_hooks).eval()
    model.config.use_cache = False
    return model


def save_base(hf_dir):
    from gemma3_reference import build_gemma3
    torch.manual_seed(1234)
    config = gemma3_config()
    # Gemma's norm weights start at 0, where leaving one out is invisible.
    model = gemma2.randomize_norms(build_gemma3(config), 0.0)
    save_tensors(model.to(torch.bfloat16), config, hf_dir)
    write_gemma3_config(config, hf_dir)


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], ["norm-before-adapter"])
    # The norms on the wrapped projections; the mutation leaves them on the base projections.
    mutated = args.mutation == "norm-before-adapter"
    return exit_status(
        lambda: gemma2.check_all_linear_against_peft(
            args, work, "Gemma 3", save_base, lambda hf_dir: base_model(hf_dir, mutated),
            wrapped=lambda model: None if mutated else hook_qk_norms(model)),
        args.mutation if args.expect_mismatch else None, "vs PEFT")


if __name__ == "__main__":
    sys.exit(main())
