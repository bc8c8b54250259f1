#!/usr/bin/env python3
"""Hugging Face families against transformers itself (CTest label "oracle").

Runs in the project venv (.venv/, ./run.sh deps): transformers, safetensors and tokenizers pinned
in requirements-hf.txt, over Debian's torch. For one family (--family) with a small random
config, independently of zerotrain's code:

  1. transformers builds the model with a fixed seed, its weights are rounded to bf16 and
     `save_pretrained` writes them as safetensors (sharded with an index when --sharded);
  2. `zerotrain import` reads that directory; `info --verify` passes on the result;
  3. `zerotrain eval` (fp32 compute) on the first K·B windows of a byte dataset equals the loss
     transformers computes on the same windows with the same bf16 weights in fp32;
  4. the gradients of every tensor (zt_oracle_dump, one micro-batch, fp32) equal those
     transformers' autograd computes in float64 on the same weights and windows;
  5. `zerotrain train` at 2 ranks, ZeRO stage 3, from the imported model, then `export`:
     transformers loads the export with `from_pretrained` and its loss equals `zerotrain eval`'s
     on the trained model.

The reference models are built in hf_family_reference.py.

Qwen3 (q/k norms) is newer than the transformers pinned here (the last release that runs on
Debian's torch 1.13). Its reference is transformers' Llama with the same explicit head_dim and a
per-head RMSNorm (Qwen3RMSNorm's arithmetic) on the outputs of q_proj and k_proj, added through
forward hooks: Qwen3's attention is exactly that, since its norms act on each head of the
projection's output before RoPE. The checkpoint is written as a Qwen3 one (model_type "qwen3",
q_norm/k_norm tensors), and the export is read back into the same reference.

SmolLM3 (transformers 4.53 and later, which need a newer torch) is transformers' Llama in which
each layer that SmolLM3's no_rope_layers marks 0 (every fourth) gets the identity rotation, cos 1
and sin 0, in place of the model's (drop_rope): SmolLM3Attention is Llama's attention that skips
apply_rotary_pos_emb on those layers. Its checkpoint is written as a SmolLM3 one (model_type
"smollm3", no_rope_layers), as Qwen3's is.

Phi-3 is transformers' own Phi3ForCausalLM: its checkpoint fuses q/k/v into qkv_proj and gate/up
into gate_up_proj, which zerotrain splits on import and joins on export; transformers' gradients of
the fused tensors are split the same way (split_fused) to compare with zerotrain's.

Bound (both sides run fp32 on the same bf16 weights; they differ only in the order and
association of fp32 sums): the logits pass through 2·L + 2 fp32 contractions of inner length
≤ n = max(D, F, V, H·hd). Rounding errors of an n-term sum behave as a random walk of standard
deviation u·√n (u = 2^-24); allowing 10 of them per contraction, |Δloss| ≤ 10 · u · √n · (2L + 2) ·
max(1, |loss|) ≈ 3e-5 here, against ≈ 1e-7 seen. A gradient passes through the forward's
contractions and the backward's (twice as many): ‖Δg‖/‖g‖ ≤ 10 · u · √n · 3 · (2L + 2) against
the float64 reference. Weights are drawn with std 0.1 so that attention is peaked and positions
matter: a rope_theta off by 2× moves the loss by ≈ 1e-3. Biases are drawn with std 0.1 and q/k
norm weights as 1 + 0.1·N(0, 1), so that a bias or norm left out moves every check.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (CheckFailed, SetupError, check, fp32_model_bound,  # noqa: E402
                            last_json_line, refused, require_venv_modules, run_tool)

h5py, np, torch, transformers = require_venv_modules("h5py", "numpy", "torch", "transformers")
from multimodal_reference import write_multimodal  # noqa: E402
from hf_family_gguf import (check_gemma_gguf, check_glm_gguf, check_granite_gguf,  # noqa: E402
                            check_ministral3_gguf, check_olmo2_gguf, check_smollm3_gguf,
                            check_yarn_gguf, gguf_export_refused)
from olmo3_reference import olmo3_config  # noqa: E402
from glm4_reference import glm_config  # noqa: E402
from ministral3_reference import check_length_refused  # noqa: E402
from hf_families_table import (COMMON, FAMILIES, GLM, GLM4, MINISTRAL3, OLMO3,  # noqa: E402
                               PARTIAL_ROTARY, SMOLLM3_NO_ROPE_LAYERS, TRANSFORMERS_449,
                               WRITTEN_AS)
from hf_family_reference import (build_reference, load_reference,  # noqa: E402
                                 randomize_small_tensors, save_written_as)


def imported_random_llama(zt, work):
    """A small random transformers Llama (COMMON), rounded to bf16 and saved to WORK/hf, then
    imported by zerotrain into WORK/imported. Returns (the model read back in fp32 in eval mode,
    the imported directory)."""
    config_name, model_name, extra = FAMILIES["llama"]
    config = getattr(transformers, config_name)(**COMMON, **extra)
    model = getattr(transformers, model_name)(config)
    randomize_small_tensors(model)
    hf_dir = os.path.join(work, "hf")
    model.to(torch.bfloat16).save_pretrained(hf_dir, safe_serialization=True)
    imported = os.path.join(work, "imported")
    run_tool([zt, "import", hf_dir, "--out", imported])
    return load_reference("llama", config, hf_dir).eval(), imported


def hf_loss(model, tokens, windows, seq_len):
    """Mean next-token cross-entropy over the windows (window w: tokens [w·(T+1), (w+1)·(T+1)),
    as `zerotrain eval` reads them), logits from transformers in fp32, the log-softmax and the
    mean in float64."""
    total, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            start = w * (seq_len + 1)
            chunk = torch.from_numpy(tokens[start: start + seq_len + 1].astype(np.int64))
            # No cache: Gemma 2's HybridCache needs torch._dynamo, which torch 1.13 lacks.
            logits = model(input_ids=chunk[None, :-1], use_cache=False).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            total += -logp.gather(1, chunk[1:, None]).sum().item()
            count += seq_len
    return total / count


def split_fused(grads, config):
    """Phi-3's fused tensors as the separate ones of zerotrain's model directory: qkv_proj's
    rows are q (H·hd), k and v (KV·hd each), as Phi3Attention slices its output; gate_up_proj's
    two halves are gate and up, as Phi3MLP chunks it."""
    hd = config.hidden_size // config.num_attention_heads
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    out = {}
    for name, g in grads.items():
        if name.endswith("self_attn.qkv_proj.weight"):
            stem = name[: -len("qkv_proj.weight")]
            for part, rows in zip(("q", "k", "v"), g.split([q, kv, kv])):
                out[f"{stem}{part}_proj.weight"] = rows
        elif name.endswith("mlp.gate_up_proj.weight"):
            stem = name[: -len("gate_up_proj.weight")]
            gate, up = g.chunk(2)
            out[stem + "gate_proj.weight"], out[stem + "up_proj.weight"] = gate, up
        else:
            out[name] = g
    return out


def hf_gradients(model, tokens, micro_batch, seq_len):
    """d(mean next-token cross-entropy over the first micro_batch windows)/d(parameter), by
    autograd in float64, keyed by the Hugging Face tensor name (Phi-3's fused ones split)."""
    model = model.double()
    model.zero_grad()
    rows = [tokens[w * (seq_len + 1): (w + 1) * (seq_len + 1)].astype(np.int64)
            for w in range(micro_batch)]
    batch = torch.from_numpy(np.stack(rows))
    logits = model(input_ids=batch[:, :-1], use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             batch[:, 1:].reshape(-1))
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    model.float()
    return split_fused(grads, model.config)


def logits_to_keep_key():
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "logits_to_keep" if (major, minor) >= (4, 49) else "num_logits_to_keep"


def scores_along(model, prompt_ids, chosen):
    """transformers' scores at each step of a generation that continues with the tokens `chosen`
    (zerotrain's): GenerationMixin's loop (prepare_inputs_for_generation, the forward,
    _update_model_kwargs_for_generation) run here, as generate() itself does not start on
    Debian's torch 1.13 with Python 3.11, fed zerotrain's token at each step, so that a near tie
    that went the other way does not part the two contexts for the steps after it. Phi-3's
    prepare_inputs_for_generation drops the cache where longrope switches to the long factors.
    Gemma 2's generation needs its HybridCache, which torch 1.13 cannot build (torch._dynamo):
    each step runs the whole sequence instead, the same scores as a cache would give."""
    from transformers import DynamicCache
    ids = torch.tensor([prompt_ids])
    if model.config.model_type == "gemma2":
        scores = []
        with torch.no_grad():
            for token in chosen:
                scores.append(model(input_ids=ids, use_cache=False).logits[0, -1].double())
                ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        return scores
    kwargs = {"attention_mask": torch.ones_like(ids), "use_cache": True,
              "past_key_values": DynamicCache(), "cache_position": torch.arange(len(prompt_ids))}
    # as generate() sets it where the forward takes it (Phi-3; renamed in transformers 4.49; 4.46's
    # Granite has none)
    import inspect
    if logits_to_keep_key() in inspect.signature(model.forward).parameters:
        kwargs[logits_to_keep_key()] = 1
    scores = []
    with torch.no_grad():
        for token in chosen:
            inputs = model.prepare_inputs_for_generation(ids, **kwargs)
            out = model(**inputs, return_dict=True)
            scores.append(out.logits[0, -1].double())
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
            kwargs = model._update_model_kwargs_for_generation(out, kwargs)
    return scores


def check_generate(zt, imported, model, tokens, family, original):
    """Greedy generate across longrope's original length against transformers' generate, which
    rotates each forward with the factors of its key/value length (the prompt's forward, then
    each new token's with the cache before it), and past a sliding window (every position from
    the prompt's on sees 12 keys): every new token is the largest of transformers' scores at its
    step, given the same tokens before it (scores_along), within 1e-4 of the row's largest
    magnitude."""
    prompt_ids = [int(t) for t in tokens[:24]]
    check(all(0 < t < 128 for t in prompt_ids), "the prompt is ASCII")
    new_count = 2 * original + 8 - len(prompt_ids)  # past the original length either way
    out = run_tool([zt, "generate", "--model", imported, "--prompt", bytes(prompt_ids).decode(),
                    "--tokenizer", "byte", "--json", "--ignore-eos", "--max-new-tokens",
                    str(new_count)])
    generated = last_json_line(out)
    check(generated["prompt_tokens"] == prompt_ids, "generate encoded another prompt")
    new = generated["new_tokens"]
    check(len(new) == new_count, f"{len(new)} new tokens")
    # transformers 4.49 drops the cache at the crossing but passes the forward a one-token
    # cache_position, from which its eager attention (the one torch 1.13 gets) builds every
    # query's mask: that forward's last row is right, the cache it leaves is not. The families
    # run with 4.49 are compared through the crossing forward; the steps after it are compared
    # with 4.46 in oracle_hf_phi3_longrope, and past the original length throughout in
    # oracle_hf_phi4_mini_longrope_long.
    if family in PARTIAL_ROTARY and len(prompt_ids) <= original:
        new = new[:original + 2 - len(prompt_ids)]
    scores = scores_along(model, prompt_ids, new)
    worst = 0.0
    for i, token in enumerate(new):
        row = scores[i]
        gap = (row.max() - row[token]).item() / max(1.0, row.abs().max().item())
        worst = max(worst, gap)
        check(gap <= 1e-4, f"generate: new token {i} (position {len(prompt_ids) + i}) is {token}, "
              f"transformers' largest score is {row.argmax().item()}, {gap:.2e} above it")
    print(f"{family} generate: {len(new)} tokens from position {len(prompt_ids)}, past "
          f"original {original}, each transformers' largest score (worst gap {worst:.1e})",
          flush=True)


def check_yarn_past_max_positions(zt, imported, data, model, tokens, config, n):
    """yarn's model takes sequences up to ⌊factor · original_max_position_embeddings⌋ (Qwen's
    setting leaves max_position_embeddings at the original length): a window 32 positions past
    max_position_embeddings evaluates as transformers computes it, and one past the scaled length
    is refused naming it."""
    scaling = config.rope_scaling
    longest = int(scaling["factor"] * scaling["original_max_position_embeddings"])
    seq_len = config.max_position_embeddings + 32
    check(seq_len <= longest, f"the test's window {seq_len} is past the scaled length {longest}")
    command = [zt, "eval", "--model", imported, "--data", data, "--batches", "1",
               "--micro-batch", "1", "--precision", "fp32", "--seq-len"]
    got = last_json_line(run_tool(command + [str(seq_len)]))["loss"]
    want = hf_loss(model, tokens, [0], seq_len)
    bound = fp32_model_bound(max(n, seq_len), config.num_hidden_layers, want)
    print(f"yarn at {seq_len} positions (max_position_embeddings {config.max_position_embeddings}):"
          f" zerotrain {got:.9f} transformers {want:.9f} |diff| {abs(got - want):.3e} "
          f"bound {bound:.3e}", flush=True)
    check(abs(got - want) <= bound, f"yarn past max_position_embeddings: |{got} - {want}| > "
          f"{bound}")
    refused(command + [str(longest + 1)],
            f"exceeds yarn's factor × original_max_position_embeddings, {longest}")


def parse_arguments():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--dump", required=True, help="zt_oracle_dump binary")
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--family", required=True, choices=sorted(FAMILIES))
    p.add_argument("--sharded", action="store_true", help="save the HF model in several files")
    p.add_argument("--multimodal", choices=("language_model.model", "model.language_model"),
                   help="gemma3 and mistral families: import the model as a "
                        "Gemma3ForConditionalGeneration or Mistral3ForConditionalGeneration "
                        "checkpoint holds its text model, under this prefix (transformers 4.50's, "
                        "4.52's)")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--break-config", metavar="KEY=VALUE", action="append",
                   help="change a config.json key after saving (repeatable), so that zerotrain "
                        "imports another model than transformers runs: the imported loss must "
                        "then differ beyond the bound (exit 0 when it does, 1 when it does not)")
    return p.parse_args()


