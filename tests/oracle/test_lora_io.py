#!/usr/bin/env python3
"""LoRA's files in and out, against Hugging Face PEFT and transformers (label oracle).

The tiny preset, r 4 on all seven projections and lm_head trained in full (`--trainable
lm_head`, PEFT's modules_to_save), fp32, test_lora.py's STEPS AdamW steps on 2 windows at 1 rank
stage 0:
1. OUT/final's adapter_config.json lists lm_head in modules_to_save, and its weights hold
   base_model.model.lm_head.weight. PEFT's get_peft_model with modules_to_save=["lm_head"], from
   the same base and initial A, trained with AdamW over the adapters and its copy of lm_head,
   gives each step's loss and gradient norm and the final tensors within test_lora.py's bound;
   PeftModel.from_pretrained(base, OUT/final) gives zerotrain's end-of-run evaluation loss.
   The same without lm_head and with --use-rslora (scale alpha/sqrt(r)) against PEFT's
   use_rslora=True.
2. --lora-init-from OUT/final trains lm_head again: a step too small to move an fp32 value gives
   it back bitwise, and a real step moves it.
3. `export CHECKPOINT --format peft` writes OUT/final's tensors bitwise and its modules_to_save,
   and PEFT loads it. Refused naming what was given: a PEFT adapter directory, a model directory,
   the checkpoint of a run without adapters, --merge-lora beside it; `export CHECKPOINT` in
   another format points to consolidate; a modules_to_save name that would train a layer's norms.
   The checkpoint keeps the frozen base as digests: a resume with another base model is refused,
   so is one in fp16 (the base rounds to other values; the message names both precisions), and
   so is consolidating a run without adapters saved with --checkpoint-frozen digest.
4. `export --merge-lora`: the merged directory holds exactly the base's tensor names, each within
   the rounding both do of PEFT's merge_and_unload rounded to bf16 (merge_bounds), its
   lm_head the adapter's rounded; transformers' from_pretrained on it gives
   exactly the loss of its tensors in the base's configuration (its config.json), and PEFT's
   loss with the adapter unmerged within twice the first-order effect of one bf16 step on every
   weight, 2 * sum |dL/dW| ulp_bf16(W) (float64, the gradient at PEFT's exact merge).

5. `eval --adapter OUT/final` (fp32) gives PeftModel.from_pretrained(base, OUT/final)'s loss on
   the same windows within test_lora.py's bound, and at 2 ranks 1 rank's loss bitwise;
   `generate --adapter OUT/final` (merged in fp32) picks, at every new position, the token with
   PEFT's largest logit, or one within that bound of the logits' scale of it (a near tie).
   Refused naming the directory: an --adapter that is no directory, and a PEFT adapter directory
   given as --model.
6. Adapters PEFT initialised and saved itself: with init_lora_weights="gaussian" (B then given
   values; its target_modules a regular expression, as Unsloth saves them) eval --adapter gives
   PEFT's loss and --lora-init-from trains from it, while
   --lora-config refuses it (zerotrain initialises as PEFT's default); a PiSSA adapter, whose
   initialisation moved part of the base model into it, is refused naming the key. `info` of
   the gaussian one gives the rank, alpha, targets, base model and tensor count PEFT wrote.

--mutation head: the PEFT reference trains lm_head without weight decay; --mutation merge: the
merge check is given the base for the merged model; --mutation eval (generate): eval (generate)
runs without --adapter. With --expect-mismatch each must fail its comparison (the losses against
PEFT's; the merged loss against PEFT's unmerged one; eval's loss, generate's tokens against
PEFT's), and only it.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, exit_status, last_json_line,  # noqa: E402
                            lora_oracle_arguments, refused, run_tool)
import torch  # noqa: E402
from lora_merge_reference import PREFIX, compare_merge, read_merged, ulp_bf16  # noqa: E402
from test_lora import (LR, RANK, STEPS, TOLERANCE, base_model,  # noqa: E402
                       initial_adapters, peft_reference, read_safetensors, rel_error,
                       tiny_model_and_windows, train_args, window_loss)

HEAD = "lm_head.weight"


def check_training(run, want_losses, want_norms, want_final, modules_to_save):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    check(len(metrics) == STEPS, f"{len(metrics)} metrics lines")
    for key, want in (("loss", want_losses), ("grad_norm", want_norms)):
        got = [m[key] for m in metrics]
        print(f"{key}: zerotrain " + " ".join(f"{x:.7f}" for x in got) + ", PEFT " +
              " ".join(f"{x:.7f}" for x in want))
        for step, (g, w) in enumerate(zip(got, want), start=1):
            check(abs(g - w) / abs(w) < TOLERANCE, f"step {step} {key} {g} vs PEFT {w}")
    with open(os.path.join(run, "final", "adapter_config.json")) as f:
        saved = json.load(f)["modules_to_save"]
    check(saved == modules_to_save, f"adapter_config.json's modules_to_save is {saved}")
    final = read_safetensors(os.path.join(run, "final", "adapter_model.safetensors"))
    check({n[len(PREFIX):] for n in final} == set(want_final), f"final/ holds {sorted(final)[:3]}")
    worst = max(rel_error(t, want_final[n[len(PREFIX):]]) for n, t in final.items())
    check(worst < TOLERANCE, f"the final tensors differ from PEFT's by {worst:.2e}")
    print(f"{os.path.basename(run)}: losses, gradient norms and final tensors within {worst:.2e} "
          "of PEFT's")
    return final


def peft_loss(work, weights, adapter_dir, tokens):
    from peft import PeftModel
    loaded = PeftModel.from_pretrained(base_model(work("model"), weights),
                                       adapter_dir).to(torch.float64)
    with torch.no_grad():
        return window_loss(loaded, tokens).item()


def check_init_from(zt, work, final):
    given = final[PREFIX + HEAD]
    for out, lr, moved in (("still", 1e-30, False), ("moved", LR, True)):
        run_tool(train_args(zt, work, work(out), ["--micro-batch", "2", "--lora-init-from",
                                                  work("run", "final")], steps=1, lr=lr,
                            targets=None))
        head = read_safetensors(work(out, "final", "adapter_model.safetensors"))[PREFIX + HEAD]
        check(torch.equal(head, given) != moved,
              f"--lora-init-from at lr {lr}: lm_head {'stayed' if not moved else 'moved'}"
              " where it should not")
    print("--lora-init-from: lm_head starts bitwise from the adapter's and trains again")


def check_export_peft(zt, work, weights, final, eval_tokens, eval_loss):
    step = work("run", "checkpoints", f"step-{STEPS:08d}")
    run_tool([zt, "export", step, "--format", "peft", "--out", work("exported")])
    exported = read_safetensors(work("exported", "adapter_model.safetensors"))
    check(set(exported) == set(final) and all(torch.equal(exported[n], final[n]) for n in final),
          "export --format peft's tensors differ from OUT/final's")
    with open(work("exported", "adapter_config.json")) as f:
        check(json.load(f)["modules_to_save"] == ["lm_head"], "export --format peft's config")
    loss = peft_loss(work, weights, work("exported"), eval_tokens)
    check(abs(loss - eval_loss) / abs(loss) < TOLERANCE,
          f"PEFT's loss with the exported adapter {loss} vs zerotrain's {eval_loss}")
    print(f"export --format peft: OUT/final's tensors bitwise; PEFT's loss {loss:.7f}")
    bad = work("bad")
    run_tool(train_args(zt, work, work("plain"), ["--micro-batch", "2"], steps=1, targets=None))
    for model, extra, says in (
            (work("run", "final"), [], "is already PEFT's adapter directory"),
            (work("model"), [], "is a model directory"),
            (work("plain", "checkpoints", "step-00000001"), [], "of a run without LoRA adapters"),
            (step, ["--merge-lora", work("run", "final")], "give one")):
        refused([zt, "export", model, "--format", "peft", "--out", bad] + extra, says)
    refused([zt, "export", step, "--out", bad], "is a training checkpoint: `zerotrain consolidate`")
    # The checkpoint keeps the frozen base as digests (--checkpoint-frozen auto under LoRA): a
    # resume on another base is refused naming a group; a run without adapters that keeps them so
    # (--checkpoint-frozen digest) has no whole model to consolidate.
    run_tool([zt, "init", "--preset", "tiny", "--seed", "99", "--out", work("other_base")])
    other = train_args(zt, work, bad, ["--micro-batch", "1", "--grad-accum", "2", "--trainable",
                                       "lm_head", "--resume", step], steps=STEPS + 1)
    other[other.index("--model") + 1] = work("other_base")
    refused(other, "as their digest splitmix64-sum:")
    # The right base in fp16, which does not hold some of its small bf16 values: refused, naming
    # the precisions. (In bf16, which holds them all, the resume loads the same base and runs.)
    other[other.index("--model") + 1] = work("model")
    other[other.index("--precision") + 1] = "fp16"
    refused(other, "this run computes in fp16, the checkpoint in fp32, in which the same base")
    other[other.index("--precision") + 1] = "bf16"
    other[other.index("--out") + 1] = work("bf16_resumed")
    run_tool(other)
    run_tool(train_args(zt, work, work("digest"), ["--micro-batch", "2", "--trainable", "lm_head",
                                                   "--checkpoint-frozen", "digest"],
                        steps=1, targets=None))
    refused([zt, "consolidate", work("digest", "checkpoints", "step-00000001"), "--out", bad],
            "keeps its frozen tensors as digests, not values")
    with open(work("norm.json"), "w") as f:
        json.dump({"r": RANK, "target_modules": ["q_proj"], "modules_to_save": ["norm"]}, f)
    refused(train_args(zt, work, bad, ["--lora-config", work("norm.json")], targets=None),
            "norm.json: modules_to_save names 'norm', which selects model.layers.0.input_layernorm")


def check_merge(zt, work, weights, final, eval_tokens, mutation):
    """The merged directory: its tensors against PEFT's merge_and_unload, its config.json through
    transformers' from_pretrained, and its loss against PEFT's unmerged model."""
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    run_tool([zt, "export", work("model"), "--merge-lora", work("run", "final"), "--out",
              work("merged")])
    merged = read_merged(work("merged"))
    check(set(merged) == set(weights), f"merged tensors {sorted(set(merged) ^ set(weights))}")
    check(torch.equal(merged[HEAD], final[PREFIX + HEAD].to(torch.bfloat16)),
          "the merged lm_head is not the adapter's")
    unmerged = PeftModel.from_pretrained(base_model(work("model"), weights),
                                         work("run", "final")).to(torch.float64)
    with torch.no_grad():
        want = window_loss(unmerged, eval_tokens).item()
    c = compare_merge(merged, unmerged)
    check(not c.unmatched, f"the merged model's tensors are not PEFT's: {c.unmatched}")
    check(c.worst <= 1, f"a merged tensor is {c.worst:.2f}x its rounding bound from PEFT's merge")
    check(c.others == 0, "merge: a tensor without an adapter (the base's, or the trained "
          "lm_head) differs from PEFT's")
    model = base_model(work("model"), c.exact)
    for p in model.parameters():
        p.requires_grad_(True)
    window_loss(model, eval_tokens).backward()
    bound = 2 * sum((p.grad.abs() * ulp_bf16(p.detach())).sum().item()
                    for p in model.parameters())
    loaded = LlamaForCausalLM.from_pretrained(work("merged"), torch_dtype=torch.float64).eval()
    same = base_model(work("model"), {n: t.to(torch.float64) for n, t in merged.items()})
    if mutation == "merge":  # the base in place of the merge, on both sides
        loaded = same = base_model(work("model"), weights)
    with torch.no_grad():
        got, direct = window_loss(loaded, eval_tokens).item(), window_loss(same, eval_tokens).item()
    print(f"merged model in transformers: loss {got:.12f} (its tensors in the base's config: "
          f"{direct:.12f}); PEFT unmerged {want:.9f}, |diff| {abs(got - want):.2e}, bound "
          f"{bound:.2e}; the adapted tensors within {c.worst:.2f} of their rounding bound from "
          "PEFT's merge, the rest bitwise")
    check(got == direct, "from_pretrained of the merged directory is not its tensors in the "
          "base model's config (config.json)")
    check(abs(got - want) <= bound, f"the merged model's loss {got} is beyond {bound} of {want}")


def eval_command(zt, work, eval_tokens):
    """`zerotrain eval` of the base model on the evaluation windows, as one batch."""
    windows, seq_len = eval_tokens.shape[0], eval_tokens.shape[1] - 1
    return [zt, "eval", "--model", work("model"), "--data", work("tok.h5"), "--batches", "1",
            "--micro-batch", str(windows), "--seq-len", str(seq_len)]


def check_generated(zt, model_dir, adapter_dir, peft, with_adapter=True):
    """`generate --adapter adapter_dir` (without it, with_adapter False) picks at every new
    position the token with the largest logit of `peft` (a float64 PeftModel), or one within
    TOLERANCE of the logits' scale of it (a near tie)."""
    generate = [zt, "generate", "--model", model_dir, "--prompt", "The ", "--tokenizer", "byte",
                "--json", "--ignore-eos", "--max-new-tokens", "24"]
    generated = last_json_line(run_tool(generate + (["--adapter", adapter_dir] if with_adapter
                                                    else [])))
    prompt, new = generated["prompt_tokens"], generated["new_tokens"]
    with torch.no_grad():
        logits = peft(input_ids=torch.tensor([prompt + new])).logits[0]
    worst_gap = 0.0
    for i, token in enumerate(new):
        row = logits[len(prompt) - 1 + i]
        gap = (row.max() - row[token]).item()
        worst_gap = max(worst_gap, gap)
        check(gap <= TOLERANCE * row.abs().max().item(),
              f"generate --adapter's token {i} is {token}, PEFT's largest logit is token "
              f"{row.argmax().item()}, {gap:.3e} above it")
    print(f"generate --adapter: {len(new)} tokens, each PEFT's largest logit (worst gap "
          f"{worst_gap:.1e}): {bytes(new)!r}")


