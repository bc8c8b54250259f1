#!/usr/bin/python3
"""DeepSpeed configs against DeepSpeed's own config parser (CTest label "oracle").

DeepSpeed's deepspeed.runtime.config.DeepSpeedConfig is loaded from the pinned PyPI source
distribution (./run.sh deps downloads it) without DeepSpeed's package __init__: a few of its
package modules are opened as plain namespaces so that no op is built and no process group is
needed; deepspeed.comm answers the world size. Its pydantic blocks run unmodified.

1. Resolution. Every config in inputs/configs/ and the cases below trains one step with
   `zerotrain train --deepspeed` at 1 or 2 ranks. The same file, with each "auto" filled as the
   Hugging Face Trainer fills it (from the Trainer's arguments, here zerotrain's resolved
   options, and d², 0.9·d², 10·d for the sizes), goes through DeepSpeedConfig at the same world
   size. Batch (micro-batch, accumulation), ZeRO stage, offload devices and precision must be
   the same, and so must every bucket size, clip and optimizer value the file gives.
2. Keys. Every field and alias of DeepSpeed's zero_optimization, offload_param,
   offload_optimizer, fp16 and bf16 models at its default value, every keyword of DeepSpeed's
   three warmup schedulers and of its Adam classes (FusedAdam, DeepSpeedCPUAdam, read from their
   source), must be accepted by `zerotrain estimate --deepspeed`. Misspelt keys that DeepSpeed
   refuses must be refused by zerotrain too, naming the key.

3. Real configs. The 40 DeepSpeed configs of public fine-tuning repositories in
   tests/data/deepspeed_configs/ (SOURCES.md names each), given to `train` as the files are, at 2
   ranks, resolve as in 1 (the Trainer's precision added as accelerate adds it); the three that
   zerotrain refuses (REAL_REFUSED) are refused naming the file and the key, and the one DeepSpeed
   refuses too is refused by DeepSpeedConfig for that key.

The comparison can fail: each resolution of 1 and 3 is also given to DeepSpeed with the other
precision (the precision blocks removed, or bf16 enabled where zerotrain trains fp32), against
the same zerotrain run, and every one must then disagree.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import ast
import copy
import glob
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import types

from oracle_harness import SetupError, argument_parser, check, exit_status, run_tool

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1"}


class DeepSpeed:
    """DeepSpeed's config classes from its sdist, with a settable world size."""

    def __init__(self, sdist, work_dir):
        if not os.path.isfile(sdist):
            raise SetupError(f"{sdist}: DeepSpeed's source distribution is missing "
                             "(./run.sh deps downloads it)")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/deepspeed/" in m.name and m.isfile()]
            tar.extractall(work_dir, members=members)
        roots = glob.glob(os.path.join(work_dir, "deepspeed-*", "deepspeed"))
        if len(roots) != 1:
            raise SetupError(f"{sdist}: no single deepspeed/ package inside")
        self.root = roots[0]
        self.world = 1

        def namespace(name, sub):  # a package whose __init__ is not run
            module = types.ModuleType(name)
            module.__path__ = [os.path.join(self.root, sub)]
            sys.modules[name] = module
            return module

        namespace("deepspeed", "")
        comm = namespace("deepspeed.comm", "comm")
        comm.get_world_size = lambda *args, **kwargs: self.world
        comm.get_rank = lambda *args, **kwargs: 0
        comm.ProcessGroup = object
        for name, sub in [("deepspeed.utils", "utils"), ("deepspeed.runtime.zero", "runtime/zero"),
                          ("deepspeed.ops", "ops"), ("deepspeed.module_inject", "module_inject")]:
            namespace(name, sub)
        import deepspeed.utils.logging as ds_logging
        for key, value in vars(ds_logging).items():
            if not key.startswith("_"):
                setattr(sys.modules["deepspeed.utils"], key, value)
        ds_logging.logger.setLevel(logging.ERROR)
        from deepspeed.runtime import config, lr_schedules, precision_config
        from deepspeed.runtime.zero import config as zero_config, offload_config
        self.config = config
        self.schedules = lr_schedules
        self.models = {
            "zero_optimization": zero_config.DeepSpeedZeroConfig,
            "offload_param": offload_config.DeepSpeedZeroOffloadParamConfig,
            "offload_optimizer": offload_config.DeepSpeedZeroOffloadOptimizerConfig,
            "bf16": precision_config.DeepSpeedBF16Config,
            "fp16": precision_config.DeepSpeedFP16Config,
        }

    def parse(self, config, world):
        self.world = world
        return self.config.DeepSpeedConfig(copy.deepcopy(config))

    def adam_keywords(self):
        """Keyword parameters of DeepSpeed's Adam classes with their defaults, from the source."""
        keywords = {}
        for path, cls in [("ops/adam/fused_adam.py", "FusedAdam"),
                          ("ops/adam/cpu_adam.py", "DeepSpeedCPUAdam")]:
            tree = ast.parse(open(os.path.join(self.root, path)).read())
            init = next(f for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                        and node.name == cls for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            names = [a.arg for a in init.args.args][2:]  # self, params
            for name, default in zip(names, init.args.defaults[-len(names):]):
                keywords[name] = ast.literal_eval(default)
        # DeepSpeedEngine passes adamw_mode to DeepSpeedCPUAdam itself (from the config's
        # adam_w_mode): the same keyword in the config's params is a duplicate, a TypeError.
        del keywords["adamw_mode"]
        # What the engine pops from the params before building the optimizer.
        keywords.update(torch_adam=False, adam_w_mode=True)
        return keywords


def hf_fill_auto(config, run, hidden):
    """The config with every "auto" replaced as transformers' HfTrainerDeepSpeedConfig does,
    taking the Trainer's arguments from zerotrain's resolved options (run.json's "config")."""
    c = copy.deepcopy(config)
    world = run["world_size"]
    o = run["config"]
    values = {
        "train_micro_batch_size_per_gpu": o["micro_batch"],
        "gradient_accumulation_steps": o["grad_accum"],
        "train_batch_size": o["micro_batch"] * o["grad_accum"] * world,
        "gradient_clipping": o["clip"],
        "optimizer.params.lr": o["lr"],
        "optimizer.params.betas": [o["beta1"], o["beta2"]],
        "optimizer.params.eps": o["eps"],
        "optimizer.params.weight_decay": o["weight_decay"],
        "scheduler.params.warmup_min_lr": 0,
        "scheduler.params.warmup_max_lr": o["lr"],
        "scheduler.params.warmup_num_steps": o["warmup_steps"],
        "scheduler.params.total_num_steps": o["steps"],
        "bf16.enabled": o["precision"] == "bf16",
        "bfloat16.enabled": o["precision"] == "bf16",  # not the Trainer's: accelerate adds bf16
        "fp16.enabled": o["precision"] == "fp16",
        "zero_optimization.reduce_bucket_size": hidden * hidden,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
        "zero_optimization.stage3_param_persistence_threshold": 10 * hidden,
        # accelerate's DeepSpeedPlugin fills it from zero3_save_16bit_model (default false); not
        # compared: zerotrain's consolidated checkpoints do not depend on it
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
    }

    def walk(node, prefix):
        for key, value in node.items():
            dotted = prefix + key
            if isinstance(value, dict):
                walk(value, dotted + ".")
            elif value == "auto":
                if dotted not in values:
                    raise SetupError(f"no Trainer value for \"auto\" at {dotted}")
                node[key] = values[dotted]
    walk(c, "")
    # The Trainer's precision reaches DeepSpeed through accelerate's DeepSpeedPlugin
    # (set_mixed_precision), which adds the block of that precision where the file has none: a
    # file with only `"fp16": {"enabled": "auto"}` trains bf16 under --bf16.
    if o["precision"] == "bf16" and "bf16" not in c:
        c["bf16"] = {"enabled": True}
    if o["precision"] == "fp16" and "fp16" not in c:
        c["fp16"] = {"enabled": True, "auto_cast": True}
    return c


def zerotrain_run(args, data, name, config, world, extra, path=None):
    """run.json of one step trained with `config`, written out, or with the file `path` as it is."""
    work = os.path.join(args.work_dir, name)
    os.makedirs(work, exist_ok=True)
    if path is None:
        path = os.path.join(work, "ds.json")
        with open(path, "w") as f:
            json.dump(config, f, indent=1)
    cmd = [args.zerotrain, "train", "--deepspeed", path, "--preset", "tiny", "--data", data,
           "--out", os.path.join(work, "out"), "--overwrite", "--steps", "1", "--seq-len", "16",
           "--log-every", "0"] + extra
    if "nvme" in json.dumps(config):  # swap files in the test's directory, not the file's path
        os.makedirs(os.path.join(work, "nvme"), exist_ok=True)
        cmd += ["--nvme-path", os.path.join(work, "nvme")]
    if world > 1:
        cmd = ["mpirun", "-np", str(world)] + cmd
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, **MPI_ENV})
    if proc.returncode != 0:
        print(proc.stdout)
        raise SetupError(f"zerotrain train exited with {proc.returncode} on {name}")
    with open(os.path.join(work, "out", "run.json")) as f:
        return json.load(f)