class FamilyOracle:
    """One family's checks, in order (run()): its checkpoint saved by transformers and imported,
    the loss and gradients compared, the family's own checks, then a 2-rank stage-3 run exported
    and read back by transformers (and GGUF where the family has it)."""

    def __init__(self, args):
        self.args, self.zt, self.family = args, args.zerotrain, args.family
        self.work = args.work_dir
        self.seq_len, self.micro_batch, self.batches = 32, 2, 2
        self.windows = list(range(self.micro_batch * self.batches))

    def run(self):
        self.save_checkpoint()
        self.import_checkpoint()
        imported_zt, imported_hf = self.zt_eval(self.imported), self.hf_loss(self.model)
        if self.args.break_config:  # the loss, then the gradients, must see the change
            return self.check_broken_config(imported_zt, imported_hf)
        self.compare("imported loss", imported_zt, imported_hf)
        self.compare_gradients()
        self.check_family_extras()
        self.train_and_export()
        self.check_export_gguf()
        return 0

    def save_checkpoint(self):
        """transformers builds the family's model and saves it (bf16) under work/hf; the reference
        reads it back. With --break-config, config.json is changed after saving."""
        args, work = self.args, self.work
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        if args.family in TRANSFORMERS_449 and logits_to_keep_key() != "logits_to_keep":
            raise SetupError(f"{args.family} needs transformers 4.49 (its Phi3 applies "
                             "partial_rotary_factor; it has Olmo2), found "
                             f"{transformers.__version__}: "
                             "put .venv/transformers-4.49 (./run.sh deps) first on PYTHONPATH")
        config_name, model_name, extra = FAMILIES[args.family]
        config = (olmo3_config if args.family in OLMO3 else glm_config if args.family in GLM
                  else getattr(transformers, config_name))(**{**COMMON, **extra})
        model = build_reference(args.family, config)
        randomize_small_tensors(model)
        model = model.to(torch.bfloat16)
        hf_dir = os.path.join(work, "hf")
        if args.family in WRITTEN_AS:
            save_written_as(args.family, model, config, hf_dir)
        else:
            model.save_pretrained(hf_dir, safe_serialization=True,
                                  max_shard_size="100KB" if args.sharded else "10GB")
        if args.sharded:
            check(os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")),
                  "save_pretrained wrote no index for --sharded")
        # The reference reads the saved files back in fp32 (the bf16 weights, exactly): the model
        # object itself would keep its rotary inv_freq buffer rounded to bf16 by .to(bfloat16).
        model = load_reference(args.family, config, hf_dir).eval()
        if args.break_config:
            path = os.path.join(hf_dir, "config.json")
            with open(path) as f:
                saved = json.load(f)
            for change in args.break_config:
                key, value = change.split("=", 1)
                saved[key] = json.loads(value)
            with open(path, "w") as f:
                json.dump(saved, f)

        self.config, self.extra, self.model, self.hf_dir = config, extra, model, hf_dir

    def import_checkpoint(self):
        """The byte dataset, and `zerotrain import` of the checkpoint (inside a multimodal one
        with --multimodal), verified."""
        args, zt, work, hf_dir, config, extra = (self.args, self.zt, self.work, self.hf_dir,
                                                 self.config, self.extra)
        data = os.path.join(work, "data.h5")
        run_tool([zt, "prepare-data", "--text",
                  os.path.join(args.source_dir, "inputs/data/sample.txt"), "--out", data])
        with h5py.File(data, "r") as f:
            tokens = f["/tokens"][:]

        imported = os.path.join(work, "imported")
        source = hf_dir
        if args.multimodal:  # the same text model inside a multimodal checkpoint
            source = os.path.join(work, "hf-multimodal")
            # The 4.52 naming with a tied head stored anyway (a re-save's), which import ignores.
            write_multimodal(hf_dir, source, args.multimodal + ".",
                             "mistral3" if args.family.startswith(("mistral", "ministral"))
                             else "gemma3",
                             store_tied_head=args.multimodal == "model.language_model")
        run_tool([zt, "import", source, "--out", imported])
        run_tool([zt, "info", "--verify", imported])
        D, F, V, L = (COMMON["hidden_size"], COMMON["intermediate_size"], COMMON["vocab_size"],
                      config.num_hidden_layers)
        n = max(D, F, V, COMMON["num_attention_heads"] * extra.get("head_dim", 0))
        self.data, self.tokens, self.imported, self.n, self.L = data, tokens, imported, n, L

    def hf_loss(self, model):
        """transformers' loss of `model` on the windows zt_eval reads."""
        return hf_loss(model, self.tokens, self.windows, self.seq_len)

    def zt_eval(self, model_dir):
        out = run_tool([self.zt, "eval", "--model", model_dir, "--data", self.data, "--batches",
                        str(self.batches), "--micro-batch", str(self.micro_batch), "--seq-len",
                        str(self.seq_len), "--precision", "fp32"])
        return last_json_line(out)["loss"]

    def compare(self, what, zt_value, hf_value):
        bound = fp32_model_bound(self.n, self.L, hf_value)
        diff = abs(zt_value - hf_value)
        print(f"{self.family} {what}: zerotrain {zt_value:.9f} transformers {hf_value:.9f} "
              f"|diff| {diff:.3e} bound {bound:.3e}", flush=True)
        check(diff <= bound, f"{what}: |{zt_value} - {hf_value}| = {diff} > {bound}")

    def compare_gradients(self):
        """The gradients of one micro-batch of the imported model, tensor by tensor."""
        args, work, imported, data, model, tokens = (self.args, self.work, self.imported,
                                                     self.data, self.model, self.tokens)
        micro_batch, seq_len, n, L = self.micro_batch, self.seq_len, self.n, self.L
        dump = os.path.join(work, "dump.h5")
        run_tool([args.dump, "--model", imported, "--tokens", data, "--out", dump, "--precision",
                  "fp32", "--micro-batch", str(micro_batch), "--seq-len", str(seq_len),
                  "--steps", "1"])
        reference = hf_gradients(model, tokens, micro_batch, seq_len)
        grad_bound = 3 * fp32_model_bound(n, L)
        worst = (0.0, "")
        with h5py.File(dump, "r") as f:
            dumped = sorted(f["grad"].keys())
            check(dumped == sorted(reference), f"zerotrain's tensors {dumped} differ from the "
                  f"reference's {sorted(reference)}")
            for name, want in reference.items():
                got = torch.from_numpy(f["grad/" + name][()]).double()
                check(tuple(got.shape) == tuple(want.shape),
                      f"grad {name}: shape {tuple(got.shape)} vs {tuple(want.shape)}")
                error = ((got - want).norm() / want.norm()).item()
                worst = max(worst, (error, name))
                check(error <= grad_bound,
                      f"grad {name}: ‖Δ‖/‖ref‖ = {error:.3e} > {grad_bound:.3e}")
        print(f"{args.family} gradients: {len(reference)} tensors, worst ‖Δ‖/‖ref‖ "
              f"{worst[0]:.3e} ({worst[1]}), bound {grad_bound:.3e}", flush=True)

    def check_broken_config(self, imported_zt, imported_hf):
        """With --break-config: exit 0 when the loss or the gradients see the change."""
        args, compare, compare_gradients = self.args, self.compare, self.compare_gradients
        for what, comparison in (("loss", lambda: compare("imported loss", imported_zt,
                                                          imported_hf)),
                                 ("gradients", compare_gradients)):
            try:
                comparison()
            except CheckFailed as e:
                print(f"with {args.break_config} the {what} comparison fails, as it must: {e}")
                return 0
        raise CheckFailed(f"with {args.break_config} the losses and gradients still agree: the "
                          "comparison cannot see that key")

    def check_family_extras(self):
        """YaRN past the original positions, Ministral 3's length refusal, generate."""
        args, zt, imported, data, model, tokens, config, n, extra = (
            self.args, self.zt, self.imported, self.data, self.model, self.tokens, self.config,
            self.n, self.extra)
        if "yarn" in args.family:
            check_yarn_past_max_positions(zt, imported, data, model, tokens, config, n)
        if args.family in MINISTRAL3:
            check_length_refused(zt, imported, data, config.max_position_embeddings)
        if "longrope" in args.family or "window" in args.family or args.family in (
                "smollm3", "gemma", "gemma2", "gemma3", "gemma3-linear", "olmo2", "granite") or (
                args.family in OLMO3 | GLM):
            check_generate(zt, imported, model, tokens, args.family,
                           extra.get("original_max_position_embeddings", 16))

    def train_and_export(self):
        """A 2-rank stage-3 run from the import, exported; transformers reads the export back
        (the reference for Qwen3) and its loss is zerotrain's."""
        args, zt, work, imported, data, seq_len, hf_dir, config = (
            self.args, self.zt, self.work, self.imported, self.data, self.seq_len, self.hf_dir,
            self.config)
        compare, zt_eval = self.compare, self.zt_eval
        # Train from the import at 2 ranks, stage 3, export, and let transformers read the export.
        run = os.path.join(work, "run")
        run_tool([args.mpirun, "-n", "2", zt, "train", "--model", imported, "--data", data, "--out",
                  run, "--steps", "3", "--micro-batch", "2", "--seq-len", str(seq_len),
                  "--zero-stage", "3", "--lr", "1e-3", "--warmup-steps", "0", "--seed", "7",
                  "--eval-batches", "0", "--comm-timeout", "60"])
        final = os.path.join(run, "final")
        exported = os.path.join(work, "exported")
        run_tool([zt, "export", final, "--format", "safetensors", "--out", exported])
        # The export is written as its family: transformers reads it back (the reference for Qwen3).
        with open(os.path.join(exported, "config.json")) as f:
            exported_type = json.load(f)["model_type"]
        with open(os.path.join(hf_dir, "config.json")) as f:
            imported_type = json.load(f).get("model_type")
        # A Mistral without a window is a Llama: zerotrain writes it as one.
        check(exported_type == imported_type or
              (imported_type, exported_type) == ("mistral", "llama"),
              f"the export's model_type {exported_type} is not the checkpoint's {imported_type}")
        reloaded = load_reference(args.family, config, exported)
        print(f"the export ({exported_type}) loads as {type(reloaded).__name__}", flush=True)
        trained_hf = self.hf_loss(reloaded.eval())
        compare("trained loss", zt_eval(final), trained_hf)
        self.final, self.exported = final, exported

    def check_export_gguf(self):
        """The family's GGUF export read back (or its refusal)."""
        args, zt, work, final, exported, config = (self.args, self.zt, self.work, self.final,
                                                   self.exported, self.config)
        if args.family in ("qwen2-yarn", "llama-yarn-extended"):
            check_yarn_gguf(zt, work, final, exported, config)
        if args.family == "smollm3":
            check_smollm3_gguf(zt, work, final, exported, args.source_dir, config,
                               SMOLLM3_NO_ROPE_LAYERS)
        if args.family.startswith("olmo2"):
            check_olmo2_gguf(zt, work, final, exported, config)
        if args.family in OLMO3:
            gguf_export_refused(zt, work, final,
                                "is an OLMo 3, which zerotrain does not write to GGUF", "an OLMo 3")
        if args.family in MINISTRAL3:
            check_ministral3_gguf(zt, work, final, exported, args.source_dir, config)
        if args.family in GLM4:
            check_glm_gguf(zt, work, final, exported, config)
        elif args.family in GLM:  # GlmForCausalLM
            gguf_export_refused(zt, work, final, "which llama.cpp reads as its chatglm",
                                "a GlmForCausalLM")
        if args.family.startswith("granite"):
            check_granite_gguf(zt, work, final, exported, args.source_dir, config)
        if args.family in ("gemma", "gemma2", "gemma3"):
            check_gemma_gguf(zt, work, final, exported, args.source_dir, config,
                             "gemma3" if args.family == "gemma3" else config.model_type)


def main():
    args = parse_arguments()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    return FamilyOracle(args).run()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as e:
        print(f"SETUP ERROR: {e}", file=sys.stderr)
        sys.exit(2)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
