#!/usr/bin/env python3
"""LoRA chosen by layer, with ranks and alphas by module, against Hugging Face PEFT (label oracle).

A small random LlamaForCausalLM of four layers (transformers 4.46.3, grouped heads, norm weights
drawn around 1) saved by save_pretrained and imported. Two adapter configs, each trained by
`train --lora-config FILE`:
- LAYERS: q, v, o, gate and down in layers 1 and 3 alone (layers_to_transform with
  layers_pattern), v_proj at r 2 and layer 3's down_proj at r 6 (rank_pattern), o_proj at alpha
  32 and gate_proj at 4 (alpha_pattern): layers 0 and 2 carry no adapter;
- PATTERN: a target_modules regular expression selecting q and k in layers 0 and 2 and up_proj in
  layer 3, with use_rslora and k_proj at r 8.
The reference is PEFT 0.13.2's get_peft_model(LlamaForCausalLM, LoraConfig(**file)) in float64
on the same weights, lora_A set to zerotrain's initial A, lora_B zero, trained with
torch.optim.AdamW, as in test_lora.py (whose constants this uses: r 4, alpha 8, STEPS steps on 2
windows). For each config:
1. zerotrain's adapters are PEFT's: the same modules, the same shapes;
2. at 1 rank stage 0 (2 micro-batches) and 2 ranks stage 3 (whose empty adapter groups shard
   nothing) each step's loss and gradient norm, each step's gradient and Adam moments of every
   lora_A and lora_B, and the final adapters equal PEFT's within test_lora.py's fp32 bound;
3. OUT/final/adapter_config.json carries the keys back: PeftModel.from_pretrained loads the
   adapter with the same modules and scales, and its loss is zerotrain's end-of-run evaluation;
4. export --merge-lora writes each adapted projection W + s·B·A, s the module's own scale, within
   the rounding both do of PEFT's merge_and_unload (merge_bounds), and every other
   tensor bitwise the base's.

--mutation alpha (PEFT without alpha_pattern) with --expect-mismatch: the comparison must fail.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import check, exit_status, lora_oracle_arguments, run_tool  # noqa: E402
import test_lora as lora  # noqa: E402
from lora_merge_reference import compare_merge, read_merged  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402
import test_lora_phi3 as phi3  # noqa: E402
import torch  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=32)
LAYERS = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
          "target_modules": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
          "layers_to_transform": [1, 3], "layers_pattern": "layers",
          "rank_pattern": {"v_proj": 2, "layers.3.mlp.down_proj": 6},
          "alpha_pattern": {"o_proj": 32, "gate_proj": 4}}
PATTERN = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
           "use_rslora": True,
           "target_modules": r"model\.layers\.[02]\.self_attn\.[qk]_proj|.*\.3\.mlp\.up_proj",
           "rank_pattern": {"k_proj": 8}, "alpha_pattern": {}}
WANT = {"LAYERS": {f"model.layers.{l}.{m}" for l in (1, 3) for m in
                   ("self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                    "mlp.down_proj")},
        "PATTERN": {f"model.layers.{l}.self_attn.{p}_proj" for l in (0, 2) for p in "qk"}
        | {"model.layers.3.mlp.up_proj"}}


def base_model(hf_dir):
    from transformers import LlamaForCausalLM
    return gemma2.load_float64(LlamaForCausalLM, hf_dir)


def adapted_modules(model):
    """{module path: (r, scale)} of a PEFT model's LoRA layers."""
    out = {}
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            path = name[len(lora.PREFIX):]
            out[path] = (module.r["default"], module.scaling["default"])
    return out


def peft_model(hf_dir, adapter, initial_a, mutation):
    """PEFT's LoraConfig(**adapter) on the base with zerotrain's initial A and B zero: (model,
    {name: parameter}); mutation "alpha" drops alpha_pattern."""
    from peft import LoraConfig, get_peft_model
    fields = dict(adapter, alpha_pattern={} if mutation == "alpha" else adapter["alpha_pattern"])
    fields.pop("peft_type")
    model = get_peft_model(base_model(hf_dir), LoraConfig(**fields))
    trained = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            short = name[len(lora.PREFIX):].replace(".default.", ".")
            check(short in initial_a or short.replace("lora_B", "lora_A") in initial_a,
                  f"PEFT trains {short}, which zerotrain has no adapter for")
            with torch.no_grad():
                p.copy_(initial_a[short] if ".lora_A." in short else torch.zeros_like(p))
            trained[short] = p
    check(len(trained) == 2 * len(initial_a), f"PEFT trains {len(trained)} tensors, zerotrain "
          f"{2 * len(initial_a)}")
    return model, trained


