#!/usr/bin/env python3
"""DoRA (use_dora) against Hugging Face PEFT itself (label oracle).

test_lora_layers.py's small random LlamaForCausalLM (four layers, grouped heads, norm weights
drawn around 1), saved in bf16 and imported. An adapter config with use_dora: true on all seven
projections of layers 1 and 3 (layers_to_transform), with use_rslora, v_proj at r 2
(rank_pattern) and o_proj at alpha 32 (alpha_pattern), trained by
`train --lora-config FILE`. The reference is PEFT 0.13.2's get_peft_model(LlamaForCausalLM,
LoraConfig(**file)) in float64 on the same weights: lora_A set to zerotrain's initial A, lora_B
zero, each lora_magnitude_vector PEFT's own (the norms of the base weight's rows), trained with
torch.optim.AdamW, as in test_lora.py (whose constants this uses: r 4, alpha 8, STEPS steps on 2
windows).
1. zerotrain's initial magnitudes are PEFT's within fp32 rounding (1e-6 relative);
2. at 1 rank stage 0 (2 micro-batches) and 2 ranks stage 3: each step's loss and gradient norm,
   each step's gradient and Adam moments of every lora_A, lora_B and lora_magnitude_vector, and
   the final adapters equal PEFT's within test_lora.py's fp32 bound (1e-4 relative);
3. OUT/final is PEFT's: PeftModel.from_pretrained loads it (use_dora, the magnitudes under PEFT's
   names) and its loss is zerotrain's end-of-run evaluation's; `generate --adapter OUT/final`
   picks at every new position the token of PEFT's largest logit (test_lora_io.py's check);
4. export --merge-lora writes each adapted projection m/‖W + s·B·A‖ ⊙ (W + s·B·A) within the
   rounding both do of PEFT's merge_and_unload (merge_bounds), every other tensor
   bitwise the base's;
5. dropout 0.25 (one window a step): PEFT's lora_dropout modules applying zerotrain's masks
   (lora_dropout_mask.py), its DoRA layers multiplying the dropped input by the base weight
   again; each step's loss and gradient norm and the final adapters within the bound (Adam's
   epsilon 1e-3, as test_lora.py's dropout check).
6. A 2-rank stage-3 run resumed at step 2 has the uninterrupted run's losses and adapters, bitwise,
   and export --format peft of its last checkpoint writes final/'s tensors bitwise.
7. --use-dora on the command line trains the config file's initial A and magnitudes; --lora-init-from OUT/final starts from its tensors, magnitudes included, bit for bit.
8. Bad input: an adapter directory whose config says use_dora without the magnitudes, or the
   magnitudes without use_dora, is refused naming the tensor by --lora-init-from, eval --adapter
   and export --merge-lora; --use-dora beside --lora-config is refused.
9. Phi-3 (test_lora_phi3.py's model, all-linear): one magnitude over a fused module's rows, each
   part's rows scaled by its own norms (qkv_proj's q, k and v; gate_up_proj's gate and up); 1 to
   4 as above but dropout.

--mutation attached (PEFT's DoRA with the row norms left in the graph, so that gradients flow
through them: the DoRA paper's §4.3 detaches them) or plain (PEFT without use_dora) with
--expect-mismatch: the comparison must fail.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, exit_status, lora_oracle_arguments, refused,  # noqa: E402
                            run_tool, write_byte_windows)
from lora_dropout_mask import MaskedDropout  # noqa: E402
from lora_refusals import edited_adapter, rewrite_config  # noqa: E402
import numpy as np  # noqa: E402
import test_lora as lora  # noqa: E402
import test_lora_gemma2 as gemma2  # noqa: E402
import test_lora_io as lora_io  # noqa: E402
import test_lora_layers as layers  # noqa: E402
import test_lora_phi3 as phi3  # noqa: E402
import torch  # noqa: E402

DORA = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "use_dora": True,
        "use_rslora": True, "target_modules": lora.TARGETS, "layers_to_transform": [1, 3],
        "rank_pattern": {"v_proj": 2}, "alpha_pattern": {"o_proj": 32}}
MAGNITUDE = ".lora_magnitude_vector"
MAGNITUDE_BOUND = 1e-6  # fp32 rounding of a norm PEFT computes in float64


def zerotrain_name(peft_name):
    """A trained PEFT parameter's name as zerotrain's layout (and PEFT's saved file) names it."""
    short = peft_name[len(lora.PREFIX):].replace(".default.", ".")
    return short[:-len(".weight")] if short.endswith(MAGNITUDE + ".weight") else short


def detach_free_forward(self, x, *, lora_A, lora_B, scaling, base_layer):
    """The mutation "attached": PEFT 0.13.2's DoraLinearLayer.forward with the row norms left in
    the graph (written from its description; PEFT detaches them)."""
    import torch.nn.functional as F
    eye = torch.eye(lora_A.weight.shape[1], dtype=x.dtype)
    lora_weight = lora_B(lora_A(eye)).T
    weight = base_layer.weight.to(x.dtype)
    norm = torch.linalg.norm(weight + scaling * lora_weight, dim=1)
    factor = (self.weight / norm).view(1, -1)
    return (factor - 1) * F.linear(x, weight) + factor * lora_B(lora_A(x)) * scaling


def peft_model(base, adapter, initial, mutation, dropout=None):
    """PEFT's LoraConfig(**adapter) on `base`, zerotrain's initial A, B zero, PEFT's own
    magnitudes: (model, {zerotrain name: parameter}). dropout: (p, seed) given to PEFT's
    lora_dropout modules as zerotrain's masks."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import dora
    fields = dict(adapter, use_dora=mutation != "plain")
    fields.pop("peft_type")
    if dropout:
        fields["lora_dropout"] = dropout[0]
    if mutation == "attached":
        dora.DoraLinearLayer.forward = detach_free_forward
    model = get_peft_model(base, LoraConfig(**fields))
    trained = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            short = zerotrain_name(name)
            check(short in initial, f"PEFT trains {short}, which zerotrain has no tensor for")
            if ".lora_A." in short or ".lora_B." in short:
                with torch.no_grad():
                    p.copy_(initial[short] if ".lora_A." in short else torch.zeros_like(p))
            trained[short] = p
    check(set(trained) == set(initial) or mutation == "plain",
          f"PEFT trains {len(trained)} tensors, zerotrain {len(initial)}")
    if dropout:
        for name, module in model.named_modules():
            if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
                layer = int(name.split(".layers.")[1].split(".")[0])
                target = lora.TARGETS.index(name.rsplit(".", 1)[1])
                module.lora_dropout["default"] = MaskedDropout(layer, target, *dropout)
        model.train()
    return model, trained


def initial_adapters(zt, work, path):
    """zerotrain's initial adapters for the config at `path` (a run whose step moves no fp32
    value): {name: tensor in float64}."""
    run_tool(lora.train_args(zt, work, work("init-dora"),
                             ["--micro-batch", "2", "--lora-config", path], steps=1, lr=1e-30,
                             targets=None))
    initial = lora.read_safetensors(work("init-dora", "final", "adapter_model.safetensors"))
    return {n[len(lora.PREFIX):]: t.to(torch.float64) for n, t in initial.items()}


def check_initial_magnitudes(trained, initial):
    worst = 0.0
    for name, p in trained.items():
        if name.endswith(MAGNITUDE):
            worst = max(worst, lora.rel_error(initial[name], p.detach()))
    check(worst < MAGNITUDE_BOUND,
          f"zerotrain's initial magnitudes differ from PEFT's by {worst:.2e}")
    print(f"initial magnitudes: within {worst:.2e} of PEFT's (the base rows' norms)")


def check_trained(zt, work, args, base_model, path, tokens, eval_tokens, initial):
    """1 to 4 for the adapter config at `path` on work("hf") (base_model loads it)."""
    with open(path) as f:
        adapter = json.load(f)
    model, trained = peft_model(base_model(work("hf")), adapter, initial, args.mutation)
    if not args.mutation:
        check_initial_magnitudes(trained, initial)
    history = []
    want_losses, want_norms, want_final = phi3.train_peft(model, trained, tokens, history=history)
    print("PEFT losses: " + " ".join(f"{x:.7f}" for x in want_losses))
    for what, (out, world_args, launcher) in lora.world_runs(work, args.mpirun).items():
        run_tool(launcher + lora.train_args(zt, work, out, world_args + ["--lora-config", path],
                                            save_every=1, targets=None))
        phi3.compare_run(what, out, want_losses, want_norms, want_final)
        worst = lora.check_gradients_per_step(what, out, history)
        print(f"{what}: every step's A, B and magnitude gradients, m and v within {worst:.2e} of "
              "PEFT's")
        if args.mutation:
            return
    from peft import PeftModel
    loaded = PeftModel.from_pretrained(base_model(work("hf")), work("one", "final"))
    check(all(m.use_dora["default"] for m in loaded.modules() if hasattr(m, "use_dora")),
          "PEFT does not read OUT/final as a DoRA adapter")
    lora.check_loaded_loss("", loaded, eval_tokens, work("one"))
    lora_io.check_generated(zt, work("model"), work("one", "final"), loaded)
    adapted = {n[:-len(".lora_A.weight")] for n in initial if ".lora_A." in n}
    layers.check_merge(zt, work, work("one"), loaded, adapted)


def check_resume_and_export(zt, work, args, path):
    """The 2-rank stage-3 run stopped after step 2 and resumed: its losses and final adapters
    bitwise the uninterrupted run's; export --format peft of its last checkpoint: OUT/final's
    tensors bitwise, with use_dora."""
    two_args = lora.world_runs(work, args.mpirun)["2 ranks stage 3"][1] + ["--lora-config", path]
    launcher = [args.mpirun, "--oversubscribe", "-n", "2"]
    run_tool(launcher + lora.train_args(zt, work, work("resumed"), two_args, steps=lora.STEPS // 2,
                                        targets=None))
    run_tool(launcher + lora.train_args(zt, work, work("resumed"), two_args + ["--resume", "auto"],
                                        targets=None))
    losses = {run: lora.run_losses(work(run)) for run in ("two", "resumed")}
    check(losses["resumed"] == losses["two"],
          f"the resumed run's losses {losses['resumed']} differ from {losses['two']}")
    final = lora.read_safetensors(work("two", "final", "adapter_model.safetensors"))
    resumed = lora.read_safetensors(work("resumed", "final", "adapter_model.safetensors"))
    run_tool([zt, "export", work("two", "checkpoints", f"step-{lora.STEPS:08d}"), "--format",
              "peft", "--out", work("exported")])
    exported = lora.read_safetensors(work("exported", "adapter_model.safetensors"))
    for what, tensors in (("the resumed run's", resumed), ("export --format peft's", exported)):
        check(set(tensors) == set(final) and all(torch.equal(tensors[n], final[n]) for n in final),
              f"{what} adapters differ from the uninterrupted run's final/")
    with open(work("exported", "adapter_config.json")) as f:
        check(json.load(f).get("use_dora") is True, "the exported adapter_config.json's use_dora")
    print("resume at step 2 and export --format peft: the uninterrupted run's adapters, bitwise")


def check_command_line_and_init_from(zt, work, initial):
    """--use-dora on the command line trains the same adapters as the config file (the same
    initial A and magnitudes, and use_dora written back); --lora-init-from OUT/final
    starts from its magnitudes (a run whose step moves no fp32 value ends on them, bit for
    bit)."""
    run_tool(lora.train_args(zt, work, work("cli"), ["--micro-batch", "2", "--use-dora"],
                             steps=1, lr=1e-30))
    cli = lora.read_safetensors(work("cli", "final", "adapter_model.safetensors"))
    with open(work("cli", "final", "adapter_config.json")) as f:
        check(json.load(f).get("use_dora") is True, "--use-dora's adapter_config.json")
    names = {n[len(lora.PREFIX):] for n in cli}
    check(sum(n.endswith(MAGNITUDE) for n in names) == 4 * len(lora.TARGETS),
          f"--use-dora trains {sorted(names)[:4]}...")
    check(set(initial) < names, "--use-dora does not adapt every module the config file does")
    for n in set(initial):
        # v_proj is at r 2 in the config file; B moved by 1e-30 along gradients that o_proj's
        # alpha and use_rslora change; the config file adapts layers 1 and 3 alone.
        if "v_proj" not in n and ".lora_B." not in n:
            check(torch.equal(cli[lora.PREFIX + n].to(torch.float64), initial[n]),
                  f"--use-dora's initial {n} differs from the config file's")
    run_tool(lora.train_args(zt, work, work("continued"), ["--micro-batch", "2", "--lora-init-from",
                                                           work("one", "final")],
                             steps=1, lr=1e-30, targets=None))
    final = lora.read_safetensors(work("one", "final", "adapter_model.safetensors"))
    continued = lora.read_safetensors(work("continued", "final", "adapter_model.safetensors"))
    check(set(final) == set(continued) and all(torch.equal(final[n], continued[n]) for n in final),
          "--lora-init-from a DoRA adapter did not start from its tensors")
    print("--use-dora trains the config file's adapters; --lora-init-from starts from OUT/final's "
          "magnitudes, bit for bit")


def check_dropout(zt, work, args, path, initial):
    """Dropout 0.25 on one window a step (step s's tokens are [(s−1)·T, s·T) of the data)."""
    p, seed = 0.25, 1234
    S = lora.SEQ_LEN
    data = write_byte_windows(work("tok1.h5"), os.path.join(args.source_dir, "inputs", "data",
                                                            "sample.txt"), 1, S)
    tokens = torch.from_numpy(data[:S + 1].astype(np.int64)).reshape(1, -1)
    dropout_path = work("dora-dropout.json")
    with open(dropout_path, "w") as f:
        json.dump(dict(DORA, lora_dropout=p), f)
    run_tool(lora.train_args(zt, work, work("dropout"),
                             ["--micro-batch", "1", "--seed", str(seed), "--lora-config",
                              dropout_path], data=work("tok1.h5"), eps=lora.DROPOUT_EPS,
                             targets=None))
    model, trained = peft_model(layers.base_model(work("hf")), DORA, initial, args.mutation,
                                dropout=(p, seed))
    want_losses, want_norms, want_final = phi3.train_peft(model, trained, tokens,
                                                          eps=lora.DROPOUT_EPS)
    phi3.compare_run("dropout 0.25", work("dropout"), want_losses, want_norms, want_final)


def check_refusals(zt, work, path):
    """Adapter directories that contradict their config, and --use-dora beside a config."""
    from safetensors.torch import load_file, save_file
    bad = work("bad")
    weights = "adapter_model.safetensors"

    def without_magnitudes(d):
        tensors = load_file(os.path.join(d, weights))
        save_file({n: t for n, t in tensors.items() if not n.endswith(MAGNITUDE)},
                  os.path.join(d, weights))

    for case, edit, says in (
            ("no_magnitudes", without_magnitudes,
             f"no tensor '{lora.PREFIX}model.layers.1.self_attn.q_proj{MAGNITUDE}', which "
             "adapter_config.json (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj in "
             "layers 1, 3 with rank_pattern and alpha_pattern, use_dora: true) implies"),
            ("not_dora", lambda d: rewrite_config(d, use_dora=False), "a DoRA magnitude, and adapter_config.json has no "
             "use_dora: true")):
        d = edited_adapter(work, case, edit)
        refused(lora.train_args(zt, work, bad, ["--lora-init-from", d], targets=None), says)
        refused([zt, "eval", "--model", work("model"), "--adapter", d, "--data", work("tok.h5"),
                 "--batches", "1", "--micro-batch", "2", "--seq-len", str(lora.SEQ_LEN)], says)
        refused([zt, "export", work("model"), "--merge-lora", d, "--out", bad], says)
        check(not os.path.exists(bad), f"a refused adapter directory ({case}) left {bad}")
    refused(lora.train_args(zt, work, bad, ["--lora-config", path, "--use-dora"], targets=None),
            "both specify the adapters")
    print("refused: DoRA adapter directories without magnitudes or without use_dora, "
          "--use-dora beside --lora-config")


def prepared(zt, work, source_dir, adapter, magnitudes):
    """work("hf") imported, the windows, the adapter config written: (path, tokens, eval_tokens,
    zerotrain's initial adapters, which hold `magnitudes` magnitudes)."""
    tokens, eval_tokens, _, _ = phi3.imported_windows_and_initial_a(zt, work, source_dir)
    path = work("dora.json")
    with open(path, "w") as f:
        json.dump(adapter, f)
    initial = initial_adapters(zt, work, path)
    check(sum(n.endswith(MAGNITUDE) for n in initial) == magnitudes,
          f"zerotrain's DoRA adapter holds {sorted(initial)[:4]}...")
    return path, tokens, eval_tokens, initial


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], ["attached", "plain"])

    def checks():
        from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM
        gemma2.save_random(work("hf"), LlamaConfig, LlamaForCausalLM, layers.CONFIG, 1.0)
        path, tokens, eval_tokens, initial = prepared(args.zerotrain, work, args.source_dir,
                                                      DORA, 2 * len(lora.TARGETS))
        check_trained(args.zerotrain, work, args, layers.base_model, path, tokens, eval_tokens,
                      initial)
        if args.mutation:
            return
        check_dropout(args.zerotrain, work, args, path, initial)
        check_refusals(args.zerotrain, work, path)
        check_resume_and_export(args.zerotrain, work, args, path)
        check_command_line_and_init_from(args.zerotrain, work, initial)
        # Phi-3's fused modules, in a directory of their own.
        os.makedirs(work("phi3"))
        fused = lambda *parts: work("phi3", *parts)  # noqa: E731
        gemma2.save_random(fused("hf"), Phi3Config, Phi3ForCausalLM, phi3.CONFIG, 1.0)
        adapter = dict({k: v for k, v in DORA.items() if k != "layers_to_transform"},
                       target_modules="all-linear", rank_pattern={}, alpha_pattern={})
        modules = phi3.CONFIG["num_hidden_layers"] * len(phi3.FUSED)
        path, tokens, eval_tokens, initial = prepared(args.zerotrain, fused, args.source_dir,
                                                      adapter, modules)
        check_trained(args.zerotrain, fused, args, phi3.base_model, path, tokens, eval_tokens,
                      initial)

    return exit_status(checks, args.mutation if args.expect_mismatch else None, "vs PEFT")


if __name__ == "__main__":
    sys.exit(main())
