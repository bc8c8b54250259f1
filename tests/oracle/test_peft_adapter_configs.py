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

--family phi3 resolves the same files, and tests/data/peft_adapter_configs_phi3/'s adapters of
Phi-3 models, on a Phi3ForCausalLM of the tiny preset's shape (imported from save_pretrained),
whose projections are the fused qkv_proj and gate_up_proj beside o_proj and down_proj: where PEFT
finds a listed name and leaves others unmatched zerotrain adapts the same ones and warns; where
PEFT finds none (its "Target modules ... not found") zerotrain refuses naming the model's
projections.

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
    r"model\.layers\.0\..*_proj",  # layer 0's projections alone
    r"model\.layers\.\d+\.mlp\.(gate|up|down)_proj",
    r"model\.layers\.[01]\.self_attn\.(?P<projection>[qkvo])_proj",  # Python's named group
    r"(?i).*\.(Q|K)_PROJ",  # an inline flag
    r"(?:.*?(?:self_attn|mlp).*?(?:o_proj|down_proj).*?)",
    r".*\.gate_proj|up_proj",  # whole, as fullmatch: the bare "up_proj" selects no module path
]
# ... or refuse one PEFT reads otherwise, saying why: a module that is no projection, Python's
# look-around (which RE2 does not read), no projection at all.
REGEX_REFUSED = {
    r"lm_head|.*\.v_proj": "selects 'lm_head': zerotrain adapts the decoder layers' projections",
    r".*\.mlp|.*\.v_proj": "selects 'model.layers.0.mlp', which is no linear layer",
    r".*(?<!k)_proj": "is a regular expression RE2 cannot read",
    r"model\.layers\.\d+\.mlp": "selects no projection (",
}
# Layers and per-module ranks and alphas (r 8, alpha 16 besides), written here, each a file of its
# own: zerotrain must resolve each module as PEFT does...
LAYER_KEYS_AGREE = [
    {"target_modules": ["q_proj", "v_proj", "o_proj"], "layers_to_transform": [1]},
    {"target_modules": ["o_proj", "down_proj"], "layers_to_transform": 1,  # (0.17 refuses a 0)
     "layers_pattern": "layers"},
    {"target_modules": ["q_proj", "k_proj", "down_proj"],
     "rank_pattern": {"k_proj": 2, "layers.1.mlp.down_proj": 12}, "alpha_pattern": {"q_proj": 64}},
    {"target_modules": "all-linear", "rank_pattern": {"o_proj": 4, "qkv_proj": 6},
     "alpha_pattern": {"o_proj": 4}, "use_rslora": True},
    {"target_modules": ["q_proj", "k_proj"],  # keys that are whole paths
     "rank_pattern": {"model.layers.0.self_attn.q_proj": 2},
     "alpha_pattern": {"model.layers.1.self_attn.k_proj": 32}},
    {"target_modules": r".*\.1\.self_attn\.[qkvo]_proj|.*\.0\.mlp\.down_proj",
     "rank_pattern": {"down_proj": 3}},
]
# ... and, with PEFT 0.15 or later (the _peft017 variants), those that PEFT 0.13 reads otherwise
# or not at all: exclude_modules (0.14), rank_pattern and alpha_pattern keys that match from the
# module path's start without being the path itself (0.15; zerotrain warns that 0.13 and 0.14
# read them otherwise).
LAYER_KEYS_AGREE_NEWER = [
    {"target_modules": ["q_proj", "v_proj", "down_proj"],
     "exclude_modules": ["layers.0.self_attn.v_proj", "lm_head"]},
    {"target_modules": "all-linear", "exclude_modules": r".*\.1\.mlp\..*"},
    {"target_modules": ["q_proj", "k_proj"],
     "rank_pattern": {r"model\.layers\.[01]\.self_attn\.q_proj": 2},
     "alpha_pattern": {"model.layers.1.self_attn.k_.*": 32}},
]
# ... or refuse, saying why: GPT-2's layers_pattern (PEFT adapts nothing), a layer the model lacks,
# two keys of a pattern giving a module different values (PEFT's choice is the keys' order),
# layers_pattern alone (PEFT 0.17 refuses it), every module excluded.
LAYER_KEYS_REFUSED = [
    ({"target_modules": ["o_proj"], "layers_to_transform": [0], "layers_pattern": "h"},
     "layers_pattern [\"h\"] (PEFT reads the layer index after it"),
    ({"target_modules": ["o_proj"], "layers_to_transform": [2]},
     "no module of the model is adapted: layers_to_transform [2] (the model's layers: 0 to 1)"),
    ({"target_modules": ["o_proj"], "rank_pattern": {"o_proj": 2, "self_attn.o_proj": 4}},
     "with different values"),
    ({"target_modules": ["o_proj"], "layers_pattern": "layers"},
     "key 'layers_pattern' without layers_to_transform"),
    ({"target_modules": ["o_proj", "down_proj"], "exclude_modules": r".*_proj"},
     "(PEFT: \"All modules were excluded\")"),
]


