#!/usr/bin/env python3
"""PEFT adapter configs users bring, against PEFT itself (label oracle).

tests/data/peft_adapter_configs/ holds 35 adapter_config.json files as PEFT 0.2 ... 0.19 saved them
in public repositories (SOURCES.md names each), unmodified: Llama 1-3.2, TinyLlama, CodeLlama,
Mistral, Qwen2.5/3 and SmolLM2 adapters, some saved by Unsloth, LLaMA-Factory, axolotl or TRL.

For each, `zerotrain estimate --preset tiny --lora-config FILE --json` is compared with PEFT
0.13.2's get_peft_model(LlamaForCausalLM of the tiny preset, LoraConfig(file)): the projections
PEFT adapts (in every layer), the trainable parameter count (the adapters and PEFT's trainable
copies of modules_to_save), each adapter's scale and dropout, and modules_to_save. Keys PEFT 0.13.2
does not know are dropped, as later PEFT releases drop the keys of newer ones, after checking that
each holds its default (so dropping it changes nothing). Files zerotrain refuses (REFUSED) must be
refused naming the file and saying why; the other files must all be accepted. Beside them, files
written here hold target_modules regular expressions in Python's syntax (REGEX_AGREE, compared as
the stored ones; REGEX_REFUSED, refused saying why).

--expect-mismatch runs PEFT with lora_alpha doubled, and passes only if every accepted file then
disagrees.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (CheckFailed, SetupError, argument_parser, check,  # noqa: E402
                            exit_status, fresh_work_dir, require_venv_modules, run_tool)

# What zerotrain must say of the files it refuses: a module that is not a Llama projection (LoRA on
# lm_head, GPT-2's c_attn), another PEFT method, a layer-specific target list, or a file that is no
# JSON. (bias "lora_only" on Mistral, which has no biases, is accepted: PEFT trains no bias there
# either; Unsloth's target_modules regular expression, saved for Gemma 3, selects every Llama
# projection, as PEFT reads it.)
REFUSED = {
    "EllaHxyz--LLama2_Finetuning--adapter_config.json":
        "'model.layers.31.self_attn.q_proj' names one layer's module",
    "Iqbalwasim01--BNF_LLM_predictor--adapter_config.INVALID-1ffeaa4.json": "invalid JSON",
    "KamilaTrinkenschuh--Minstral-Model--adapter_config.json":
        "'lm_head' is not a projection zerotrain can adapt",
    "rqchao--cs182-project--outputs__checkpoint-500__adapter_config.json":
        "key 'peft_type' = \"PROMPT_TUNING\" is not supported",
    "sanaear--tiny-LLM-Lora--lora-out__adapter_config.json":
        "'c_attn' is not a projection zerotrain can adapt",
}
# The keys of newer PEFT releases, and PEFT 0.2's, with the values that leave plain LoRA as it is.
DROPPED_DEFAULTS = {
    "enable_lora": [None], "merge_weights": [False], "lora_bias": [False],
    "eva_config": [None], "exclude_modules": [None], "corda_config": [None],
    "trainable_token_indices": [None], "qalora_group_size": [16], "use_qalora": [False],
    "target_parameters": [None, []], "alora_invocation_tokens": [None], "arrow_config": [None],
    "ensure_weight_tying": [False], "peft_version": None, "lora_ga_config": [None],
    "use_bdlora": [None, False],
}
STORED = 35  # the files of tests/data/peft_adapter_configs/; 30 of them plain LoRA
# target_modules regular expressions as users write them, in Python's syntax, each in a file of
# its own beside the stored ones (r 8, alpha 16). PEFT matches one whole against every module path
# of the tiny preset's two layers; zerotrain must select the same projections...
REGEX_AGREE = [
    r".*\.(q_proj|v_proj)",
    r"model\.layers\.\d+\.mlp\.(gate|up|down)_proj",
    r"model\.layers\.[01]\.self_attn\.(?P<projection>[qkvo])_proj",  # Python's named group
    r"(?i).*\.(Q|K)_PROJ",  # an inline flag
    r"(?:.*?(?:self_attn|mlp).*?(?:o_proj|down_proj).*?)",
    r".*\.gate_proj|up_proj",  # whole, as fullmatch: the bare "up_proj" selects no module path
]
# ... or refuse one PEFT reads otherwise, saying why: a layer alone, a module that is no
# projection, Python's look-around (which RE2 does not read).
REGEX_REFUSED = {
    r"model\.layers\.0\..*_proj": "selects 'model.layers.0.self_attn.q_proj' but not "
                                     "'model.layers.1.self_attn.q_proj'",
    r"lm_head|.*\.v_proj": "selects 'lm_head': zerotrain adapts the decoder layers' projections",
    r".*\.mlp|.*\.v_proj": "selects 'model.layers.0.mlp', which is no linear layer",
    r".*(?<!k)_proj": "is a regular expression RE2 cannot read",
    r"model\.layers\.\d+\.mlp": "selects no projection of layer 0",
}
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def peft_config(path, alpha_factor):
    """PEFT 0.13.2's LoraConfig of the file, newer keys dropped once shown to be at defaults."""
    from peft import LoraConfig
    with open(path) as f:
        saved = json.load(f)
    fields = {f.name for f in dataclasses.fields(LoraConfig)}
    kept = {}
    for key, value in saved.items():
        if key in fields:
            kept[key] = value
            continue
        if key not in DROPPED_DEFAULTS:
            raise SetupError(f"{path}: key {key!r} is neither PEFT 0.13.2's nor a known newer one")
        allowed = DROPPED_DEFAULTS[key]
        if allowed is not None and value not in allowed:
            raise SetupError(f"{path}: newer key {key!r} = {value!r} is not at its default")
    kept["lora_alpha"] = kept.get("lora_alpha", 8) * alpha_factor
    kept["inference_mode"] = False  # --lora-config trains adapters of this shape
    return LoraConfig(**kept)


