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
   PEFT's within the fp32 bound of test_oracle.py, 1e-4 relative; so do each step's gradient of
   every lora_A and lora_B tensor (recovered from the checkpoint's Adam m of that step and the
   step before) and its Adam m and v, against PEFT's gradient and torch AdamW's state.
2. The adapters of OUT/final (PEFT's adapter_model.safetensors; `consolidate` of the last
   checkpoint writes the same tensors bitwise) equal the reference's after the
   last step within that bound; the base tensors of the last checkpoint are bitwise the model's.
3. peft.PeftModel.from_pretrained(base, OUT/final) loads the adapter, and its loss on the
   evaluation's two windows equals zerotrain's end-of-run evaluation (1e-4).
4. A 2-rank stage-3 run resumed at step 2 has the uninterrupted run's losses and adapters, bitwise;
   so has the same run with CPU optimizer offload and the exact overlap (every step kept).
5. PEFT's own adapter_config.json (save_pretrained) is accepted by --lora-config, also beside a
   DeepSpeed JSON (ZeRO-3), whose run is the command line's 2-rank stage-3 run bitwise.
6. --lora-init-from OUT/final starts from those adapters bitwise, its first loss PEFT's with them;
   so does --lora-init-from PEFT's own save_pretrained directory of the float64 reference (F64)
   and that directory with its tensors saved as F32, from PEFT's values rounded to fp32;
   export --merge-lora writes W + s·B·A within the rounding both do of PEFT's merge_and_unload
   (rounded to bf16; merge_bounds: half a bf16 step at each value, an fp32 step, and the fp32
   error of export's sum, which passes a bf16 step where W and s·B·A nearly cancel), every other
   tensor bitwise the base's.
7. Dropout 0.25: the losses, gradient norms and final adapters of PEFT whose lora_dropout modules
   apply the mask docs/lora.md describes (lora_dropout_mask.py, written from its description),
   within the same bound (Adam's epsilon 1e-3 on both sides: see DROPOUT_EPS).
8. estimate --lora-rank counts the adapters (6b, r 16, all-linear: their parameters, 16 bytes of
   state each at stage 0) and full fine-tuning's 18 bytes per parameter beside them.
9. Bad input: a PEFT config with replicated layers, a regex target_modules selecting a layer the
   model lacks, a target zerotrain cannot adapt, and a --trainable pattern on a layer's own
   tensor are refused naming the key, the name or tensor;
   an adapter directory without weights, with another rank than its tensors, with a
   safetensors file named adapter_model.bin or with a NaN in its weights is refused by
   --lora-init-from (leaving no run directory) and by export --merge-lora.

--mutation scale (PEFT at alpha/(r+1)) or base (PEFT's q_proj base weights train too) with
--expect-mismatch: the first run must then differ from the reference (oracle_lora_peft_mismatch_*).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, checkpoint_masters, exit_status,  # noqa: E402
                            frozen_digest_mismatches, lora_oracle_arguments, refused, run_tool,
                            write_byte_windows)
import llama_reference as ref  # noqa: E402
from lora_refusals import check_lora_refusals  # noqa: E402
from lora_merge_reference import PREFIX, compare_merge, read_merged  # noqa: E402
from lora_dropout_mask import MaskedDropout  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

STEPS, SEQ_LEN, WINDOWS, LR = 4, 16, 2, 1e-2
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.95), 1e-8, 0.1
RANK, ALPHA = 4, 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOLERANCE = 1e-4  # test_oracle.py's fp32 bound (relative; float64 reference)
# The dropout check's Adam epsilon: with 1e-8, Adam moves every element by about ±lr whatever the
# size of its gradient, so a gradient within fp32 rounding of 0 takes either sign on the two sides
# and the adapters part by lr; with 1e-3 the step is smooth in the gradient for small ones.
DROPOUT_EPS = 1e-3


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


def peft_reference(model_dir, weights, initial_a, tokens, mutation=None, modules_to_save=None,
                   use_rslora=False, history=None):
    """PEFT's LoRA trained for STEPS steps: losses, gradient norms and final tensors by zerotrain's
    names (without PEFT's prefix; a modules_to_save copy under its module's tensor name, e.g.
    lm_head.weight), and the model. mutation "scale": alpha/(r+1) for alpha/r; "base": the
    base's q_proj weights train too; "head": the modules_to_save copies without weight decay.
    history (a list): gets, per step, {name: (gradient, AdamW's exp_avg, exp_avg_sq)}."""
    from peft import LoraConfig, get_peft_model
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS,
                        modules_to_save=modules_to_save, use_rslora=use_rslora,
                        task_type="CAUSAL_LM")
    model = get_peft_model(base_model(model_dir, weights), config)
    for module in model.modules():  # the products' scale, the config left as it is
        if mutation == "scale" and isinstance(getattr(module, "scaling", None), dict):
            module.scaling["default"] = ALPHA / (RANK + 1)
    leaked = [p for n, p in model.named_parameters() if "q_proj.base_layer" in n]
    trained, saved = {}, []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        # ...q_proj.lora_A.default.weight; lm_head.modules_to_save.default.weight
        short = name[len(PREFIX):].replace(".default.", ".")
        if ".modules_to_save." in short:
            saved.append(short.replace(".modules_to_save.", "."))
            trained[saved[-1]] = p
            continue
        with torch.no_grad():
            p.copy_(initial_a[short] if ".lora_A." in short else torch.zeros_like(p))
        trained[short] = p
    want = set(initial_a) | {n.replace("lora_A", "lora_B") for n in initial_a}
    check(set(trained) == want | set(saved) and len(saved) == len(modules_to_save or []),
          f"PEFT trains other tensors than zerotrain: {sorted(trained)[:4]}...")
    groups = [{"params": [p for n, p in trained.items() if n not in saved]},
              {"params": [trained[n] for n in saved],
               "weight_decay": 0.0 if mutation == "head" else WEIGHT_DECAY}]
    if mutation == "base":
        for p in leaked:
            p.requires_grad_(True)
        groups.append({"params": leaked})
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS,
                                  weight_decay=WEIGHT_DECAY, foreach=False)
    losses, norms = train_steps(model, trained, optimizer, tokens, history)
    return losses, norms, {n: p.detach().clone() for n, p in trained.items()}, model