OLDER_PEFT_WARNED = set()  # the files of LAYER_KEYS_AGREE_NEWER, which may warn so


def newer_peft():
    """Whether the PEFT imported matches rank_pattern keys from the path's start (0.15 on)."""
    import peft
    return tuple(int(x) for x in peft.__version__.split(".")[:2]) >= (0, 15)
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj",
               "gate_up_proj", "down_proj"]
PHI3_STORED = 9  # the files of tests/data/peft_adapter_configs_phi3/
NONE_FOUND = "a phi3 model has no such projection"  # zerotrain's refusal where PEFT finds none


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
    """(adapted projections, trainable parameters, {module path: scale}, {dropouts},
    modules_to_save, {module path: r}) of get_peft_model on a fresh tiny model of the config's
    class; None where PEFT finds none of the target modules."""
    import torch
    import transformers
    from peft import get_peft_model
    torch.manual_seed(0)
    base = getattr(transformers, base_config.architectures[0])(base_config)
    try:
        model = get_peft_model(base, config)
    except ValueError as e:
        if "not found in the base model" not in str(e):
            raise
        return None
    projections, scales, ranks, dropouts = set(), {}, {}, set()
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            projections.add(name.rsplit(".", 1)[-1])
            path = name[len("base_model.model."):]
            scales[path], ranks[path] = module.scaling["default"], module.r["default"]
            dropout = module.lora_dropout["default"]
            dropouts.add(dropout.p if isinstance(dropout, torch.nn.Dropout) else 0.0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return (sorted(projections, key=PROJECTIONS.index), trainable, scales, dropouts,
            sorted(config.modules_to_save or []), ranks)


def same_scales(ours, theirs):
    """Whether {module: scale} agree, module by module, within fp32's rounding of each."""
    return set(ours) == set(theirs) and all(
        abs(ours[m] - theirs[m]) <= 1e-6 * max(1.0, abs(theirs[m])) for m in theirs)


def zerotrain_resolution(args, model, path):
    proc = subprocess.run([args.zerotrain, "estimate"] + model + ["--lora-config", path,
                                                                   "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def base_model(args, work):
    """(estimate's model options, transformers config) of the tiny preset, or with --family phi3
    of a Phi3ForCausalLM of its shape, saved by transformers and imported."""
    import transformers
    run_tool([args.zerotrain, "init", "--preset", "tiny", "--seed", "1", "--out", work("tiny")])
    with open(work("tiny", "config.json")) as f:
        tiny = json.load(f)
    if args.family == "llama":
        return ["--preset", "tiny"], transformers.LlamaConfig(**tiny)
    shape = {k: tiny[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                  "num_hidden_layers", "num_attention_heads",
                                  "num_key_value_heads", "rms_norm_eps", "rope_theta")}
    config = transformers.Phi3Config(**shape, sliding_window=None, pad_token_id=0,
                                     architectures=["Phi3ForCausalLM"])
    transformers.Phi3ForCausalLM(config).save_pretrained(work("phi3-hf"))
    run_tool([args.zerotrain, "import", work("phi3-hf"), "--out", work("phi3")])
    return ["--model", work("phi3")], config


def adapter_config_files(args, work):
    """The stored files (the Phi-3 ones too with --family phi3) and the regular-expression files
    written here: (paths, {file name: what its refusal says})."""
    folder = os.path.join(args.source_dir, "tests/data/peft_adapter_configs")
    paths = sorted(p for p in glob.glob(os.path.join(folder, "*.json")))
    names = {os.path.basename(p) for p in paths}
    if len(paths) != STORED or not set(REFUSED) <= names:
        raise SetupError(f"{folder}: {len(paths)} adapter configs, expected the stored {STORED} "
                         f"with every REFUSED one ({sorted(set(REFUSED) - names)} missing)")
    if args.family == "phi3":
        phi3 = sorted(glob.glob(os.path.join(folder + "_phi3", "*.json")))
        if len(phi3) != PHI3_STORED:
            raise SetupError(f"{folder}_phi3: {len(phi3)} adapter configs")
        paths += phi3
    refused = dict(REFUSED)
    os.makedirs(work("regex"))
    agree = LAYER_KEYS_AGREE + (LAYER_KEYS_AGREE_NEWER if newer_peft() else [])
    written = [({"target_modules": p}, REGEX_REFUSED.get(p)) for p in REGEX_AGREE + list(
        REGEX_REFUSED)] + [(keys, None) for keys in agree] + LAYER_KEYS_REFUSED
    for i, (keys, says) in enumerate(written):
        paths.append(work("regex", f"written-{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(dict({"peft_type": "LORA", "r": 8, "lora_alpha": 16}, **keys), f)
        if says:
            refused[os.path.basename(paths[-1])] = says
        if keys in LAYER_KEYS_AGREE_NEWER:
            OLDER_PEFT_WARNED.add(os.path.basename(paths[-1]))
    return paths, refused


def checks(args, work, alpha_factor):
    model, base_config = base_model(args, work)
    paths, refused = adapter_config_files(args, work)
    failures, agreed, none_found, scale_only = [], 0, 0, 0
    for path in paths:
        name = os.path.basename(path)
        status, out, err = zerotrain_resolution(args, model, path)
        if name in refused:
            ok = status != 0 and path in err and refused[name] in err
            print(f"{'ok  ' if ok else 'FAIL'} {name}: refused ({refused[name]})"
                  + ("" if ok else f"; exit {status}: {err.strip()}"))
            if not ok:
                failures.append(name)
            continue
        theirs = peft_resolution(base_config, peft_config(path, alpha_factor))
        if theirs is None:  # PEFT finds none of the target modules
            ok = status != 0 and path in err and NONE_FOUND in err
            print(f"{'ok  ' if ok else 'FAIL'} {name}: refused as PEFT (none of its "
                  f"target_modules found)" + ("" if ok else f"; exit {status}: {err.strip()}"))
            none_found += 1 if ok else 0
            if not ok:
                failures.append(name)
            continue
        # Every key of these files is a LoraConfig key; a list naming projections of another
        # model alone is warned about (PEFT adapts the names it finds).
        # (and, of a file only newer PEFT reads alike, that older releases read it otherwise)
        warned = [line for line in err.splitlines() if "warning" in line and
                  f"a {args.family} model has no " not in line and not (
                      name in OLDER_PEFT_WARNED and
                      "than in 0.15 and later, which zerotrain follows" in line)]
        if status != 0 or warned:
            print(f"FAIL {name}: " + ("refused" if status else "warned") + f": {err.strip()}")
            failures.append(name)
            continue
        lora = json.loads(out)["lora"]
        modules = lora["modules"]
        ours = (lora["targets"].split(","), json.loads(out)["trainable_psi"],
                {m: a["scale"] for m, a in modules.items()},
                {lora["adapter_config"]["lora_dropout"]},
                sorted(lora["adapter_config"]["modules_to_save"] or []),
                {m: a["r"] for m, a in modules.items()})
        what = ["projections", "trainable parameters", "scale", "dropout", "modules_to_save",
                "ranks"]
        diffs = [f"{w}: PEFT {t}, zerotrain {o}" for w, o, t in zip(what, ours, theirs)
                 if not (o == t or (w == "scale" and same_scales(o, t)) or
                         (w == "dropout" and len(t) == 1 and
                          abs(next(iter(o)) - next(iter(t))) <= 1e-6))]
        print(f"{'FAIL' if diffs else 'ok  '} {name}: "
              + ("; ".join(diffs) if diffs else f"r {lora['rank']} on {lora['targets']}, "
                 f"{ours[1]} trainable, as PEFT"))
        if diffs:
            failures.append(name)
            scale_only += 1 if len(diffs) == 1 and diffs[0].startswith("scale") else 0
        else:
            agreed += 1
    if alpha_factor != 1:  # the mutated reference: every accepted file must disagree, by scale
        accepted = len(paths) - len(refused) - none_found
        check(agreed == 0 and scale_only == accepted > 0,
              f"with PEFT's lora_alpha doubled {agreed} file(s) agreed, {scale_only} of "
              f"{accepted} accepted differ by their scale alone")
        raise CheckFailed("doubled alpha: every accepted file disagrees with PEFT")
    check(not failures, f"{len(failures)} file(s) failed: {', '.join(failures)}")
    check(agreed + none_found == len(paths) - len(refused),
          f"{agreed} file(s) agreed with PEFT, {none_found} refused as PEFT")
    check(args.family == "phi3" or none_found == 0,
          f"{none_found} file(s) whose targets PEFT does not find on Llama")
    print(f"{agreed} file(s) agreed with PEFT, {none_found} refused where PEFT finds no target, "
          f"{len(refused)} refused saying why")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--expect-mismatch", action="store_true")
    parser.add_argument("--family", choices=["llama", "phi3"], default="llama")
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