def check_adapter_commands(zt, mpirun, work, weights, eval_tokens, mutation):
    """eval and generate with --adapter OUT/final against PEFT's unmerged model (float64)."""
    from peft import PeftModel
    adapter = ["--adapter", work("run", "final")]
    windows, seq_len = eval_tokens.shape[0], eval_tokens.shape[1] - 1
    got = last_json_line(run_tool(eval_command(zt, work, eval_tokens) +
                                  (adapter if mutation != "eval" else [])))["loss"]
    want = peft_loss(work, weights, work("run", "final"), eval_tokens)
    print(f"eval --adapter: loss {got:.9f}, PEFT's {want:.9f}")
    check(abs(got - want) / abs(want) < TOLERANCE, f"eval --adapter's loss {got} vs PEFT's {want}")
    # Each rank opens the adapter and scores its batches: the loss of every world size is one's.
    one_window = ["eval", "--model", work("model"), "--data", work("tok.h5"), "--batches",
                  str(windows), "--micro-batch", "1", "--seq-len", str(seq_len)] + adapter
    alone = last_json_line(run_tool([zt] + one_window))["loss"]
    ranks = last_json_line(run_tool([mpirun, "-n", "2", zt] + one_window))["loss"]
    check(ranks == alone, f"eval --adapter at 2 ranks: loss {ranks}, at 1 rank {alone}")
    peft = PeftModel.from_pretrained(base_model(work("model"), weights),
                                     work("run", "final")).to(torch.float64)
    check_generated(zt, work("model"), work("run", "final"), peft, mutation != "generate")
    refused([zt, "eval", "--model", work("model"), "--adapter", work("absent"), "--data",
             work("tok.h5")], "zerotrain eval: error: --adapter '" + work("absent") + "' is not a directory")
    refused([zt, "generate", "--model", work("run", "final"), "--prompt", "x", "--tokenizer",
             "byte"], "has no config.json: it holds a PEFT adapter (adapter_config.json)")