def train_steps(model, trained, optimizer, tokens, history=None):
    """STEPS optimizer steps of PEFT's model on the windows ({name: parameter} the trained ones;
    MaskedDropout.step set to each 1-based step): (losses, gradient norms). history, as in
    peft_reference."""
    losses, norms = [], []
    for step in range(1, STEPS + 1):
        MaskedDropout.step = step
        loss = window_loss(model, tokens)
        loss.backward()
        losses.append(loss.item())
        norms.append(torch.sqrt(sum((p.grad ** 2).sum() for p in trained.values())).item())
        base_grads = [n for n, p in model.named_parameters() if not p.requires_grad and
                      p.grad is not None]
        check(not base_grads, f"PEFT computed base gradients: {base_grads[:3]}")
        optimizer.step()
        if history is not None:
            history.append({n: (p.grad.detach().clone(), optimizer.state[p]["exp_avg"].clone(),
                                optimizer.state[p]["exp_avg_sq"].clone())
                            for n, p in trained.items()})
        optimizer.zero_grad(set_to_none=True)
    return losses, norms


def check_dropout(zt, work, source_dir, weights, initial_a):
    """LoRA dropout 0.25 against PEFT whose lora_dropout modules apply the mask docs/lora.md
    describes (one window, so that step s's tokens are [(s−1)·T, s·T) of the data order)."""
    from peft import LoraConfig, get_peft_model
    p, seed = 0.25, 1234
    data = write_byte_windows(work("tok1.h5"), os.path.join(source_dir, "inputs", "data",
                                                            "sample.txt"), 1, SEQ_LEN)
    tokens = torch.from_numpy(data[:SEQ_LEN + 1].astype(np.int64)).reshape(1, -1)
    run_tool(train_args(zt, work, work("dropout"),
                        ["--micro-batch", "1", "--lora-dropout", str(p), "--seed", str(seed)],
                        data=work("tok1.h5"), eps=DROPOUT_EPS))
    with open(work("dropout", "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    losses, norms = [m["loss"] for m in metrics], [m["grad_norm"] for m in metrics]
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=p, target_modules=TARGETS)
    model = get_peft_model(base_model(work("model"), weights), config)
    model.train()
    adapters = {}
    for name, module in model.named_modules():
        if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
            layer = int(name.split(".layers.")[1].split(".")[0])
            target = TARGETS.index(name.rsplit(".", 1)[1])
            module.lora_dropout["default"] = MaskedDropout(layer, target, p, seed)
    for name, prm in model.named_parameters():
        if prm.requires_grad:
            short = name[len(PREFIX):].replace(".default.", ".")
            with torch.no_grad():
                prm.copy_(initial_a[short] if ".lora_A." in short else torch.zeros_like(prm))
            adapters[short] = prm
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=LR, betas=BETAS, eps=DROPOUT_EPS,
                                  weight_decay=WEIGHT_DECAY, foreach=False)
    want, want_norms = [], []
    for step in range(1, STEPS + 1):
        MaskedDropout.step = step
        loss = window_loss(model, tokens)
        loss.backward()
        want.append(loss.item())
        want_norms.append(torch.sqrt(sum((q.grad ** 2).sum() for q in adapters.values())).item())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print("dropout 0.25, zerotrain: " + " ".join(f"{x:.7f}" for x in losses))
    print("dropout 0.25, PEFT:      " + " ".join(f"{x:.7f}" for x in want))
    for step, (g, w, gn, wn) in enumerate(zip(losses, want, norms, want_norms), start=1):
        check(abs(g - w) / abs(w) < TOLERANCE, f"dropout: step {step} loss {g} vs PEFT {w}")
        check(abs(gn - wn) / abs(wn) < TOLERANCE,
              f"dropout: step {step} gradient norm {gn} vs PEFT {wn}")
    final = read_safetensors(work("dropout", "final", "adapter_model.safetensors"))
    worst = max(rel_error(t, adapters[n[len(PREFIX):]].detach()) for n, t in final.items())
    check(worst < TOLERANCE, f"dropout: final adapters differ from PEFT's by {worst:.2e}")
    print(f"dropout 0.25: losses and final adapters (within {worst:.2e}) as PEFT's with the mask")