def close(a, b):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))


def compare(name, config, ds, run, adam_defaults):
    """Differences between DeepSpeed's resolution `ds` and zerotrain's run.json `run`."""
    o = run["config"]
    zero = ds.zero_config
    precision = ("bf16" if ds.bfloat16_config.enabled else
                 "fp16" if ds.float16_config.enabled else "fp32")
    device = lambda offload: "none" if offload is None else str(offload.device)  # noqa: E731
    pairs = [("micro-batch", ds.train_micro_batch_size_per_gpu, o["micro_batch"]),
             ("gradient accumulation", ds.gradient_accumulation_steps, o["grad_accum"]),
             ("ZeRO stage", int(ds.zero_optimization_stage), o["zero_stage"]),
             ("offload_optimizer", device(zero.offload_optimizer), o["offload_optimizer"]),
             ("offload_param", device(zero.offload_param), o["offload_param"]),
             ("precision", precision, o["precision"])]
    given = config.get("zero_optimization", {})
    for keys, field, option in [
            (["reduce_bucket_size"], "reduce_bucket_size", "reduce_bucket_size"),
            (["allgather_bucket_size"], "allgather_bucket_size", "allgather_bucket_size"),
            (["stage3_prefetch_bucket_size", "prefetch_bucket_size"], "prefetch_bucket_size",
             "prefetch_bucket_size"),
            (["stage3_param_persistence_threshold", "param_persistence_threshold"],
             "param_persistence_threshold", "param_persistence_threshold"),
            (["stage3_max_live_parameters", "max_live_parameters"], "max_live_parameters",
             "max_live_parameters"),
            (["stage3_max_reuse_distance", "max_reuse_distance"], "max_reuse_distance",
             "max_reuse_distance")]:
        if any(k in given for k in keys):
            pairs.append((f"zero_optimization.{field}", int(getattr(zero, field)), o[option]))
    if "gradient_clipping" in config:
        pairs.append(("gradient_clipping", ds.gradient_clipping, o["clip"]))
    if ds.float16_config.enabled:  # the loss scaler DeepSpeed would build, against run.json's
        fp16, scaling = ds.float16_config, o.get("loss_scaling") or {}
        pairs += [(f"fp16.{key}", getattr(fp16, key), scaling.get(key))
                  for key in ("loss_scale", "initial_scale_power", "loss_scale_window",
                              "hysteresis", "consecutive_hysteresis", "min_loss_scale")]
    if "optimizer" in config:  # what FusedAdam is built with: the params, else its defaults
        params = {**adam_defaults, **(ds.optimizer_params or {})}
        pairs += [("optimizer.params.eps", params["eps"], o["eps"]),
                  ("optimizer.params.weight_decay", params["weight_decay"], o["weight_decay"]),
                  ("beta1", params["betas"][0], o["beta1"]),
                  ("beta2", params["betas"][1], o["beta2"])]
        if "warmup_max_lr" not in json.dumps(config.get("scheduler")):
            pairs.append(("optimizer.params.lr", params["lr"], o["lr"]))
    return [f"{what}: DeepSpeed {a!r}, zerotrain {b!r}" for what, a, b in pairs
            if not (close(a, b) if isinstance(a, float) or isinstance(b, float) else a == b)]


