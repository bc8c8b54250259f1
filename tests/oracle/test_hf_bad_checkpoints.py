#!/usr/bin/env python3
"""`zerotrain import` on Hugging Face checkpoints that transformers wrote and that were then
damaged (CTest label "oracle", in the project venv).

A small LlamaForCausalLM is saved with save_pretrained (bf16 safetensors), then each case
changes one thing: the file truncated, config.json's shape keys or architecture changed, a tensor
removed or stored as F64 (rewritten with the safetensors library), an extra tensor added. Every
case must exit non-zero within the time limit, name the file and the tensor or key, and leave no
output directory. Two more cases must be accepted: a tied checkpoint that still stores
lm_head.weight (transformers ties it to the embedding and so does zerotrain: the copy is
ignored and reported), and the undamaged checkpoint itself.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import argument_parser, check, exit_status, require_venv_modules  # noqa: E402

torch, transformers, safetensors_torch = require_venv_modules("torch", "transformers",
                                                              "safetensors.torch")

CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
TENSOR = "model.layers.1.mlp.up_proj.weight"


def save(directory, **overrides):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**CONFIG, **overrides})
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)
    return os.path.join(directory, "model.safetensors"), os.path.join(directory, "config.json")


def edit_json(path, **changes):
    with open(path) as f:
        j = json.load(f)
    j.update(changes)
    with open(path, "w") as f:
        json.dump(j, f)


def rewrite_tensors(path, change):
    tensors = safetensors_torch.load_file(path)
    change(tensors)
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)


# (case, how to damage (weights path, config path), strings the error must contain)
CASES = [
    ("truncated", lambda w, c: truncate(w), ["model.safetensors"]),
    ("shape_mismatch", lambda w, c: edit_json(c, intermediate_size=128),
     ["model.layers.0.mlp.gate_proj.weight", "config.json", "[96,64]", "[128,64]"]),
    ("missing_tensor", lambda w, c: rewrite_tensors(w, lambda t: t.pop(TENSOR)),
     [TENSOR, "config.json"]),
    ("f64_tensor", lambda w, c: rewrite_tensors(w, lambda t: t.update({TENSOR: t[TENSOR].double()})),
     [TENSOR, "F64"]),
    ("extra_tensor", lambda w, c: rewrite_tensors(
        w, lambda t: t.update({"model.layers.1.self_attn.q_proj.bias": torch.zeros(64)})),
     ["model.layers.1.self_attn.q_proj.bias", "model.safetensors"]),
    ("unknown_architecture", lambda w, c: edit_json(c, model_type="gpt2",
                                                    architectures=["GPT2LMHeadModel"]),
     ["config.json", "gpt2"]),
    ("unsupported_key", lambda w, c: edit_json(c, mlp_bias=True),
     ["config.json", "mlp_bias"]),
    # attention_bias is implemented: the checkpoint then lacks the biases it promises.
    ("promised_biases_missing", lambda w, c: edit_json(c, attention_bias=True),
     ["model.layers.0.self_attn.q_proj.bias", "config.json"]),
]


def import_model(zerotrain, hf_dir, out):
    cmd = [zerotrain, "import", hf_dir, "--out", out]
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    print(proc.stdout.rstrip(), flush=True)
    return proc


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    torch.set_num_threads(1)

    def checks():
        # The control: the undamaged checkpoint imports.
        good = os.path.join(args.work_dir, "undamaged")
        save(good)
        check(import_model(args.zerotrain, good, good + "_imported").returncode == 0,
              "the undamaged checkpoint was refused")
        print("ok   undamaged: imported")
        for name, damage, named in CASES:
            hf_dir = os.path.join(args.work_dir, name)
            damage(*save(hf_dir))
            out = os.path.join(args.work_dir, name + "_imported")
            proc = import_model(args.zerotrain, hf_dir, out)
            check(proc.returncode != 0, f"{name}: the damaged checkpoint was imported")
            for part in named:
                check(part in proc.stdout, f"{name}: the error does not name {part!r}")
            check(not os.path.exists(out), f"{name}: {out} was left behind")
            print(f"ok   {name}: refused, naming {', '.join(named)}")

        # Tied, with the head stored anyway (equal to the embedding, as a tied model saves it
        # when its tensors are written one by one).
        hf_dir = os.path.join(args.work_dir, "tied_with_head")
        weights, _ = save(hf_dir, tie_word_embeddings=True)
        rewrite_tensors(weights, lambda t: t.update(
            {"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
        proc = import_model(args.zerotrain, hf_dir, os.path.join(args.work_dir, "tied_imported"))
        check(proc.returncode == 0, "a tied checkpoint storing lm_head.weight was refused")
        check("lm_head.weight (tie_word_embeddings: the same values" in proc.stdout,
              "the ignored, equal lm_head.weight is not reported as such")
        # A stored head that differs: transformers ties the head to the embedding all the same.
        rewrite_tensors(weights, lambda t: t.update(
            {"lm_head.weight": t["model.embed_tokens.weight"] * 2}))
        loaded = transformers.LlamaForCausalLM.from_pretrained(hf_dir)
        check(torch.equal(loaded.lm_head.weight, loaded.model.embed_tokens.weight),
              "transformers did not tie the head to the embedding")
        proc = import_model(args.zerotrain, hf_dir, os.path.join(args.work_dir, "tied_differs"))
        check(proc.returncode == 0 and "differs from the embedding at element 0" in proc.stdout,
              "a tied checkpoint with a different stored head is not imported and reported")
        print("ok   tied checkpoint with a stored lm_head.weight: imported as transformers loads "
              "it, the copy reported equal or different")

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
