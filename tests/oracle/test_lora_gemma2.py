#!/usr/bin/env python3
"""LoRA on Gemma 2 against Hugging Face PEFT itself (label oracle).

A small random Gemma2ForCausalLM (transformers 4.46.3: sandwich norms, query_pre_attn_scalar 12
≠ head_dim 16, caps 2 and 3 that bend these scores and logits, tied embeddings; norm weights
drawn around 0) saved by save_pretrained and imported. Gemma 2's o_proj and down_proj outputs
pass through their own norms before the residual add, so an adapter on them adds its product
before that norm, as PEFT's LoRA layer (which wraps the projection) does. The reference is PEFT
0.13.2's get_peft_model(Gemma2ForCausalLM, LoraConfig(target_modules="all-linear")) in float64
on the same weights (no cache: Gemma 2's HybridCache needs torch._dynamo), lora_A set to
zerotrain's initial A, lora_B zero, trained with torch.optim.AdamW, as in test_lora.py (whose
constants this uses: r 4, alpha 8, STEPS steps on 2 windows).
1. --lora-targets all-linear adapts Gemma 2's seven projections, PEFT's modules.
2. 1 rank stage 0 (2 micro-batches) and 2 ranks stage 3: each step's loss and gradient norm, each
   step's gradient and Adam moments of every lora_A and lora_B, and the final adapters equal
   PEFT's within test_lora.py's fp32 bound (1e-4 relative).
3. PeftModel.from_pretrained(base, OUT/final) loads the adapter; its loss is zerotrain's
   end-of-run evaluation's.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import check, exit_status, lora_oracle_arguments, run_tool  # noqa: E402
import test_lora as lora  # noqa: E402
import test_lora_phi3 as phi3  # noqa: E402
import torch  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32, query_pre_attn_scalar=12,
              attn_logit_softcapping=2.0, final_logit_softcapping=3.0, sliding_window=64)


def load_float64(model_class, hf_dir):
    """The saved model in float64 (its bf16 weights exactly), without a cache."""
    model = model_class.from_pretrained(hf_dir, torch_dtype=torch.float64).eval()
    model.config.use_cache = False
    return model


def save_random(hf_dir, config_class, model_class, config, norm_mean):
    """A random model_class(config_class(**config)), its norm weights drawn as norm_mean +
    N(0, 0.1²) (where they start, leaving one out would be invisible), saved in bf16."""
    torch.manual_seed(1234)
    model = randomize_norms(model_class(config_class(**config)), norm_mean)
    model.to(torch.bfloat16).save_pretrained(hf_dir, safe_serialization=True)


def randomize_norms(model, norm_mean):
    """model with its norm weights drawn as norm_mean + N(0, 0.1²)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(norm_mean, 0.1)
    return model


def base_model(hf_dir):
    from transformers import Gemma2ForCausalLM
    return load_float64(Gemma2ForCausalLM, hf_dir)


def save_base(hf_dir):
    from transformers import Gemma2Config, Gemma2ForCausalLM
    save_random(hf_dir, Gemma2Config, Gemma2ForCausalLM, CONFIG, 0.0)  # Gemma's norms start at 0


def check_all_linear_against_peft(args, work, family, save, base, wrapped=lambda model: None,
                                  targets=lora.TARGETS):
    """Checks 1-3 above for a family: save(hf_dir) writes the base checkpoint, base(hf_dir) loads
    it in float64 for PEFT, wrapped(model) runs on each PEFT model once it wraps the projections;
    all-linear adapts `targets` (the family's projections as PEFT names its modules)."""
    zt = args.zerotrain
    save(work("hf"))
    tokens, eval_tokens, initial_a, written = phi3.imported_windows_and_initial_a(
        zt, work, args.source_dir)
    check(sorted(written) == sorted(targets),
          f"all-linear on {family} adapts {written}, PEFT {targets}")
    history = []
    model, trained = phi3.peft_model(work("hf"), initial_a, base=base(work("hf")))
    wrapped(model)
    want_losses, want_norms, want_final = phi3.train_peft(model, trained, tokens, history=history)
    print("PEFT losses: " + " ".join(f"{x:.7f}" for x in want_losses))
    for what, (out, world_args, launcher) in lora.world_runs(work, args.mpirun).items():
        run_tool(launcher + lora.train_args(zt, work, out, world_args, save_every=1,
                                            targets="all-linear"))
        phi3.compare_run(what, out, want_losses, want_norms, want_final)
        worst = lora.check_gradients_per_step(what, out, history)
        print(f"{what}: every step's A/B gradients, m and v within {worst:.2e} of PEFT's")
    from peft import PeftModel
    loaded = PeftModel.from_pretrained(base(work("hf")), work("one", "final"))
    wrapped(loaded)
    lora.check_loaded_loss("", loaded, eval_tokens, work("one"))


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], [])
    return exit_status(lambda: check_all_linear_against_peft(args, work, "Gemma 2", save_base,
                                                             base_model))


if __name__ == "__main__":
    sys.exit(main())