# (name, config, world size, extra train arguments): batch rules, stages, offload, precision.
RESOLUTION_CASES = [
    ("batch_total_only", {"train_batch_size": 8, "bf16": {"enabled": True}}, 2, []),
    ("batch_total_micro", {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                           "zero_optimization": {"stage": 1}}, 2, []),
    ("batch_total_accum", {"train_batch_size": 12, "gradient_accumulation_steps": 3,
                           "bf16": {"enabled": False}, "zero_optimization": {"stage": 2}}, 2, []),
    ("batch_micro_accum", {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2,
                           "bfloat16": {"enabled": True}}, 1, []),
    ("stage2_cpu_offload", {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                            "zero_optimization": {"stage": 2, "cpu_offload": True,
                                                  "reduce_bucket_size": 2e5}}, 2, []),
    ("stage3_aliases", {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.5,
                        "zero_optimization": {"stage": 3, "prefetch_bucket_size": 3e4,
                                              "param_persistence_threshold": 0,
                                              "stage3_max_live_parameters": 1e5},
                        "optimizer": {"type": "AdamW", "params": {
                            "lr": 1e-3, "betas": [0.8, 0.9], "eps": 1e-7,
                            "weight_decay": 0.0}}}, 2, []),
    ("optimizer_defaults", {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                            "optimizer": {"type": "adamw", "params": {"eps": 1e-6}}}, 1, []),
    ("fp16_defaults", {"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": True}}, 2, []),
    ("fp16_static_stage3", {"train_micro_batch_size_per_gpu": 1,
                            "fp16": {"enabled": True, "loss_scale": 256, "hysteresis": 4},
                            "zero_optimization": {"stage": 3}}, 2, []),
    ("fp16_consecutive", {"train_micro_batch_size_per_gpu": 2,
                          "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 20,
                                   "consecutive_hysteresis": True, "min_loss_scale": 4}},
     1, []),
    ("stage3_nvme", {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                     "zero_optimization": {"stage": 3, "offload_optimizer": {
                         "device": "nvme", "nvme_path": "/nonexistent", "buffer_count": 4}}}, 1, []),
]