def run_losses(out):
    """Each step's loss of the run in OUT (its metrics.jsonl)."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def check_loaded_loss(what, loaded, eval_tokens, out):
    """PEFT's loss with an adapter it loaded (`loaded`) on the evaluation's windows against
    zerotrain's end-of-run evaluation in OUT/report.json, within TOLERANCE."""
    with torch.no_grad():
        peft_loss = window_loss(loaded, eval_tokens).item()
    with open(os.path.join(out, "report.json")) as f:
        eval_loss = json.load(f)["eval"]["loss"]
    print(f"{what}PEFT-loaded loss {peft_loss:.7f}, zerotrain eval {eval_loss:.7f}")
    check(abs(peft_loss - eval_loss) / abs(peft_loss) < TOLERANCE,
          f"{what}the adapter's loss in PEFT differs from zerotrain's evaluation")


def rel_error(got, want):
    got, want = got.to(torch.float64), want.to(torch.float64)
    return ((got - want).norm() / max(want.norm().item(), 1e-30)).item()


def train_args(zt, work, out, extra, steps=STEPS, lr=LR, targets=",".join(TARGETS), data=None,
               eps=EPS, save_every=None):
    """train's options; targets None: the adapters come from `extra` (--lora-config); a
    checkpoint every save_every steps (None: at the end)."""
    lora = [] if targets is None else ["--lora-rank", str(RANK), "--lora-alpha", str(ALPHA),
                                       "--lora-targets", targets]
    return [zt, "train", "--backend", "cpu", "--model", work("model"), "--data",
            data or work("tok.h5"),
            "--out", out, "--precision", "fp32", "--steps", str(steps), "--seq-len",
            str(SEQ_LEN), "--lr", str(lr), "--min-lr", str(lr), "--warmup-steps", "0",
            "--clip", "0", "--weight-decay", str(WEIGHT_DECAY), "--beta1", str(BETAS[0]),
            "--beta2", str(BETAS[1]), "--eps", str(eps), "--save-every", str(save_every or steps),
            "--log-every", "0"] + lora + extra


def tiny_model_and_windows(zt, work, source_dir):
    """The tiny preset's model (seed 1234) and the byte windows: (training windows, evaluation
    windows, the model's weights in float64). One token more than the training windows need, so
    that the end-of-run evaluation's windows (apart, SEQ_LEN + 1 tokens each) fit too."""
    run_tool([zt, "init", "--preset", "tiny", "--seed", "1234", "--out", work("model")])
    data = write_byte_windows(work("tok.h5"), os.path.join(source_dir, "inputs", "data",
                                                           "sample.txt"), WINDOWS, SEQ_LEN,
                              extra_tokens=1)
    windows = np.stack([data[w * SEQ_LEN: w * SEQ_LEN + SEQ_LEN + 1] for w in range(WINDOWS)])
    eval_windows = data[:WINDOWS * (SEQ_LEN + 1)].reshape(WINDOWS, SEQ_LEN + 1)
    return (torch.from_numpy(windows.astype(np.int64)),
            torch.from_numpy(eval_windows.astype(np.int64)),
            ref.load_weights(work("model"), torch.float64))


