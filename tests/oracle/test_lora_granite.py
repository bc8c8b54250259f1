#!/usr/bin/env python3
"""LoRA on Granite against Hugging Face PEFT itself (label oracle).

A small random GraniteForCausalLM (transformers 4.46.3: the embedding's output times 12, the
scores times 0.05, each branch's output times 0.22 before its residual add, the logits divided by
3; grouped heads, tied embeddings as Granite 3's; every norm weight drawn around 1) saved by
save_pretrained and imported. An adapter on o_proj or down_proj adds its product inside the
branch that residual_multiplier scales, as PEFT's LoRA layer (which wraps the projection) does.
The checks are test_lora_gemma2.py's (check_all_linear_against_peft), on this model: all-linear
adapts the seven projections PEFT adapts; at 1 rank stage 0 and 2 ranks stage 3 every step's
loss, gradient norm, A/B gradients and Adam moments and the final adapters equal PEFT 0.13.2's in
float64 (get_peft_model, lora_A set to zerotrain's initial A, lora_B zero, torch.optim.AdamW)
within test_lora.py's fp32 bound; PEFT loads the adapter with zerotrain's evaluation loss.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import exit_status, lora_oracle_arguments  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32, tie_word_embeddings=True,
              embedding_multiplier=12.0, attention_multiplier=0.05, residual_multiplier=0.22,
              logits_scaling=3.0)


def base_model(hf_dir):
    from transformers import GraniteForCausalLM
    return gemma2.load_float64(GraniteForCausalLM, hf_dir)


def save_base(hf_dir):
    from transformers import GraniteConfig, GraniteForCausalLM
    gemma2.save_random(hf_dir, GraniteConfig, GraniteForCausalLM, CONFIG, 1.0)


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], [])
    return exit_status(lambda: gemma2.check_all_linear_against_peft(args, work, "Granite",
                                                                    save_base, base_model))


if __name__ == "__main__":
    sys.exit(main())