def check_resolution(deepspeed, name, config, run, world, adam_defaults):
    """The number of failed verdicts (0 to 2) of DeepSpeed's resolution of `config`, filled as the
    Trainer fills it, against zerotrain's run.json `run`: it must agree; and given the other
    precision (flip_precision) it must disagree, or the comparison could not fail. Prints both."""
    failures = 0
    for other_precision in (False, True):
        filled = hf_fill_auto(config, run, run["model"]["hidden_size"])
        if other_precision:
            flip_precision(filled, run)
        # axolotl's torch_compile files give an older DeepSpeed's compile keys (disable,
        # backend), which 0.19.8's CompileConfig refuses; zerotrain ignores the block with a
        # warning.
        if "compile" in filled and "compile: not implemented" in json.dumps(run.get("deepspeed")):
            del filled["compile"]
        try:
            ds = deepspeed.parse(filled, world)
        except Exception as e:  # noqa: BLE001 - DeepSpeed's own refusal is a finding
            print(f"FAIL {name}: DeepSpeed refuses the filled config: {e}")
            failures += 1
            continue
        diffs = compare(name, config, ds, run, adam_defaults)
        failed = bool(diffs) != other_precision
        failures += failed
        if other_precision:
            print(f"{'FAIL' if failed else 'ok  '} {name}, DeepSpeed given the other precision: "
                  + ("it agreed though it should not" if failed else "; ".join(diffs)))
        else:
            print(f"{'FAIL' if failed else 'ok  '} {name} at {world} rank(s): "
                  + ("; ".join(diffs) if failed else
                     "batch, stage, offload, precision, optimizer agree"))
    return failures


def resolution_checks(args, deepspeed):
    cases = [(f"inputs_{os.path.basename(p)[:-5]}", json.load(open(p)), 2, [])
             for p in sorted(glob.glob(os.path.join(args.source_dir, "inputs/configs/*.json")))]
    adam_defaults = deepspeed.adam_keywords()
    failures = 0
    for name, config, world, extra in cases + RESOLUTION_CASES:
        run = zerotrain_run(args, args.data, name, config, world, extra)
        failures += check_resolution(deepspeed, name, config, run, world, adam_defaults)
    return failures


# The real configs zerotrain refuses, with what its message must say: an optimizer or a block it
# does not implement, and a bucket of 0, which DeepSpeed 0.19.8 refuses too (gt=0).
REAL_REFUSED = {
    "microsoft--DeepSpeedExamples--training__BingBertSquad__1-bit_adam__nccl__"
    "deepspeed_onebitadam_bsz96_config.json": ("optimizer 'OnebitAdam' is not supported", False),
    "microsoft--DeepSpeedExamples--training__bing_bert__deepspeed_bsz64k_lamb_config_seq128.json":
        ("sparse_attention is enabled", False),
    "huggingface--transformers--tests__deepspeed__ds_config_zero3.61c7ec94.json":
        ("zero_optimization.reduce_bucket_size must be positive, got 0", True),
}