def check_peft_initialisations(zt, work, weights, eval_tokens):
    """Adapters PEFT made and saved itself: one initialised with init_lora_weights="gaussian"
    (the base kept; B given values, as training would) evaluates with PEFT's loss, and trains on
    from there; as a config to initialise from, it is refused; a PiSSA adapter, whose
    initialisation moved part of the base into it, is refused."""
    from peft import LoraConfig, get_peft_model
    generator = torch.Generator().manual_seed(11)
    # The gaussian adapter names its targets as Unsloth does, with a regular expression PEFT
    # matches whole against each module path and saves as it was given.
    targets = {"gaussian": r"model\.layers\.\d+\.self_attn\.(q|v)_proj",
               "pissa": ["q_proj", "v_proj"]}
    for init, directory in (("gaussian", work("peft_gaussian")), ("pissa", work("peft_pissa"))):
        base = base_model(work("model"), weights)
        if init == "pissa":  # PEFT computes PiSSA's SVD in float32 at most
            base = base.to(torch.float32)
        model = get_peft_model(base, LoraConfig(r=RANK, lora_alpha=8,
                                                target_modules=targets[init],
                                                init_lora_weights=init))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.05)
        model.save_pretrained(directory)
    want = peft_loss(work, weights, work("peft_gaussian"), eval_tokens)
    evaluate = eval_command(zt, work, eval_tokens) + ["--adapter"]
    got = last_json_line(run_tool(evaluate + [work("peft_gaussian")]))["loss"]
    print(f"PEFT's gaussian-initialised adapter: eval --adapter {got:.9f}, PEFT {want:.9f}")
    check(abs(got - want) / abs(want) < TOLERANCE,
          f"eval --adapter of PEFT's gaussian-initialised adapter: {got} vs PEFT's {want}")
    run_tool(train_args(zt, work, work("from_gaussian"), ["--micro-batch", "2", "--lora-init-from",
                                                          work("peft_gaussian")], steps=1,
                        targets=None))
    refused(train_args(zt, work, work("bad"), ["--micro-batch", "2", "--lora-config",
                                               work("peft_gaussian", "adapter_config.json")],
                       steps=1, targets=None),
            "key 'init_lora_weights' is \"gaussian\": zerotrain initialises as PEFT's default")
    refused(evaluate + [work("peft_pissa")],
            "key 'init_lora_weights' is \"pissa\": that initialisation moved part of the base")
    # info describes the adapter PEFT wrote as PEFT's own config and file give it.
    info = json.loads(run_tool([zt, "info", work("peft_gaussian"), "--json"]))
    with open(work("peft_gaussian", "adapter_config.json")) as f:
        written = json.load(f)
    check(written["target_modules"] == targets["gaussian"],
          f"PEFT saved target_modules {written['target_modules']!r}, not the regular expression")
    tensors = read_safetensors(work("peft_gaussian", "adapter_model.safetensors"))
    want = {"kind": "peft_adapter", "r": written["r"], "lora_alpha": written["lora_alpha"],
            "target_modules": "q_proj,v_proj",
            "base_model_name_or_path": written["base_model_name_or_path"],
            "tensors": len(tensors), "parameters": sum(t.numel() for t in tensors.values())}
    check(all(info[k] == v for k, v in want.items()),
          f"info of PEFT's adapter: {info}, PEFT wrote {want}")
    print(f"info of PEFT's adapter: {want}")


