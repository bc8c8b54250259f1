#!/usr/bin/env python3
"""LoRA (`train --lora-*`) against Hugging Face PEFT itself (label oracle).

The tiny preset, LoRA r = 4, alpha = 8 on all seven projections of every layer (fp32, constant
learning rate, no clipping), on one global batch of 2 windows for STEPS AdamW steps, at 1 rank
stage 0 (2 micro-batches) and at 2 ranks stage 3. The reference is PEFT 0.13.2's
get_peft_model(LlamaForCausalLM, LoraConfig(...)) in float64 on the same base weights, its lora_A
set to zerotrain's initial A (read from a run whose learning rate is too small to move an fp32
value: 1e-30) and lora_B zero as both initialise it, trained with torch.optim.AdamW over the
adapter parameters alone.
1. Each step's loss and gradient norm (metrics.jsonl: the norm over the adapters' gradients) equal
   PEFT's within the fp32 bound of test_oracle.py, 1e-4 relative.
2. The adapters of OUT/final (PEFT's adapter_model.safetensors) equal the reference's after the
   last step within that bound; the base tensors of the last checkpoint are bitwise the model's.
3. peft.PeftModel.from_pretrained(base, OUT/final) loads the adapter, and its loss on the
   evaluation's two windows equals zerotrain's end-of-run evaluation (1e-4).
4. A 2-rank stage-3 run resumed at step 2 has the uninterrupted run's losses and adapters, bitwise.
5. PEFT's own adapter_config.json (save_pretrained) is accepted by --lora-config.
6. Bad input: a PEFT config with DoRA, a regex target_modules, a target zerotrain cannot adapt, and
   a --trainable pattern on a layer's own tensor are refused naming the key, the name or tensor.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, checkpoint_masters,  # noqa: E402
                            exit_status, fresh_work_dir, require_venv_modules, run_tool,
                            write_byte_windows)
import llama_reference as ref  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

STEPS, SEQ_LEN, WINDOWS, LR = 4, 16, 2, 1e-2
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.95), 1e-8, 0.1
RANK, ALPHA = 4, 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOLERANCE = 1e-4  # test_oracle.py's fp32 bound (relative; float64 reference)
PREFIX = "base_model.model."


def read_safetensors(path):
    from safetensors.numpy import load_file
    return {n: torch.from_numpy(v.copy()) for n, v in load_file(path).items()}


def base_model(model_dir, weights):
    """transformers' LlamaForCausalLM in float64 holding zerotrain's model directory."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(**ref.load_config(model_dir))
    config.torch_dtype = torch.float64
    model = LlamaForCausalLM(config).to(torch.float64)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    check(not unexpected and all("rotary" in m for m in missing),
          f"the base model does not take the weights: missing {missing}, unexpected {unexpected}")
    return model.eval()


def window_loss(model, tokens):
    logits = model(input_ids=tokens[:, :SEQ_LEN]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             tokens[:, 1:].reshape(-1))


def peft_reference(model_dir, weights, initial_a, tokens):
    """PEFT's LoRA trained for STEPS steps: losses, gradient norms and final adapter tensors (by
    zerotrain's names, without PEFT's prefix)."""
    from peft import LoraConfig, get_peft_model
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS,
                        task_type="CAUSAL_LM")
    model = get_peft_model(base_model(model_dir, weights), config)
    adapters = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        # base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
        short = name[len(PREFIX):].replace(".default.", ".")
        with torch.no_grad():
            p.copy_(initial_a[short] if ".lora_A." in short else torch.zeros_like(p))
        adapters[short] = p
    check(set(adapters) == set(initial_a) | {n.replace("lora_A", "lora_B") for n in initial_a},
          f"PEFT adapts other tensors than zerotrain: {sorted(adapters)[:4]}...")
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=LR, betas=BETAS, eps=EPS,
                                  weight_decay=WEIGHT_DECAY, foreach=False)
    losses, norms = [], []
    for _ in range(STEPS):
        loss = window_loss(model, tokens)
        loss.backward()
        losses.append(loss.item())
        norms.append(torch.sqrt(sum((p.grad ** 2).sum() for p in adapters.values())).item())
        base_grads = [n for n, p in model.named_parameters() if not p.requires_grad and
                      p.grad is not None]
        check(not base_grads, f"PEFT computed base gradients: {base_grads[:3]}")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses, norms, {n: p.detach().clone() for n, p in adapters.items()}, model


def rel_error(got, want):
    got, want = got.to(torch.float64), want.to(torch.float64)
    return ((got - want).norm() / max(want.norm().item(), 1e-30)).item()