def flip_precision(filled, run):
    """DeepSpeed given the other precision: bf16 <-> fp32 (the verdict that must disagree)."""
    for key in ("bf16", "bfloat16", "fp16"):
        filled.pop(key, None)
    if run["config"]["precision"] == "fp32":
        filled["bf16"] = {"enabled": True}


def real_config_checks(args, deepspeed):
    """The DeepSpeed configs of public fine-tuning repositories (tests/data/deepspeed_configs/,
    their sources in its SOURCES.md), given to `train` as the files are: each trains one step at
    2 ranks and resolves as DeepSpeedConfig resolves it, or is refused as REAL_REFUSED says."""
    folder = os.path.join(args.source_dir, "tests/data/deepspeed_configs")
    paths = sorted(p for p in glob.glob(os.path.join(folder, "*")) if not p.endswith(".md"))
    if len(paths) != 40 or not set(REAL_REFUSED) <= {os.path.basename(p) for p in paths}:
        raise SetupError(f"{folder}: {len(paths)} configs, expected the stored 40 with every "
                         "REAL_REFUSED one")
    adam_defaults = deepspeed.adam_keywords()
    failures = 0
    for path in paths:
        base = os.path.basename(path)
        config = json.load(open(path))
        if base in REAL_REFUSED:
            text, deepspeed_refuses = REAL_REFUSED[base]
            status, output = estimate(args, base, config, path=path)
            named = status != 0 and base in output and text in output
            if deepspeed_refuses:
                try:
                    deepspeed.parse(config, 2)
                    named = False
                    print(f"     {base}: DeepSpeed accepts it")
                except Exception as e:  # noqa: BLE001 - DeepSpeed refuses it too, for that key
                    named = named and "reduce_bucket_size" in str(e)
            print(f"{'ok  ' if named else 'FAIL'} {base}: refused ({text})"
                  + ("" if named else f"; exit {status}:\n{output}"))
            failures += not named
            continue
        try:
            run = zerotrain_run(args, args.data, "real_" + base.rsplit(".", 1)[0], config, 2, [],
                                path=path)
        except SetupError as e:  # a file users bring that does not train is a finding
            print(f"FAIL {base}: {e}")
            failures += 1
            continue
        failures += check_resolution(deepspeed, base, config, run, 2, adam_defaults)
    return failures