def peft_resolution(base_config, config):
    """(adapted projections, trainable parameters, {scales}, {dropouts}, modules_to_save) of
    get_peft_model on a fresh tiny LlamaForCausalLM."""
    import torch
    from peft import get_peft_model
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = get_peft_model(LlamaForCausalLM(base_config), config)
    adapted, scales, dropouts = {}, set(), set()
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            projection = name.rsplit(".", 1)[-1]
            adapted.setdefault(projection, set()).add(name.split(".layers.")[1].split(".")[0])
            scales.add(module.scaling["default"])
            dropout = module.lora_dropout["default"]
            dropouts.add(dropout.p if isinstance(dropout, torch.nn.Dropout) else 0.0)
    layers = {str(i) for i in range(base_config.num_hidden_layers)}
    check(all(v == layers for v in adapted.values()),
          f"PEFT adapts some projections in some layers only: {adapted}")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return (sorted(adapted, key=PROJECTIONS.index), trainable, scales, dropouts,
            sorted(config.modules_to_save or []))


def zerotrain_resolution(args, path):
    proc = subprocess.run([args.zerotrain, "estimate", "--preset", "tiny", "--lora-config", path,
                           "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def checks(args, work, alpha_factor):
    from transformers import LlamaConfig
    run_tool([args.zerotrain, "init", "--preset", "tiny", "--seed", "1", "--out", work("tiny")])
    with open(work("tiny", "config.json")) as f:
        base_config = LlamaConfig(**json.load(f))
    folder = os.path.join(args.source_dir, "tests/data/peft_adapter_configs")
    paths = sorted(p for p in glob.glob(os.path.join(folder, "*.json")))
    names = {os.path.basename(p) for p in paths}
    if len(paths) != STORED or not set(REFUSED) <= names:
        raise SetupError(f"{folder}: {len(paths)} adapter configs, expected the stored {STORED} "
                         f"with every REFUSED one ({sorted(set(REFUSED) - names)} missing)")
    refused = dict(REFUSED)
    os.makedirs(work("regex"))
    for i, pattern in enumerate(REGEX_AGREE + list(REGEX_REFUSED)):
        paths.append(work("regex", f"regex-{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": pattern},
                      f)
        if pattern in REGEX_REFUSED:
            refused[os.path.basename(paths[-1])] = REGEX_REFUSED[pattern]
    failures, agreed = [], 0
    for path in paths:
        name = os.path.basename(path)
        status, out, err = zerotrain_resolution(args, path)
        if name in refused:
            ok = status != 0 and path in err and refused[name] in err
            print(f"{'ok  ' if ok else 'FAIL'} {name}: refused ({refused[name]})"
                  + ("" if ok else f"; exit {status}: {err.strip()}"))
            if not ok:
                failures.append(name)
            continue
        if status != 0 or "warning" in err:  # every key of these files is a LoraConfig key
            print(f"FAIL {name}: " + ("refused" if status else "warned") + f": {err.strip()}")
            failures.append(name)
            continue
        lora = json.loads(out)["lora"]
        ours = (lora["targets"].split(","), json.loads(out)["trainable_psi"], {lora["scale"]},
                {lora["adapter_config"]["lora_dropout"]},
                sorted(lora["adapter_config"]["modules_to_save"] or []))
        theirs = peft_resolution(base_config, peft_config(path, alpha_factor))
        what = ["projections", "trainable parameters", "scale", "dropout", "modules_to_save"]
        diffs = [f"{w}: PEFT {t}, zerotrain {o}" for w, o, t in zip(what, ours, theirs)
                 if not (o == t or (w in ("scale", "dropout") and len(t) == 1 and
                                    abs(next(iter(o)) - next(iter(t)))
                                    <= 1e-6 * max(1.0, abs(next(iter(t))))))]
        print(f"{'FAIL' if diffs else 'ok  '} {name}: "
              + ("; ".join(diffs) if diffs else f"r {lora['rank']} on {lora['targets']}, "
                 f"{ours[1]} trainable, as PEFT"))
        if diffs:
            failures.append(name)
        else:
            agreed += 1
    if alpha_factor != 1:  # the mutated reference: every accepted file must disagree
        check(agreed == 0, f"{agreed} file(s) agreed with PEFT's doubled lora_alpha")
        raise CheckFailed("doubled alpha: every accepted file disagrees with PEFT")
    check(not failures, f"{len(failures)} file(s) failed: {', '.join(failures)}")
    check(agreed == STORED - len(REFUSED) + len(REGEX_AGREE), f"{agreed} file(s) agreed with PEFT")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--expect-mismatch", action="store_true")
    args = parser.parse_args()
    require_venv_modules("peft", "transformers")
    import torch
    import warnings
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*base_model_name_or_path.*")
    work = fresh_work_dir(args.work_dir)
    mutation = "doubled-alpha" if args.expect_mismatch else None
    return exit_status(lambda: checks(args, work, 2 if args.expect_mismatch else 1), mutation,
                       "doubled alpha")


if __name__ == "__main__":
    sys.exit(main())
