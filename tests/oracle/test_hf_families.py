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
  4. `zerotrain train` at 2 ranks, ZeRO stage 3, from the imported model, then `export`:
     transformers loads the export with `from_pretrained` and its loss equals `zerotrain eval`'s
     on the trained model.

Bound (both sides run fp32 on the same bf16 weights; they differ only in the order and
association of fp32 sums): the logits pass through 2·L + 2 fp32 contractions of inner length
≤ n = max(D, F, V). Rounding errors of an n-term sum behave as a random walk of standard deviation
u·√n (u = 2^-24); allowing 10 of them per contraction, |Δloss| ≤ 10 · u · √n · (2L + 2) ·
max(1, |loss|) ≈ 3e-5 here, against ≈ 1e-7 seen. Weights are drawn with std 0.1 so that attention
is peaked and positions matter: a rope_theta off by 2× moves the loss by ≈ 1e-3.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (CheckFailed, SetupError, check, require_venv_modules,  # noqa: E402
                            run_tool)

h5py, np, torch, transformers = require_venv_modules("h5py", "numpy", "torch", "transformers")

U_FP32 = 2.0 ** -24

# Small random configs, one per family: (transformers config class, model class, kwargs).
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1)
FAMILIES = {
    # Llama 2/3 shape: grouped-query heads and a Llama-3 rope_theta.
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=500000.0)),
    # Llama 3.1/3.2's rope_scaling: with hd = 16 and θ = 500000 the wavelengths 2π/inv_i are
    # 6.3, 32, 167, ...: one in each of the three bands of an original context of 64 (kept below
    # 64/4, interpolated up to 64/1, divided by 8 above), on windows of 33 positions.
    "llama3-rope": ("LlamaConfig", "LlamaForCausalLM",
                    dict(rope_theta=500000.0, rope_scaling={
                        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Llama 3.2 1B/3B's shape: tied embeddings (no lm_head tensor in the checkpoint) with the
    # llama3 rope_scaling.
    "llama3.2-tied": ("LlamaConfig", "LlamaForCausalLM",
                      dict(rope_theta=500000.0, tie_word_embeddings=True, rope_scaling={
                          "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Linear position interpolation (the older "type" key, as older checkpoints write it).
    "llama-linear-rope": ("LlamaConfig", "LlamaForCausalLM",
                          dict(rope_scaling={"type": "linear", "factor": 4.0})),
    # Mistral without a sliding window.
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=None,
                                                             rope_theta=1000000.0)),
    # Mistral with a window at least as long as every sequence here (33 tokens): full attention.
    "mistral-window": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=40)),
}


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SetupError("no JSON line in the output")


def hf_loss(model, tokens, windows, seq_len):
    """Mean next-token cross-entropy over the windows (window w: tokens [w·(T+1), (w+1)·(T+1)),
    as `zerotrain eval` reads them), logits from transformers in fp32, the log-softmax and the
    mean in float64."""
    total, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            start = w * (seq_len + 1)
            chunk = torch.from_numpy(tokens[start: start + seq_len + 1].astype(np.int64))
            logits = model(input_ids=chunk[None, :-1]).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            total += -logp.gather(1, chunk[1:, None]).sum().item()
            count += seq_len
    return total / count


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--family", required=True, choices=sorted(FAMILIES))
    p.add_argument("--sharded", action="store_true", help="save the HF model in several files")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--break-config", metavar="KEY=VALUE",
                   help="change one config.json key after saving, so that zerotrain imports "
                        "another model than transformers runs: the imported loss must then "
                        "differ beyond the bound (exit 0 when it does, 1 when it does not)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    zt = args.zerotrain
    work = args.work_dir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    config_name, model_name, extra = FAMILIES[args.family]
    config = getattr(transformers, config_name)(**COMMON, **extra)
    model = getattr(transformers, model_name)(config)
    model = model.to(torch.bfloat16)
    hf_dir = os.path.join(work, "hf")
    model.save_pretrained(hf_dir, safe_serialization=True,
                          max_shard_size="100KB" if args.sharded else "10GB")
    if args.sharded:
        check(os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")),
              "save_pretrained wrote no index for --sharded")
    # The reference reads the saved files back in fp32 (the bf16 weights, exactly): the model
    # object itself would keep its rotary inv_freq buffer rounded to bf16 by .to(bfloat16).
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    model = model.eval()
    if args.break_config:
        key, value = args.break_config.split("=", 1)
        path = os.path.join(hf_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        saved[key] = json.loads(value)
        with open(path, "w") as f:
            json.dump(saved, f)

    data = os.path.join(work, "data.h5")
    run_tool([zt, "prepare-data", "--text", os.path.join(args.source_dir, "inputs/data/sample.txt"),
              "--out", data])
    with h5py.File(data, "r") as f:
        tokens = f["/tokens"][:]

    imported = os.path.join(work, "imported")
    run_tool([zt, "import", hf_dir, "--out", imported])
    run_tool([zt, "info", "--verify", imported])

    seq_len, micro_batch, batches = 32, 2, 2
    windows = list(range(micro_batch * batches))
    D, F, V, L = (COMMON["hidden_size"], COMMON["intermediate_size"], COMMON["vocab_size"],
                  COMMON["num_hidden_layers"])

    def zt_eval(model_dir):
        out = run_tool([zt, "eval", "--model", model_dir, "--data", data, "--batches",
                        str(batches), "--micro-batch", str(micro_batch), "--seq-len",
                        str(seq_len), "--precision", "fp32"])
        return last_json_line(out)["loss"]

    def compare(what, zt_value, hf_value):
        bound = 10 * U_FP32 * max(D, F, V) ** 0.5 * (2 * L + 2) * max(1.0, abs(hf_value))
        diff = abs(zt_value - hf_value)
        print(f"{args.family} {what}: zerotrain {zt_value:.9f} transformers {hf_value:.9f} "
              f"|diff| {diff:.3e} bound {bound:.3e}", flush=True)
        check(diff <= bound, f"{what}: |{zt_value} - {hf_value}| = {diff} > {bound}")

    imported_zt, imported_hf = zt_eval(imported), hf_loss(model, tokens, windows, seq_len)
    if args.break_config:
        try:
            compare("imported loss", imported_zt, imported_hf)
        except CheckFailed as e:
            print(f"with {args.break_config} the comparison fails, as it must: {e}")
            return 0
        raise CheckFailed(f"with {args.break_config} the losses still agree: the comparison "
                          "cannot see that key")
    compare("imported loss", imported_zt, imported_hf)

    # Train from the import at 2 ranks, stage 3, export, and let transformers read the export.
    run = os.path.join(work, "run")
    run_tool([args.mpirun, "-n", "2", zt, "train", "--model", imported, "--data", data, "--out",
              run, "--steps", "3", "--micro-batch", "2", "--seq-len", str(seq_len),
              "--zero-stage", "3", "--lr", "1e-3", "--warmup-steps", "0", "--seed", "7",
              "--eval-batches", "0", "--comm-timeout", "60"])
    final = os.path.join(run, "final")
    exported = os.path.join(work, "exported")
    run_tool([zt, "export", final, "--format", "safetensors", "--out", exported])
    # The export is written as a Llama, or as a Mistral when the model has a window.
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(exported,
                                                                 torch_dtype=torch.float32)
    print(f"the export loads as {type(reloaded).__name__}", flush=True)
    trained_hf = hf_loss(reloaded.eval(), tokens, windows, seq_len)
    compare("trained loss", zt_eval(final), trained_hf)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as e:
        print(f"SETUP ERROR: {e}", file=sys.stderr)
        sys.exit(2)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