def initial_adapters(zt, work, extra):
    """zerotrain's initial adapters (OUT/final's tensors, PEFT's names): a run whose step cannot
    move an fp32 value of A's size."""
    run_tool(train_args(zt, work, work("init"), ["--micro-batch", "2"] + extra, steps=1,
                        lr=1e-30))
    return read_safetensors(work("init", "final", "adapter_model.safetensors"))


def world_runs(work, mpirun):
    """The runs compared with PEFT: {what: (out directory, options, launcher)}, 1 rank stage 0
    with 2 micro-batches and 2 ranks stage 3."""
    return {"1 rank stage 0": (work("one"), ["--micro-batch", "1", "--grad-accum", "2",
                                             "--eval-batches", "2"], []),
            "2 ranks stage 3": (work("two"), ["--micro-batch", "1", "--zero-stage", "3",
                                              "--eval-batches", "1"],
                                [mpirun, "--oversubscribe", "-n", "2"])}


def check_gradients_per_step(what, out, history):
    """Each step's A/B gradients and Adam moments: the checkpoint of every step holds zerotrain's
    m and v, and m gives the step's gradient back, g_k = (m_k - beta1 m_(k-1)) / (1 - beta1)
    (m_0 = 0); all three against PEFT's gradient and torch AdamW's exp_avg and exp_avg_sq, within
    TOLERANCE relative to each tensor's norm. Returns the worst error."""
    worst, previous_m = 0.0, {}
    for step, want in enumerate(history, start=1):
        step_dir = os.path.join(out, "checkpoints", f"step-{step:08d}")
        m = {n: torch.from_numpy(v) for n, (v, _) in checkpoint_masters(step_dir, "m").items()}
        v = {n: torch.from_numpy(x) for n, (x, _) in checkpoint_masters(step_dir, "v").items()}
        check(set(m) == set(want) and set(v) == set(want),
              f"{what}: step {step}'s checkpoint has moments for {sorted(m)[:3]}..., PEFT trains "
              f"{sorted(want)[:3]}...")
        for name, (grad, exp_avg, exp_avg_sq) in want.items():
            before = previous_m.get(name, torch.zeros_like(m[name]))
            g = (m[name].to(torch.float64) - BETAS[0] * before.to(torch.float64)) / (1 - BETAS[0])
            for kind, got, ref_value in (("gradient", g, grad), ("m", m[name], exp_avg),
                                         ("v", v[name], exp_avg_sq)):
                err = rel_error(got, ref_value)
                check(err < TOLERANCE, f"{what}: step {step} {name} {kind} differs from PEFT's "
                      f"by {err:.2e}")
                worst = max(worst, err)
        previous_m = m
    return worst