def estimate(args, name, config, path=None):
    """(exit status, output) of `zerotrain estimate --deepspeed` on config, written out, or on the
    file `path` as it is."""
    if path is None:
        path = os.path.join(args.work_dir, name + ".json")
        with open(path, "w") as f:
            json.dump(config, f, indent=1)
    proc = subprocess.run([args.zerotrain, "estimate", "--deepspeed", path, "--preset", "tiny"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


def defaults_of(model, by_alias, deprecated=False):
    """Every field of a DeepSpeed pydantic block at its default, under its name or alias; or
    (deprecated=True) its deprecated fields, which DeepSpeed refuses beside their replacements,
    at their default or false."""
    dumped = model().model_dump(mode="json")
    out = {}
    for name, field in model.model_fields.items():
        key = field.alias if by_alias and field.alias else name
        if bool((field.json_schema_extra or {}).get("deprecated")) != deprecated:
            continue
        if deprecated:
            out[key] = False if dumped[name] is None else dumped[name]
        elif name not in ("offload_param", "offload_optimizer", "zenflow") and \
                dumped[name] is not None:  # nested blocks are checked on their own
            out[key] = dumped[name]
    return out


def key_checks(args, deepspeed):
    failures = 0
    accepted = {}
    for by_alias in (False, True):
        zero = defaults_of(deepspeed.models["zero_optimization"], by_alias)
        zero["offload_param"] = defaults_of(deepspeed.models["offload_param"], by_alias)
        zero["offload_optimizer"] = defaults_of(deepspeed.models["offload_optimizer"], by_alias)
        accepted[f"zero_all_keys_{'aliases' if by_alias else 'names'}"] = {
            "zero_optimization": zero,
            "bf16": defaults_of(deepspeed.models["bf16"], by_alias),
            "fp16": defaults_of(deepspeed.models["fp16"], by_alias)}
    accepted["zero_deprecated_keys"] = {
        "zero_optimization": defaults_of(deepspeed.models["zero_optimization"], False, True)}
    accepted["adam_all_keywords"] = {"optimizer": {"type": "Adam",
                                                   "params": deepspeed.adam_keywords()}}
    for kind in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR"):
        signature = inspect.signature(getattr(deepspeed.schedules, kind).__init__)
        params = {k: (p.default if p.default is not inspect.Parameter.empty else 100)
                  for k, p in signature.parameters.items() if k not in ("self", "optimizer")}
        accepted[f"scheduler_{kind}_all_keywords"] = {
            "scheduler": {"type": kind, "params": {k: v for k, v in params.items()
                                                   if v is not None}}}
    for name, config in accepted.items():
        def count(node):  # the keys of every block, nested ones included
            return sum(1 + (count(v) if isinstance(v, dict) else 0) for v in node.values())
        keys = count(config)
        try:
            if "optimizer" not in config and "scheduler" not in config:
                # the config is valid for DeepSpeed itself (which needs a batch size)
                deepspeed.parse({**config, "train_micro_batch_size_per_gpu": 1}, 1)
        except Exception as e:  # noqa: BLE001
            raise SetupError(f"{name}: DeepSpeed refuses its own defaults: {e}")
        status, output = estimate(args, name, config)
        if status == 0:
            print(f"ok   {name}: zerotrain accepts all {keys} keys")
        else:
            failures += 1
            print(f"FAIL {name}: zerotrain refuses a key DeepSpeed accepts:\n{output}")

    refused = [
        ("zero_optimization.overlap_com", {"zero_optimization": {"overlap_com": True}}),
        ("zero_optimization.stage3_prefetch_bucket_sise",
         {"zero_optimization": {"stage3_prefetch_bucket_sise": 10}}),
        ("zero_optimization.offload_param.fast_init",
         {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
                                                              "fast_init": True}}}),
        ("zero_optimization.offload_optimizer.pin_memmory",
         {"zero_optimization": {"offload_optimizer": {"device": "cpu", "pin_memmory": True}}}),
        ("bf16.enabeld", {"bf16": {"enabeld": True}}),
        ("fp16.loss_scal", {"fp16": {"loss_scal": 0}}),
        ("fp16.min_loss_scale", {"fp16": {"enabled": True, "min_loss_scale": 0.25}}),
        ("fp16.loss_scale_window", {"fp16": {"enabled": True, "loss_scale_window": 0}}),
        ("scheduler.params.warmup_max_lr",
         {"scheduler": {"type": "WarmupCosineLR",
                        "params": {"total_num_steps": 10, "warmup_max_lr": 1e-3}}}),
    ]
    for key, config in refused:
        try:
            if "scheduler" in config:
                import torch
                optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=1e-3)
                getattr(deepspeed.schedules, config["scheduler"]["type"])(
                    optimizer, **config["scheduler"]["params"])
            else:
                deepspeed.parse({**config, "train_micro_batch_size_per_gpu": 1}, 1)
            raise SetupError(f"DeepSpeed accepts {key}; the case is wrong")
        except SetupError:
            raise
        except Exception:  # noqa: BLE001 - DeepSpeed refuses it, as expected
            pass
        status, output = estimate(args, "refused_" + key.replace(".", "_"), config)
        if status != 0 and key in output:
            print(f"ok   {key}: refused by DeepSpeed and by zerotrain")
        else:
            failures += 1
            print(f"FAIL {key}: DeepSpeed refuses it; zerotrain exit {status}:\n{output}")
    return failures


def main():
    parser = argument_parser(__doc__.split("\n")[0], deepspeed_sdist=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)

    def checks():
        deepspeed = DeepSpeed(args.deepspeed_sdist, args.work_dir)
        args.data = os.path.join(args.work_dir, "sample.h5")
        run_tool([args.zerotrain, "prepare-data", "--text",
                  os.path.join(args.source_dir, "inputs/data/sample.txt"), "--out", args.data])
        failures = resolution_checks(args, deepspeed)
        failures += key_checks(args, deepspeed)
        failures += real_config_checks(args, deepspeed)
        check(failures == 0, f"{failures} check(s) failed")

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
