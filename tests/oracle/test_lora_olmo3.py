#!/usr/bin/env python3
"""LoRA on OLMo 3 against Hugging Face PEFT itself (label oracle).

A small random OLMo 3 (olmo3_reference.py: transformers 4.49's Olmo2ForCausalLM, which the test's
environment puts first on PYTHONPATH, changed as 4.57's Olmo3ForCausalLM computes; two layers,
the first with a window of 6 keys rotating unscaled, the second attending over every key with
yarn; grouped heads, untied; every norm weight drawn around 1), written as an OLMo 3 checkpoint
and imported. Its adapters are OLMo 2's: q/k/v and gate/up read the residual stream, q_proj's and
k_proj's whole outputs, adapter products included, pass through one norm each, and o_proj's and
down_proj's through the norms after them. The checks are test_lora_gemma2.py's
(check_all_linear_against_peft) on this model: all-linear adapts the seven projections PEFT
adapts; at 1 rank stage 0 and 2 ranks stage 3 every step's loss, gradient norm, A/B gradients and
Adam moments and the final adapters equal PEFT 0.13.2's in float64 within test_lora.py's fp32
bound; PEFT loads the adapter with zerotrain's evaluation loss.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import exit_status, lora_oracle_arguments  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402
import torch  # noqa: E402
from gemma3_reference import save_tensors  # noqa: E402
from olmo3_reference import build_olmo3, load_olmo3, olmo3_config, write_olmo3_config  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32, rope_theta=500000.0,
              sliding_window=6, layer_types=["sliding_attention", "full_attention"],
              rope_scaling={"rope_type": "yarn", "factor": 4.0,
                            "original_max_position_embeddings": 128,
                            "attention_factor": 1.2079441541679836})


def base_model(hf_dir):
    return load_olmo3(olmo3_config(**CONFIG), hf_dir, torch.float64)


def save_base(hf_dir):
    torch.manual_seed(1234)
    config = olmo3_config(**CONFIG)
    model = gemma2.randomize_norms(build_olmo3(config), 1.0)  # at 1, one left out is invisible
    save_tensors(model.to(torch.bfloat16), config, hf_dir)
    write_olmo3_config(config, hf_dir)


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], [])
    return exit_status(lambda: gemma2.check_all_linear_against_peft(args, work, "OLMo 3",
                                                                    save_base, base_model))


if __name__ == "__main__":
    sys.exit(main())
