#!/usr/bin/env python3
"""LoRA on OLMo 2 against Hugging Face PEFT itself (label oracle).

A small random Olmo2ForCausalLM (transformers 4.49, which the test's environment puts first on
PYTHONPATH: 4.46 has no Olmo2; grouped heads, untied; every norm weight drawn around 1) saved by
save_pretrained and imported. OLMo 2 has no norm before its projections: q/k/v and gate/up read
the residual stream itself, so their adapters do too; q_proj's and k_proj's whole outputs,
adapter products included, pass through one norm each (as PEFT's LoRA layer wraps the projection
and Olmo2Attention normalizes the wrapper's output), and o_proj's and down_proj's through the
norms after them. The checks are test_lora_gemma2.py's (check_all_linear_against_peft), on
this model: all-linear adapts the seven projections PEFT adapts; at 1 rank stage 0 and 2 ranks
stage 3 every step's loss, gradient norm, A/B gradients and Adam moments and the final adapters
equal PEFT 0.13.2's in float64 (get_peft_model, lora_A set to zerotrain's initial A, lora_B zero,
torch.optim.AdamW) within test_lora.py's fp32 bound; PEFT loads the adapter with zerotrain's
evaluation loss.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import SetupError, exit_status, lora_oracle_arguments  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32, rope_theta=500000.0)


def olmo2_classes():
    import transformers
    if not hasattr(transformers, "Olmo2ForCausalLM"):
        raise SetupError(f"transformers {transformers.__version__} has no Olmo2: put "
                         ".venv/transformers-4.49 (./run.sh deps) first on PYTHONPATH")
    return transformers.Olmo2Config, transformers.Olmo2ForCausalLM


def base_model(hf_dir):
    return gemma2.load_float64(olmo2_classes()[1], hf_dir)


def save_base(hf_dir):
    gemma2.save_random(hf_dir, *olmo2_classes(), CONFIG, 1.0)


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], [])
    return exit_status(lambda: gemma2.check_all_linear_against_peft(args, work, "OLMo 2",
                                                                    save_base, base_model))


if __name__ == "__main__":
    sys.exit(main())