def check_merge(zt, work, out, want_model, adapted):
    """export --merge-lora against PEFT's merge_and_unload of the same adapter (want_model):
    adapted projections within the rounding both do (merge_bounds), every other tensor
    bitwise."""
    merged = out + "-merged"
    run_tool([zt, "export", work("model"), "--merge-lora", os.path.join(out, "final"),
              "--out", merged])
    c = compare_merge(read_merged(merged), want_model)
    check(not c.unmatched, f"the merged model's tensors are not PEFT's: {c.unmatched}")
    check(c.adapted == sorted(n + ".weight" for n in adapted),
          f"PEFT adapts {c.adapted}, zerotrain {sorted(adapted)}")
    check(c.worst <= 1, f"merge: a projection is {c.worst:.2f}x its rounding bound from PEFT's "
          "merge_and_unload")
    check(c.others == 0, "merge: a tensor without an adapter differs from the base")
    print(f"export --merge-lora: {len(adapted)} projections within {c.worst:.2f} of their "
          "rounding bound from PEFT's merge, the rest bitwise")


def check_config(zt, work, args, name, adapter, tokens, eval_tokens):
    path = work(f"{name}.json")
    with open(path, "w") as f:
        json.dump(adapter, f)
    run_tool(lora.train_args(zt, work, work(f"init-{name}"), ["--micro-batch", "2",
                                                              "--lora-config", path],
                             steps=1, lr=1e-30, targets=None))
    initial = lora.read_safetensors(work(f"init-{name}", "final", "adapter_model.safetensors"))
    initial_a = {n[len(lora.PREFIX):]: t.to(torch.float64) for n, t in initial.items()
                 if ".lora_A." in n}
    ours = {n[:-len(".lora_A.weight")] for n in initial_a}
    check(ours == WANT[name], f"{name}: zerotrain adapts {sorted(ours)}, expected "
          f"{sorted(WANT[name])}")
    history = []
    model, trained = peft_model(work("hf"), adapter, initial_a, args.mutation)
    check(set(adapted_modules(model)) == ours,
          f"{name}: PEFT adapts {sorted(adapted_modules(model))}")
    for n, p in trained.items():
        if ".lora_A." in n:
            check(tuple(p.shape) == tuple(initial_a[n].shape), f"{name}: {n} is {tuple(p.shape)} "
                  f"in PEFT, {tuple(initial_a[n].shape)} in zerotrain")
    want_losses, want_norms, want_final = phi3.train_peft(model, trained, tokens, history=history)
    print(f"{name}: {len(ours)} adapters; PEFT losses: " + " ".join(f"{x:.7f}"
                                                                    for x in want_losses))
    for what, (out, world_args, launcher) in lora.world_runs(work, args.mpirun).items():
        out = f"{out}-{name}"
        run_tool(launcher + lora.train_args(zt, work, out, world_args + ["--lora-config", path],
                                            save_every=1, targets=None))
        phi3.compare_run(f"{name} {what}", out, want_losses, want_norms, want_final)
        worst = lora.check_gradients_per_step(what, out, history)
        print(f"{name} {what}: every step's A/B gradients, m and v within {worst:.2e} of PEFT's")
        if args.mutation:
            return
    from peft import PeftModel
    loaded = PeftModel.from_pretrained(base_model(work("hf")), work(f"one-{name}", "final"))
    check(adapted_modules(loaded) == adapted_modules(model),
          f"{name}: PEFT reads OUT/final/adapter_config.json into other adapters: "
          f"{adapted_modules(loaded)}")
    lora.check_loaded_loss(f"{name}: ", loaded, eval_tokens, work(f"one-{name}"))
    check_merge(zt, work, work(f"one-{name}"), loaded, ours)


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], ["alpha"])

    def checks():
        from transformers import LlamaConfig, LlamaForCausalLM
        gemma2.save_random(work("hf"), LlamaConfig, LlamaForCausalLM, CONFIG, 1.0)
        tokens, eval_tokens, _, _ = phi3.imported_windows_and_initial_a(
            args.zerotrain, work, args.source_dir)
        for name, adapter in (("LAYERS", LAYERS), ("PATTERN", PATTERN)):
            check_config(args.zerotrain, work, args, name, adapter, tokens, eval_tokens)
            if args.mutation:
                return

    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       "vs PEFT")


if __name__ == "__main__":
    sys.exit(main())