def main():
    args, work = lora_oracle_arguments(__doc__.split("\n")[0],
                                       ["head", "merge", "eval", "generate"])
    zt = args.zerotrain

    def checks():
        tokens, eval_tokens, weights = tiny_model_and_windows(zt, work, args.source_dir)
        head = ["--trainable", "lm_head"]
        initial_a = {n[len(PREFIX):]: t.to(torch.float64) for n, t in
                     initial_adapters(zt, work, head).items() if ".lora_A." in n}
        want = peft_reference(work("model"), weights, initial_a, tokens, args.mutation,
                              modules_to_save=["lm_head"])[:3]
        run_tool(train_args(zt, work, work("run"), ["--micro-batch", "1", "--grad-accum", "2",
                                                    "--eval-batches", "2"] + head))
        final = check_training(work("run"), *want, modules_to_save=["lm_head"])
        with open(work("run", "report.json")) as f:
            eval_loss = json.load(f)["eval"]["loss"]
        loss = peft_loss(work, weights, work("run", "final"), eval_tokens)
        check(abs(loss - eval_loss) / abs(loss) < TOLERANCE,
              f"PEFT's loss with OUT/final {loss} vs zerotrain's evaluation {eval_loss}")
        print(f"PEFT loads OUT/final with modules_to_save: loss {loss:.7f}, zerotrain's "
              f"{eval_loss:.7f}")
        if args.mutation not in ("merge", "eval", "generate"):
            # Rank-stabilised scaling, alpha/sqrt(r), against PEFT's use_rslora.
            rslora = peft_reference(work("model"), weights, initial_a, tokens, args.mutation,
                                    use_rslora=True)[:3]
            run_tool(train_args(zt, work, work("rslora"), ["--micro-batch", "1", "--grad-accum",
                                                           "2", "--use-rslora"]))
            check_training(work("rslora"), *rslora, modules_to_save=None)
            check_init_from(zt, work, final)
            check_export_peft(zt, work, weights, final, eval_tokens, eval_loss)
        if args.mutation not in ("eval", "generate"):
            check_merge(zt, work, weights, final, eval_tokens, args.mutation)
        if args.mutation in (None, "eval", "generate"):
            check_adapter_commands(zt, args.mpirun, work, weights, eval_tokens, args.mutation)
        if args.mutation is None:
            check_peft_initialisations(zt, work, weights, eval_tokens)

    expected = {"head": "vs PEFT", "merge": "the merged model's loss",
                "eval": "eval --adapter's loss", "generate": "generate --adapter's token"}
    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       expected.get(args.mutation))


if __name__ == "__main__":
    sys.exit(main())