def train_args(zt, work, out, extra, steps=STEPS, lr=LR, targets=",".join(TARGETS)):
    """train's options; targets None: the adapters come from `extra` (--lora-config)."""
    lora = [] if targets is None else ["--lora-rank", str(RANK), "--lora-alpha", str(ALPHA),
                                       "--lora-targets", targets]
    return [zt, "train", "--backend", "cpu", "--model", work("model"), "--data", work("tok.h5"),
            "--out", out, "--precision", "fp32", "--steps", str(steps), "--seq-len",
            str(SEQ_LEN), "--lr", str(lr), "--min-lr", str(lr), "--warmup-steps", "0",
            "--clip", "0", "--weight-decay", str(WEIGHT_DECAY), "--beta1", str(BETAS[0]),
            "--beta2", str(BETAS[1]), "--eps", str(EPS), "--save-every", str(steps),
            "--log-every", "0"] + lora + extra


def refused(cmd, must_contain):
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.rstrip())
    check(proc.returncode != 0, f"{' '.join(cmd)} was accepted")
    check(must_contain in proc.stdout, f"the refusal does not say {must_contain!r}")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    require_venv_modules("peft", "transformers", "safetensors")
    torch.set_num_threads(1)
    work = fresh_work_dir(args.work_dir)
    zt = args.zerotrain

    def checks():
        run_tool([zt, "init", "--preset", "tiny", "--seed", "1234", "--out", work("model")])
        # One token more than the training windows need, so that the end-of-run evaluation's
        # windows (apart, SEQ_LEN + 1 tokens each) fit too.
        data = write_byte_windows(work("tok.h5"), os.path.join(args.source_dir, "inputs", "data",
                                                               "sample.txt"), WINDOWS, SEQ_LEN,
                                  extra_tokens=1)
        windows = np.stack([data[w * SEQ_LEN: w * SEQ_LEN + SEQ_LEN + 1] for w in range(WINDOWS)])
        tokens = torch.from_numpy(windows.astype(np.int64))
        eval_windows = data[:WINDOWS * (SEQ_LEN + 1)].reshape(WINDOWS, SEQ_LEN + 1)
        eval_tokens = torch.from_numpy(eval_windows.astype(np.int64))
        weights = ref.load_weights(work("model"), torch.float64)
        # zerotrain's initial A: a run whose step cannot move an fp32 value of A's size.
        run_tool(train_args(zt, work, work("init"), ["--micro-batch", "2"], steps=1, lr=1e-30))
        initial = read_safetensors(work("init", "final", "adapter_model.safetensors"))
        initial_a = {n[len(PREFIX):]: t.to(torch.float64) for n, t in initial.items()
                     if ".lora_A." in n}
        check(len(initial_a) == 2 * len(TARGETS), f"{len(initial_a)} lora_A tensors")
        for n, t in initial.items():
            bound = 1 / np.sqrt(t.shape[1])
            check(".lora_B." in n or (t.abs().max() <= bound and t.abs().max() > bound / 2),
                  f"{n} is not Kaiming-uniform with bound {bound}")
            check(".lora_A." in n or t.abs().max() < 1e-25, f"{n} does not start at zero")
        want_losses, want_norms, want_final, peft_model = peft_reference(work("model"), weights,
                                                                         initial_a, tokens)
        # The adapter_config.json PEFT itself writes is accepted as the specification.
        peft_model.save_pretrained(work("peft_saved"))
        run_tool(train_args(zt, work, work("from_config"),
                            ["--micro-batch", "2", "--lora-config",
                             work("peft_saved", "adapter_config.json")], steps=1, targets=None))
        with open(work("from_config", "final", "adapter_config.json")) as f:
            written = json.load(f)
        check(written["r"] == RANK and written["lora_alpha"] == ALPHA and
              sorted(written["target_modules"]) == sorted(TARGETS),
              f"the adapter config written back differs: {written}")
        print("PEFT losses:      " + " ".join(f"{x:.7f}" for x in want_losses))
        print("PEFT grad norms:  " + " ".join(f"{x:.7f}" for x in want_norms))

        runs = {"1 rank stage 0": (work("one"), ["--micro-batch", "1", "--grad-accum", "2",
                                                 "--eval-batches", "2"], []),
                "2 ranks stage 3": (work("two"), ["--micro-batch", "1", "--zero-stage", "3",
                                                  "--eval-batches", "1"],
                                    [args.mpirun, "--oversubscribe", "-n", "2"])}
        for what, (out, world_args, launcher) in runs.items():
            run_tool(launcher + train_args(zt, work, out, world_args))
            with open(os.path.join(out, "metrics.jsonl")) as f:
                metrics = [json.loads(line) for line in f]
            check(len(metrics) == STEPS, f"{what}: {len(metrics)} metrics lines")
            for key, want in (("loss", want_losses), ("grad_norm", want_norms)):
                got = [m[key] for m in metrics]
                print(f"{what} {key}: " + " ".join(f"{x:.7f}" for x in got))
                for step, (g, w) in enumerate(zip(got, want), start=1):
                    err = abs(g - w) / abs(w)
                    check(err < TOLERANCE, f"{what}: step {step} {key} {g} vs PEFT {w} ({err:.2e})")
            final = read_safetensors(os.path.join(out, "final", "adapter_model.safetensors"))
            check({n[len(PREFIX):] for n in final} == set(want_final),
                  f"{what}: final/ holds {sorted(final)[:3]}...")
            worst = max(rel_error(t, want_final[n[len(PREFIX):]]) for n, t in final.items())
            check(worst < TOLERANCE, f"{what}: final adapters differ from PEFT's by {worst:.2e}")
            print(f"{what}: final adapters within {worst:.2e} of PEFT's")
            base = {n: v for n, (v, _) in checkpoint_masters(
                os.path.join(out, "checkpoints", f"step-{STEPS:08d}")).items() if ".lora_" not in n}
            start = ref.load_weights(work("model"), torch.float32)
            changed = [n for n in start if not np.array_equal(base[n], start[n].numpy())]
            check(not changed, f"{what}: the base changed: {changed[:3]}")
            # PEFT loads the adapter onto the base; its loss is zerotrain's evaluation's.
            from peft import PeftModel
            loaded = PeftModel.from_pretrained(base_model(work("model"), weights),
                                               os.path.join(out, "final")).to(torch.float64)
            with torch.no_grad():
                peft_loss = window_loss(loaded, eval_tokens).item()
            with open(os.path.join(out, "report.json")) as f:
                eval_loss = json.load(f)["eval"]["loss"]
            err = abs(peft_loss - eval_loss) / abs(peft_loss)
            print(f"{what}: PEFT-loaded loss {peft_loss:.7f}, zerotrain eval {eval_loss:.7f}")
            check(err < TOLERANCE, f"{what}: the exported adapter's loss differs by {err:.2e}")

        # A resume continues the adapters bitwise (2 ranks, stage 3, from step 2 of 4).
        two_args = runs["2 ranks stage 3"][1]
        launcher = [args.mpirun, "--oversubscribe", "-n", "2"]
        run_tool(launcher + train_args(zt, work, work("resumed"), two_args, steps=STEPS // 2))
        run_tool(launcher + train_args(zt, work, work("resumed"), two_args + ["--resume", "auto"]))
        losses = {}
        for run in ("two", "resumed"):
            with open(work(run, "metrics.jsonl")) as f:
                losses[run] = [json.loads(line)["loss"] for line in f]
        check(losses["resumed"] == losses["two"],
              f"the resumed run's losses {losses['resumed']} differ from {losses['two']}")
        with open(work("two", "final", "adapter_model.safetensors"), "rb") as a, \
                open(work("resumed", "final", "adapter_model.safetensors"), "rb") as b:
            check(a.read() == b.read(), "the resumed run's adapters differ from the uninterrupted")
        print("resume at step 2: losses and final adapters bitwise the uninterrupted run's")

        # Bad input.
        bad = work("bad")
        for name, config, says in (
                ("dora.json", {"r": 4, "target_modules": ["q_proj"], "use_dora": True},
                 "key 'use_dora'"),
                ("regex.json", {"r": 4, "target_modules": ".*proj"}, "regular expression"),
                ("head.json", {"r": 4, "target_modules": ["lm_head"]}, "'lm_head' is not"),
                ("dropout.json", {"r": 4, "lora_dropout": 0.05}, "lora_dropout")):
            with open(work(name), "w") as f:
                json.dump(config, f)
            refused([zt, "train", "--backend", "cpu", "--model", work("model"), "--data",
                     work("tok.h5"), "--out", bad, "--seq-len", str(SEQ_LEN),
                     "--lora-config", work(name)], says)
        refused(train_args(zt, work, bad, ["--trainable", r"layers\.0\.mlp\.up_proj"]),
                "with LoRA a decoder layer's own tensors stay frozen")
        refused(train_args(zt, work, bad, [], targets="q_proj,qproj"), "'qproj' is not")
        refused(train_args(zt, work, bad, ["--lora-config", work("dora.json")]),
                "both specify the adapters")

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