class LoraOracle:
    """The check's parts, run in order by run(); each reads what the parts before it left on self
    (the tiny model and its windows, PEFT's reference run, its saved adapter directory)."""

    def __init__(self, args, work):
        self.args, self.work, self.zt = args, work, args.zerotrain
        self.train_args, self.seq_len = train_args, SEQ_LEN

    def run(self):
        self.peft_reference_run()
        if not self.compare_world_runs():
            return  # the mutated reference is compared with the first run only
        self.deepspeed_config()
        self.offload_and_resume()
        self.lora_init_from()
        self.merge()
        self.estimate()
        check_dropout(self.zt, self.work, self.args.source_dir, self.weights, self.initial_a)
        check_lora_refusals(self)

    def compare_world_runs(self):
        """Each world's run (world_runs) against PEFT; False when a mutation ends the test."""
        for what, (out, world_args, launcher) in world_runs(self.work, self.args.mpirun).items():
            final = self.train_like_peft(what, out, world_args, launcher)
            if self.args.mutation:
                return False
            self.check_run_outputs(what, out, final)
        return True

    def peft_reference_run(self):
        """PEFT's run from zerotrain's initial adapters; its adapter config accepted."""
        zt, work, args = self.zt, self.work, self.args
        tokens, eval_tokens, weights = tiny_model_and_windows(zt, work, args.source_dir)
        initial = initial_adapters(zt, work, [])
        initial_a = {n[len(PREFIX):]: t.to(torch.float64) for n, t in initial.items()
                     if ".lora_A." in n}
        check(len(initial_a) == 2 * len(TARGETS), f"{len(initial_a)} lora_A tensors")
        for n, t in initial.items():
            bound = 1 / np.sqrt(t.shape[1])
            check(".lora_B." in n or (t.abs().max() <= bound and t.abs().max() > bound / 2),
                  f"{n} is not Kaiming-uniform with bound {bound}")
            check(".lora_A." in n or t.abs().max() < 1e-25, f"{n} does not start at zero")
        history = []
        want_losses, want_norms, want_final, peft_model = peft_reference(
            work("model"), weights, initial_a, tokens, args.mutation, history=history)
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
        self.tokens, self.eval_tokens, self.weights = tokens, eval_tokens, weights
        self.initial_a, self.history, self.peft_model = initial_a, history, peft_model
        self.want_losses, self.want_norms, self.want_final = want_losses, want_norms, want_final

    def train_like_peft(self, what, out, world_args, launcher):
        """Part 1 and the final adapters of part 2: one run against PEFT."""
        zt, work, history = self.zt, self.work, self.history
        want_losses, want_norms, want_final = self.want_losses, self.want_norms, self.want_final
        run_tool(launcher + train_args(zt, work, out, world_args, save_every=1))
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
        worst = check_gradients_per_step(what, out, history)
        print(f"{what}: every step's A/B gradients, m and v within {worst:.2e} of PEFT's")
        return final

    def check_run_outputs(self, what, out, final):
        """Parts 2 and 3: the checkpoint's base digests, consolidate, PEFT's load."""
        zt, work, weights, eval_tokens = self.zt, self.work, self.weights, self.eval_tokens
        # The base is kept as digests (--checkpoint-frozen auto under LoRA): the rank files
        # hold no base tensor, and the model's tensors digest here to the manifest's.
        last = os.path.join(out, "checkpoints", f"step-{STEPS:08d}")
        stored = [n for n in checkpoint_masters(last) if ".lora_" not in n]
        check(not stored, f"{what}: the checkpoint stores base tensors {stored[:3]}")
        start = ref.load_weights(work("model"), torch.float32)
        kept, changed = frozen_digest_mismatches(last, {n: t.numpy() for n, t in start.items()})
        check(kept > 0 and not changed,
              f"{what}: {kept} frozen groups kept as digests; differing: {changed[:3]}")
        # consolidate keeps the adapters apart from the base: the checkpoint's masters as
        # PEFT's directory, bitwise OUT/final's tensors.
        run_tool([zt, "consolidate", os.path.join(out, "checkpoints", f"step-{STEPS:08d}"),
                  "--out", out + "-consolidated"])
        consolidated = read_safetensors(os.path.join(out + "-consolidated",
                                                     "adapter_model.safetensors"))
        check(set(consolidated) == set(final) and
              all(torch.equal(consolidated[n], final[n]) for n in final),
              f"{what}: the consolidated checkpoint's adapters differ from final/")
        # Another consolidate into the same directory is refused without --overwrite, and
        # the adapter there stays.
        refused([zt, "consolidate", os.path.join(out, "checkpoints", f"step-{STEPS:08d}"),
                 "--out", out + "-consolidated"], "exists and is not empty (use --overwrite)")
        check(os.path.isfile(os.path.join(out + "-consolidated", "adapter_model.safetensors")),
              f"{what}: a refused consolidate removed the adapter already there")
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

    def deepspeed_config(self):
        """Part 5's DeepSpeed JSON."""
        zt, work, args = self.zt, self.work, self.args
        # A DeepSpeed JSON (ZeRO-3, micro-batch 1) with PEFT's own adapter_config.json: the
        # 2-rank stage-3 run above, bitwise.
        with open(work("ds.json"), "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                       "zero_optimization": {"stage": 3}}, f)
        run_tool([args.mpirun, "--oversubscribe", "-n", "2"] +
                 train_args(zt, work, work("from_ds"),
                            ["--deepspeed", work("ds.json"), "--lora-config",
                             work("peft_saved", "adapter_config.json")], targets=None))
        with open(work("from_ds", "metrics.jsonl")) as f:
            ds_losses = [json.loads(line)["loss"] for line in f]
        with open(work("two", "metrics.jsonl")) as f:
            check(ds_losses == [json.loads(line)["loss"] for line in f],
                  f"the DeepSpeed + PEFT config run's losses {ds_losses} differ from the CLI run's")
        print("a DeepSpeed JSON with PEFT's adapter_config.json: the CLI run's losses, bitwise")

    def offload_and_resume(self):
        """Part 4."""
        zt, work, args = self.zt, self.work, self.args
        # A resume continues the adapters bitwise (2 ranks, stage 3, from step 2 of 4).
        two_args = world_runs(work, args.mpirun)["2 ranks stage 3"][1]
        launcher = [args.mpirun, "--oversubscribe", "-n", "2"]

        # CPU optimizer offload from the command line, with the exact overlap forced on (auto is
        # off on the CPU backend): the 2-rank stage-3 run's losses and adapters, bitwise.
        run_tool(launcher + train_args(zt, work, work("offloaded"), two_args + [
            "--offload-optimizer", "cpu", "--offload-optimizer-overlap", "on"]))
        with open(work("offloaded", "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        with open(work("two", "metrics.jsonl")) as f:
            check([m["loss"] for m in lines] == [json.loads(line)["loss"] for line in f],
                  "the offloaded LoRA run's losses differ from the run without offload")
        check(all(m["host_adam"]["speculation"] == "kept" for m in lines),
              f"the offloaded LoRA run did not overlap every step: {[m['host_adam'] for m in lines]}")
        with open(work("two", "final", "adapter_model.safetensors"), "rb") as a, \
                open(work("offloaded", "final", "adapter_model.safetensors"), "rb") as b:
            check(a.read() == b.read(), "the offloaded LoRA run's adapters differ")
        print("CPU optimizer offload with the overlap: losses and adapters bitwise, every step kept")

        run_tool(launcher + train_args(zt, work, work("resumed"), two_args, steps=STEPS // 2))
        run_tool(launcher + train_args(zt, work, work("resumed"), two_args + ["--resume", "auto"]))
        losses = {run: run_losses(work(run)) for run in ("two", "resumed")}
        check(losses["resumed"] == losses["two"],
              f"the resumed run's losses {losses['resumed']} differ from {losses['two']}")
        with open(work("two", "final", "adapter_model.safetensors"), "rb") as a, \
                open(work("resumed", "final", "adapter_model.safetensors"), "rb") as b:
            check(a.read() == b.read(), "the resumed run's adapters differ from the uninterrupted")
        print("resume at step 2: losses and final adapters bitwise the uninterrupted run's")

    def lora_init_from(self):
        """Part 6's --lora-init-from."""
        zt, work, peft_model, tokens = self.zt, self.work, self.peft_model, self.tokens
        # --lora-init-from continues a PEFT adapter: a step too small to move fp32 values gives
        # the adapter back bitwise, and the first loss is PEFT's with those adapters.
        run_tool(train_args(zt, work, work("continued"),
                            ["--micro-batch", "2", "--lora-init-from", work("one", "final")],
                            steps=1, lr=1e-30, targets=None))
        given = read_safetensors(work("one", "final", "adapter_model.safetensors"))
        continued = read_safetensors(work("continued", "final", "adapter_model.safetensors"))
        check(set(given) == set(continued) and
              all(torch.equal(given[n], continued[n]) for n in given),
              "--lora-init-from did not start from the adapter's values")
        with open(work("continued", "metrics.jsonl")) as f:
            first = json.loads(f.readline())["loss"]
        with torch.no_grad():
            want = window_loss(peft_model, tokens).item()
        check(abs(first - want) / want < TOLERANCE,
              f"--lora-init-from: first loss {first} vs PEFT's trained model {want}")
        print(f"--lora-init-from: adapters bitwise, first loss {first:.7f} (PEFT {want:.7f})")

        # PEFT's own directory, save_pretrained of the float64 reference (F64 tensors), and a copy
        # with the tensors saved as F32 (what a float32 model's save holds). Each starts the run from PEFT's
        # values rounded to fp32 once, bitwise, with PEFT's first loss.
        import shutil
        from safetensors.torch import save_file
        shutil.copytree(work("peft_saved"), work("peft_saved_f32"))
        saved = read_safetensors(work("peft_saved", "adapter_model.safetensors"))
        check(all(t.dtype == torch.float64 for t in saved.values()),
              "PEFT's save of the float64 reference is not F64")
        save_file({n: t.to(torch.float32).contiguous() for n, t in saved.items()},
                  work("peft_saved_f32", "adapter_model.safetensors"), metadata={"format": "pt"})
        for peft_dir in ("peft_saved", "peft_saved_f32"):
            out = work("continued_" + peft_dir)
            run_tool(train_args(zt, work, out, ["--micro-batch", "2", "--lora-init-from",
                                                work(peft_dir)], steps=1, lr=1e-30, targets=None))
            continued = read_safetensors(os.path.join(out, "final", "adapter_model.safetensors"))
            check(set(continued) == set(saved) and
                  all(torch.equal(continued[n], saved[n].to(torch.float32)) for n in saved),
                  f"--lora-init-from {peft_dir}: the adapters are not PEFT's rounded to fp32")
            with open(os.path.join(out, "metrics.jsonl")) as f:
                first = json.loads(f.readline())["loss"]
            check(abs(first - want) / want < TOLERANCE,
                  f"--lora-init-from {peft_dir}: first loss {first} vs PEFT's {want}")
            print(f"--lora-init-from PEFT's {peft_dir}: adapters PEFT's in fp32, bitwise; first "
                  f"loss {first:.7f}")

    def merge(self):
        """Part 6's export --merge-lora."""
        zt, work, weights = self.zt, self.work, self.weights
        # export --merge-lora: W + s·B·A as PEFT's merge_and_unload, in bf16, within the rounding
        # both do (merge_bounds); the rest bitwise.
        run_tool([zt, "export", work("model"), "--merge-lora", work("one", "final"), "--out",
                  work("merged")])
        from peft import PeftModel
        unmerged = PeftModel.from_pretrained(base_model(work("model"), weights),
                                             work("one", "final"))
        c = compare_merge(read_merged(work("merged")), unmerged)
        check(not c.unmatched, f"merge: tensors on one side only: {c.unmatched}")
        targeted = sorted(n for n in c.exact if any(f".{t}." in n for t in TARGETS))
        check(c.adapted == targeted, f"PEFT adapts {c.adapted}, not every target")
        check(c.worst <= 1, f"a merged projection is {c.worst:.2f}x its rounding bound from "
              "PEFT's merge")
        check(c.others == 0, f"merge changed a tensor without an adapter by {c.others} bf16 steps")
        print(f"--merge-lora: adapted projections within {c.worst:.2f} of their rounding bound "
              "from PEFT's merge_and_unload, the other tensors bitwise")

    def estimate(self):
        """Part 8."""
        zt = self.zt
        # estimate counts the adapters and shows full fine-tuning beside them: 6b, r 16 on every
        # projection, bf16, one GPU (stage 0: 2 bytes per parameter, 16 more per adapter one).
        est = json.loads(run_tool([zt, "estimate", "--preset", "6b", "--json", "--lora-rank", "16",
                                   "--lora-targets", "all-linear"]))
        c = est["model_config"]
        d, f, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
        kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
        per_layer = 16 * ((d + d) + (d + kv) * 2 + (d + d) + (d + f) * 3)
        adapter_psi = layers * per_layer
        check(est["lora"]["adapter_psi"] == adapter_psi and est["trainable_psi"] == adapter_psi,
              f"estimate: adapter_psi {est['lora']['adapter_psi']}, want {adapter_psi}")
        base_psi = est["psi"] - adapter_psi
        stage0, full0 = est["stages"][0], est["lora"]["full_finetune"][0]
        check(stage0["params"] == 2 * est["psi"] and stage0["grads"] == 4 * adapter_psi and
              stage0["optimizer"] == 12 * adapter_psi, f"6b LoRA stage 0 states: {stage0}")
        check(full0["model_states"] == 18 * base_psi,
              f"6b full fine-tuning stage 0 states {full0['model_states']}, want {18 * base_psi}")
        print(f"estimate 6b LoRA r 16: states {stage0['model_states'] / 2**30:.2f} GiB, full "
              f"fine-tuning {full0['model_states'] / 2**30:.2f} GiB")


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0], ["scale", "base"])
    return exit_status(lambda: LoraOracle(args, work).run(),
                       args.mutation if args.expect_mismatch else None, "1 rank stage 0: step")


if __name__ == "__main__":
    sys.exit(main())
