#!/usr/bin/env python3
"""LoRA on Phi-3's fused projections against Hugging Face PEFT itself (label oracle).

A small random Phi3ForCausalLM (transformers 4.46.3; grouped-query heads, so that k and v lie at
offsets other than q's size in qkv_proj) saved by save_pretrained and imported. Phi-3's checkpoint
fuses q, k, v into qkv_proj and gate, up into gate_up_proj; PEFT adapts each fused module as one
(one lora_A on the shared input, one lora_B over the parts' rows). The reference is PEFT 0.13.2's
get_peft_model(Phi3ForCausalLM, LoraConfig(target_modules="all-linear")) in float64 on the same
weights, lora_A set to zerotrain's initial A, lora_B zero, trained with torch.optim.AdamW, as in
test_lora.py (whose helpers and constants this uses: r 4, alpha 8, STEPS steps on 2 windows).
1. --lora-targets all-linear adapts qkv_proj, o_proj, gate_up_proj and down_proj, PEFT's modules:
   the run's adapter_config.json names them, and final/ holds PEFT's tensor names and shapes.
2. 1 rank stage 0 (2 micro-batches) and 2 ranks stage 3: each step's loss and gradient norm, each
   step's gradient and Adam moments of every lora_A and lora_B, and the final adapters equal
   PEFT's within test_lora.py's fp32 bound (1e-4 relative).
3. PeftModel.from_pretrained(base, OUT/final) loads the adapter; its loss is zerotrain's
   end-of-run evaluation's. export --format peft of the 2-rank run's last checkpoint writes
   final/'s tensors bitwise, under PEFT's names.
4. export --merge-lora to a Hugging Face directory: its qkv_proj and gate_up_proj are PEFT's
   merge_and_unload (rounded to bf16) within the rounding both do (merge_bounds);
   transformers loads it. PEFT's own
   save_pretrained of its trained adapter: eval --adapter gives PEFT's loss, and a run that
   continues it (--lora-init-from) starts from PEFT's loss.
5. Dropout 0.25: one mask per fused module (PEFT drops the shared input once), as
   lora_dropout_mask.py writes docs/lora.md's description; losses and final adapters as PEFT's.
6. Target names: Llama's q_proj,v_proj (--lora-targets' default) are refused naming Phi-3's
   projections; PEFT's adapter_config.json of a Llama list (q_proj ... o_proj ... down_proj)
   adapts o_proj and down_proj alone, as PEFT does, with a warning.

--mutation parts (the reference's qkv_proj lora_B gives k's rows to v and v's to k) with
--expect-mismatch: the first run must then differ from the reference.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, exit_status, lora_oracle_arguments, refused,  # noqa: E402
                            run_tool, write_byte_windows)
from lora_dropout_mask import MaskedDropout  # noqa: E402
import test_lora as lora  # noqa: E402
from lora_merge_reference import compare_merge, read_merged  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

FUSED = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]  # PEFT's all-linear on Phi-3
# Each module's target index in docs/lora.md's dropout mask.
MASK_TARGET = {"qkv_proj": 7, "o_proj": 3, "gate_up_proj": 8, "down_proj": 6}
CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1, sliding_window=None, pad_token_id=32)
Q_ROWS, KV_ROWS = 64, 32  # qkv_proj's parts: q (4 heads of 16), k and v (2 heads each)


def base_model(hf_dir):
    """The saved Phi-3 in float64 (its bf16 weights exactly)."""
    from transformers import Phi3ForCausalLM
    return Phi3ForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float64).eval()


def swap_k_and_v(module, _inputs, output):
    """--mutation parts: lora_B's k rows feed v's outputs and v's feed k's."""
    q, k, v = output.split([Q_ROWS, KV_ROWS, KV_ROWS], dim=-1)
    return torch.cat([q, v, k], dim=-1)


def peft_model(hf_dir, initial_a, dropout=0.0, mutation=None, base=None):
    """PEFT's all-linear on the base (Phi-3's, or `base` given) with zerotrain's initial A and B
    zero: (model, {name: parameter})."""
    from peft import LoraConfig, get_peft_model
    config = LoraConfig(r=lora.RANK, lora_alpha=lora.ALPHA, lora_dropout=dropout,
                        target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(base if base is not None else base_model(hf_dir), config)
    trained = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            short = name[len(lora.PREFIX):].replace(".default.", ".")
            with torch.no_grad():
                p.copy_(initial_a[short] if ".lora_A." in short else torch.zeros_like(p))
            trained[short] = p
    check(set(trained) == set(initial_a) | {n.replace("lora_A", "lora_B") for n in initial_a},
          f"PEFT trains other tensors than zerotrain: {sorted(trained)[:4]}...")
    for name, module in model.named_modules():
        if mutation == "parts" and name.endswith("qkv_proj.lora_B.default"):
            module.register_forward_hook(swap_k_and_v)
    return model, trained


def train_peft(model, trained, tokens, eps=lora.EPS, history=None):
    """STEPS AdamW steps: (losses, gradient norms, final tensors)."""
    optimizer = torch.optim.AdamW(list(trained.values()), lr=lora.LR, betas=lora.BETAS, eps=eps,
                                  weight_decay=lora.WEIGHT_DECAY, foreach=False)
    losses, norms = lora.train_steps(model, trained, optimizer, tokens, history)
    return losses, norms, {n: p.detach().clone() for n, p in trained.items()}


def compare_run(what, out, want_losses, want_norms, want_final):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    check(len(metrics) == lora.STEPS, f"{what}: {len(metrics)} metrics lines")
    for key, want in (("loss", want_losses), ("grad_norm", want_norms)):
        got = [m[key] for m in metrics]
        print(f"{what} {key}: " + " ".join(f"{x:.7f}" for x in got))
        for step, (g, w) in enumerate(zip(got, want), start=1):
            err = abs(g - w) / abs(w)
            check(err < lora.TOLERANCE, f"{what}: step {step} {key} {g} vs PEFT {w} ({err:.2e})")
    final = lora.read_safetensors(os.path.join(out, "final", "adapter_model.safetensors"))
    names = {n[len(lora.PREFIX):] for n in final}
    check(names == set(want_final), f"{what}: final/ holds {sorted(names)[:3]}..., PEFT "
          f"{sorted(want_final)[:3]}...")
    for n, t in final.items():
        check(t.shape == want_final[n[len(lora.PREFIX):]].shape, f"{what}: {n} is {t.shape}")
    worst = max(lora.rel_error(t, want_final[n[len(lora.PREFIX):]]) for n, t in final.items())
    check(worst < lora.TOLERANCE, f"{what}: final adapters differ from PEFT's by {worst:.2e}")
    print(f"{what}: final adapters within {worst:.2e} of PEFT's")


def check_merge(zt, work, out, want_model):
    """export --merge-lora against PEFT's merge_and_unload of the same adapter (want_model): the
    adapted projections, the fused qkv_proj and gate_up_proj among them, within the rounding both
    do (lora_merge_reference.merge_bounds), every other tensor bitwise."""
    run_tool([zt, "export", work("model"), "--merge-lora", os.path.join(out, "final"),
              "--out", work("merged")])
    c = compare_merge(read_merged(work("merged")), want_model)
    check(not c.unmatched, f"the merged model's tensors are not PEFT's: {c.unmatched}")
    fused = [n for n in c.exact if "qkv_proj" in n or "gate_up_proj" in n]
    check(fused and set(fused) <= set(c.adapted), f"PEFT adapts {c.adapted}: not every fused one")
    check(c.worst <= 1, f"merge: a projection is {c.worst:.2f}x its rounding bound from PEFT's "
          "merge_and_unload")
    check(c.others == 0, "merge: a tensor without an adapter differs from the base")
    from transformers import Phi3ForCausalLM
    Phi3ForCausalLM.from_pretrained(work("merged"))  # transformers loads the merged model
    print(f"export --merge-lora: {len(c.adapted)} projections (qkv_proj and gate_up_proj among "
          f"them) within {c.worst:.2f} of their rounding bound from PEFT's merge, the rest bitwise")


def check_peft_saved(zt, work, model, tokens, eval_tokens):
    """PEFT's own save_pretrained of its trained Phi-3 adapter (F64 tensors): eval --adapter and
    --lora-init-from score it as PEFT does (its values rounded to fp32)."""
    from oracle_harness import last_json_line
    model.save_pretrained(work("peft_saved"))
    info = json.loads(run_tool([zt, "info", work("peft_saved"), "--json"]))
    check(info["target_modules"] == ",".join(FUSED),
          f"info of PEFT's Phi-3 adapter: target_modules {info['target_modules']}")
    S = lora.SEQ_LEN
    got = last_json_line(run_tool(
        [zt, "eval", "--model", work("model"), "--data", work("tok.h5"), "--batches", "1",
         "--micro-batch", str(eval_tokens.shape[0]), "--seq-len", str(S), "--adapter",
         work("peft_saved")]))["loss"]
    with torch.no_grad():
        want = lora.window_loss(model, eval_tokens).item()
        want_first = lora.window_loss(model, tokens).item()
    print(f"eval --adapter PEFT's directory: loss {got:.7f}, PEFT's {want:.7f}")
    check(abs(got - want) / abs(want) < lora.TOLERANCE,
          f"eval --adapter of PEFT's directory: loss {got} vs PEFT's {want}")
    run_tool(lora.train_args(zt, work, work("continued"),
                             ["--micro-batch", "2", "--lora-init-from", work("peft_saved")],
                             steps=1, targets=None))
    with open(work("continued", "metrics.jsonl")) as f:
        first = json.loads(f.readline())["loss"]
    print(f"--lora-init-from PEFT's directory: first loss {first:.7f}, PEFT's {want_first:.7f}")
    check(abs(first - want_first) / abs(want_first) < lora.TOLERANCE,
          f"--lora-init-from PEFT's directory: first loss {first} vs PEFT's {want_first}")


def check_dropout(zt, work, source_dir, initial_a):
    """Dropout 0.25 with docs/lora.md's mask given to PEFT's lora_dropout modules."""
    p, seed = 0.25, 1234
    data = write_byte_windows(work("tok1.h5"), os.path.join(source_dir, "inputs", "data",
                                                            "sample.txt"), 1, lora.SEQ_LEN)
    tokens = torch.from_numpy(data[:lora.SEQ_LEN + 1].astype(np.int64)).reshape(1, -1)
    run_tool(lora.train_args(zt, work, work("dropout"),
                             ["--micro-batch", "1", "--lora-dropout", str(p), "--seed", str(seed)],
                             data=work("tok1.h5"), eps=lora.DROPOUT_EPS, targets="all-linear"))
    model, trained = peft_model(work("hf"), initial_a, dropout=p)
    model.train()
    for name, module in model.named_modules():
        if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
            layer = int(name.split(".layers.")[1].split(".")[0])
            module.lora_dropout["default"] = MaskedDropout(
                layer, MASK_TARGET[name.rsplit(".", 1)[1]], p, seed)
    want, _, want_final = train_peft(model, trained, tokens, eps=lora.DROPOUT_EPS)
    with open(work("dropout", "metrics.jsonl")) as f:
        got = [json.loads(line)["loss"] for line in f]
    print("dropout 0.25, zerotrain: " + " ".join(f"{x:.7f}" for x in got))
    print("dropout 0.25, PEFT:      " + " ".join(f"{x:.7f}" for x in want))
    for step, (g, w) in enumerate(zip(got, want), start=1):
        check(abs(g - w) / abs(w) < lora.TOLERANCE, f"dropout: step {step} loss {g} vs PEFT {w}")
    final = lora.read_safetensors(work("dropout", "final", "adapter_model.safetensors"))
    worst = max(lora.rel_error(t, want_final[n[len(lora.PREFIX):]]) for n, t in final.items())
    check(worst < lora.TOLERANCE, f"dropout: final adapters differ from PEFT's by {worst:.2e}")
    print(f"dropout 0.25: losses and final adapters (within {worst:.2e}) as PEFT's")


def check_target_names(zt, work):
    """Llama's names on Phi-3: none found is refused, some found adapts those (PEFT's rule)."""
    refused(lora.train_args(zt, work, work("llama_names"), ["--micro-batch", "2"], steps=1,
                            targets="q_proj,v_proj"),
            "a phi3 model has no such projection (its projections: qkv_proj, o_proj, "
            "gate_up_proj, down_proj, all-linear)")
    llama_list = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    with open(work("llama_list.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": lora.RANK, "lora_alpha": lora.ALPHA,
                   "target_modules": llama_list}, f)
    from peft import LoraConfig, get_peft_model
    peft_names = {n.split(".")[-1] for n, m in get_peft_model(
        base_model(work("hf")), LoraConfig(r=lora.RANK, target_modules=llama_list)).named_modules()
        if hasattr(m, "lora_A")}
    err = run_tool(lora.train_args(zt, work, work("llama_list"),
                                   ["--micro-batch", "2", "--lora-config",
                                    work("llama_list.json")], steps=1, targets=None))
    with open(work("llama_list", "final", "adapter_config.json")) as f:
        ours = set(json.load(f)["target_modules"])
    check(ours == peft_names == {"o_proj", "down_proj"},
          f"Llama's list on Phi-3: zerotrain adapts {sorted(ours)}, PEFT {sorted(peft_names)}")
    check("a phi3 model has no q_proj, k_proj, v_proj, gate_proj, up_proj" in err,
          f"Llama's list on Phi-3 was not warned about: {err.strip()}")
    info = json.loads(run_tool([zt, "info", work("llama_list", "final"), "--json"]))
    check(info["target_modules"] == "o_proj,down_proj",
          f"info names {info['target_modules']} for an adapter of o_proj and down_proj")
    print("target names: q_proj,v_proj refused; Llama's list adapts o_proj and down_proj, as PEFT")


def imported_windows_and_initial_a(zt, work, source_dir):
    """work("hf") imported as work("model"), the byte windows (training, evaluation) and
    zerotrain's initial all-linear A (a run whose step cannot move an fp32 value): (tokens,
    eval_tokens, {name: A in float64}, the adapter config's target_modules)."""
    run_tool([zt, "import", work("hf"), "--out", work("model")])
    S = lora.SEQ_LEN
    data = write_byte_windows(work("tok.h5"), os.path.join(source_dir, "inputs", "data",
                                                           "sample.txt"), lora.WINDOWS, S,
                              extra_tokens=1)
    tokens = torch.from_numpy(np.stack([data[w * S: w * S + S + 1]
                                        for w in range(lora.WINDOWS)]).astype(np.int64))
    eval_tokens = torch.from_numpy(
        data[:lora.WINDOWS * (S + 1)].reshape(lora.WINDOWS, S + 1).astype(np.int64))
    run_tool(lora.train_args(zt, work, work("init"), ["--micro-batch", "2"], steps=1, lr=1e-30,
                             targets="all-linear"))
    initial = lora.read_safetensors(work("init", "final", "adapter_model.safetensors"))
    initial_a = {n[len(lora.PREFIX):]: t.to(torch.float64) for n, t in initial.items()
                 if ".lora_A." in n}
    with open(work("init", "final", "adapter_config.json")) as f:
        return tokens, eval_tokens, initial_a, json.load(f)["target_modules"]


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], ["parts"])
    zt = args.zerotrain

    def checks():
        from transformers import Phi3Config, Phi3ForCausalLM
        torch.manual_seed(1234)
        model = Phi3ForCausalLM(Phi3Config(**CONFIG)).to(torch.bfloat16)
        model.save_pretrained(work("hf"), safe_serialization=True)
        tokens, eval_tokens, initial_a, written = imported_windows_and_initial_a(
            zt, work, args.source_dir)
        check(written == FUSED, f"all-linear on Phi-3 adapts {written}, PEFT {FUSED}")
        history = []
        model, trained = peft_model(work("hf"), initial_a, mutation=args.mutation)
        want_losses, want_norms, want_final = train_peft(model, trained, tokens, history=history)
        print("PEFT losses: " + " ".join(f"{x:.7f}" for x in want_losses))
        for what, (out, world_args, launcher) in lora.world_runs(work, args.mpirun).items():
            run_tool(launcher + lora.train_args(zt, work, out, world_args, save_every=1,
                                                targets="all-linear"))
            compare_run(what, out, want_losses, want_norms, want_final)
            worst = lora.check_gradients_per_step(what, out, history)
            print(f"{what}: every step's A/B gradients, m and v within {worst:.2e} of PEFT's")
            if args.mutation:
                return
        # The 2-rank stage-3 checkpoint's adapter (export --format peft): final/'s, bitwise.
        run_tool([zt, "export", work("two", "checkpoints", f"step-{lora.STEPS:08d}"), "--format",
                  "peft", "--out", work("exported")])
        exported = lora.read_safetensors(work("exported", "adapter_model.safetensors"))
        final = lora.read_safetensors(work("two", "final", "adapter_model.safetensors"))
        check(set(exported) == set(final) and all(torch.equal(exported[n], final[n])
                                                  for n in final),
              "export --format peft of the last checkpoint differs from final/")
        with open(work("exported", "adapter_config.json")) as f:
            check(json.load(f)["target_modules"] == FUSED, "the exported adapter's targets")
        from peft import PeftModel
        loaded = PeftModel.from_pretrained(base_model(work("hf")), work("one", "final"))
        with torch.no_grad():
            peft_loss = lora.window_loss(loaded.to(torch.float64), eval_tokens).item()
        with open(work("one", "report.json")) as f:
            eval_loss = json.load(f)["eval"]["loss"]
        print(f"PEFT-loaded loss {peft_loss:.7f}, zerotrain eval {eval_loss:.7f}")
        check(abs(peft_loss - eval_loss) / abs(peft_loss) < lora.TOLERANCE,
              "the adapter's loss in PEFT differs from zerotrain's evaluation")
        check_merge(zt, work, work("one"), loaded)
        check_peft_saved(zt, work, model, tokens, eval_tokens)
        check_dropout(zt, work, args.source_dir, initial_a)
        check_target_names(zt, work)

    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       "final adapters differ from PEFT's")


if __name__ == "__main__":
    sys.exit(main())
