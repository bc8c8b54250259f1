#!/usr/bin/env python3
"""PyTorch checkpoint files as users saved them, read against torch.load (CTest label "oracle", in
the project venv). The files are tests/data/torch_checkpoints/ (SOURCES.md names each one's
repository, commit and SHA-256, checked here first); torch versions from 2.0 and before to after
2.2 wrote them, through PEFT, FSDP and transformers' Trainer.

1. `info FILE --verify --json` of each state dict (a Pythia-70m LoRA adapter whose storages
   were saved on cuda:0, an FSDP-saved LoRA whose tensors torch 2 wrapped in
   _rebuild_from_type_v2, 606 scalar tensors in the newest layout): the names, shapes and dtypes
   torch.load gives, and each tensor's SHA-256 of its values as fp32 that hashlib gives for
   torch's (int64 tensors are not read: null). `info DIR --verify --json` of the FSDP-saved
   adapter as a PEFT adapter directory: its rank, alpha and targets, and the same digests.
2. The FSDP-saved adapter on its base model's real config.json (Maykeye/TinyLLama-v0, weights made
   here): `eval --adapter` and `export --merge-lora` with the file as it was saved give what a
   safetensors copy of torch.load's tensors gives, bit for bit, and the adapter moves the loss.
3. Refused, naming the file: the Trainer's optimizer.bin, training_args.bin, rng_state_0.pth and
   scheduler.pt beside that adapter (info, and eval --adapter of a directory whose
   adapter_model.bin is the optimizer's state); an adapter_config.json that is no PEFT config,
   and the Pythia adapter's, whose GPT-NeoX module zerotrain does not adapt;
   `info --verify` of a .bin and of a safetensors file holding a NaN or an infinity (the tensor
   and the element named), which `info` alone lists.

--mutation roll: the reference hashes each tensor's values shifted by one element, so the digest
check must fail (with --expect-mismatch, only it).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""
import hashlib
import json
import os
import pickletools
import shutil
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (SetupError, check, exit_status, last_json_line,  # noqa: E402
                            mutation_oracle_arguments, refused, run_tool)

torch = None
FMS = "fms-hf-tuning--tuned_llama_with_added_tokens"
# The globals a state dict's pickle names (torch's own rebuild calls and storage types); a file
# naming another is not loaded, so torch.load(weights_only=False) runs nothing else.
STATE_DICT_GLOBALS = {"collections OrderedDict", "torch._utils _rebuild_tensor_v2",
                      "torch._tensor _rebuild_from_type_v2", "torch Tensor", "torch FloatStorage",
                      "torch LongStorage", "torch BFloat16Storage", "torch HalfStorage"}
DTYPES = {"float32": "F32", "int64": "I64", "bfloat16": "BF16", "float16": "F16"}


def source_files(data):
    """SOURCES.md's table: file -> SHA-256."""
    files = {}
    for line in open(os.path.join(data, "SOURCES.md")):
        cells = [c.strip().strip("`") for c in line.split("|")[1:-1]]
        if len(cells) == 7 and cells[0] not in ("file", "---"):
            files[cells[0]] = cells[4]
    return files


def check_sources(data):
    files = source_files(data)
    check(len(files) == 12, f"SOURCES.md lists {len(files)} files, not 12")
    for name, digest in files.items():
        with open(os.path.join(data, name), "rb") as f:
            check(hashlib.sha256(f.read()).hexdigest() == digest,
                  f"{name} is not the file SOURCES.md names (SHA-256)")
    print(f"ok   the {len(files)} files are those SOURCES.md names")


def torch_state_dict(path):
    """torch.load's state dict of `path`, once its pickle is seen to name state-dict calls alone
    (torch 1.13's weights_only refuses torch 2's _rebuild_from_type_v2)."""
    archive = zipfile.ZipFile(path)
    pickle_name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
    names = set()
    for op, arg, _ in pickletools.genops(archive.read(pickle_name)):
        if op.name == "STACK_GLOBAL":
            raise SetupError(f"{path}: a protocol-4 pickle, whose globals this scan cannot name")
        if op.name == "GLOBAL":
            names.add(arg)
    if not names <= STATE_DICT_GLOBALS:
        raise SetupError(f"{path} names {sorted(names - STATE_DICT_GLOBALS)}")
    return torch.load(path, map_location="cpu", weights_only=False)


def values_sha256(t, mutation):
    """hashlib's SHA-256 of the tensor's values as fp32 (None for an integer tensor)."""
    if t.dtype == torch.int64:
        return None
    values = t.detach().float().contiguous().reshape(-1)
    if mutation == "roll":
        values = values.roll(1)
    return hashlib.sha256(values.numpy().tobytes()).hexdigest()


def check_digests(got, want, mutation, what):
    """got: name -> info's digest; want: torch's state dict."""
    check(set(got) == set(want), f"{what}: names {sorted(set(got) ^ set(want))[:4]} differ")
    for name, t in want.items():
        check(got[name] == values_sha256(t, mutation),
              f"{what}: values_sha256 of {name} is not torch's")


def check_state_dicts(zt, data, work, mutation):
    for name in (f"{FMS}/pytorch_model_fsdp.bin", "kimiko-lora-alpaca/adapter_model.bin",
                 "lerobot-libero/adapter_model.bin"):
        path = os.path.join(data, name)
        want = torch_state_dict(path)
        info = json.loads(run_tool([zt, "info", path, "--verify", "--json"]))
        check(info["kind"] == "pytorch" and info["verified"], f"info of {name}: {info['kind']}")
        tensors = {t["name"]: t for t in info["tensors"]}
        for key, t in want.items():
            check(key in tensors and tensors[key]["shape"] == list(t.shape)
                  and tensors[key]["dtype"] == DTYPES[str(t.dtype).split(".")[1]],
                  f"{name}: {key} is not listed with torch's shape {list(t.shape)} and dtype")
        check_digests({n: t["values_sha256"] for n, t in tensors.items()}, want, mutation, name)
        unread = sum(t.dtype == torch.int64 for t in want.values())
        print(f"ok   info --verify of {name}: {len(want)} tensors, the values of "
              f"{len(want) - unread} hashed as torch's ({unread} int64 not read)")
    directory = adapter_directory(data, work("fms_adapter"))  # named as PEFT names its weights
    info = json.loads(run_tool([zt, "info", directory, "--verify", "--json"]))
    check(info["kind"] == "peft_adapter" and info["r"] == 8 and info["lora_alpha"] == 32.0
          and info["target_modules"] == "q_proj,v_proj",
          f"info of {FMS}: r {info['r']}, alpha {info['lora_alpha']}, {info['target_modules']}")
    check_digests(info["values_sha256"],
                  torch_state_dict(os.path.join(directory, "adapter_model.bin")), mutation, FMS)
    print(f"ok   info --verify of the adapter directory {FMS}: r 8, alpha 32, q_proj and "
          "v_proj, torch's digests")


def adapter_directory(data, target, weights=f"{FMS}/pytorch_model_fsdp.bin"):
    """A PEFT adapter directory of FMS's adapter_config.json and `weights` as adapter_model.bin."""
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    shutil.copyfile(os.path.join(data, FMS, "adapter_config.json"),
                    os.path.join(target, "adapter_config.json"))
    shutil.copyfile(os.path.join(data, weights), os.path.join(target, "adapter_model.bin"))
    return target


def check_adapter_on_base(zt, data, work):
    import transformers
    from safetensors.torch import save_file
    config = transformers.LlamaConfig.from_json_file(
        os.path.join(data, "fms-hf-tuning--maykeye-tinyllama-v0", "config.json"))
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(work("base_hf"))
    run_tool([zt, "import", work("base_hf"), "--out", work("base")])
    real = adapter_directory(data, work("adapter_bin"))
    copy = adapter_directory(data, work("adapter_st"))
    os.remove(os.path.join(copy, "adapter_model.bin"))
    tensors = torch_state_dict(os.path.join(real, "adapter_model.bin"))
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(copy, "adapter_model.safetensors"))
    with open(work("text.txt"), "w") as f:
        f.write("Each poem has a line that rhymes with the next one. " * 40)
    run_tool([zt, "prepare-data", "--text", work("text.txt"), "--out", work("tok.h5")])
    evaluate = [zt, "eval", "--model", work("base"), "--data", work("tok.h5"), "--seq-len", "32",
                "--batches", "2", "--micro-batch", "2"]
    base = last_json_line(run_tool(evaluate))["loss"]
    losses = [last_json_line(run_tool(evaluate + ["--adapter", d]))["loss"] for d in (real, copy)]
    check(losses[0] == losses[1], f"eval --adapter: the saved .bin {losses[0]}, its copy "
          f"{losses[1]}")
    check(losses[0] != base, f"eval --adapter gives the base's loss {base}")
    merged = []
    for d in (real, copy):
        run_tool([zt, "export", work("base"), "--merge-lora", d, "--out", d + "_merged"])
        with open(os.path.join(d + "_merged", "model.safetensors"), "rb") as f:
            merged.append(f.read())
    check(merged[0] == merged[1], "export --merge-lora of the saved .bin differs from its copy's")
    print(f"ok   the FSDP-saved adapter on TinyLLama-v0's config: eval --adapter {losses[0]:.7f} "
          f"(base {base:.7f}) and the merge as its safetensors copy's, bit for bit")


def check_refusals(zt, data, work):
    trainer = {"optimizer.bin": "'state' is not a tensor but a dict",
               "training_args.bin": "trl.trainer.sft_config.SFTConfig",
               "rng_state_0.pth": "numpy.core.multiarray._reconstruct",
               "scheduler.pt": "'base_lrs' is not a tensor"}
    for name, says in trainer.items():
        path = os.path.join(data, FMS, name)
        refused([zt, "info", path], says)
        refused([zt, "info", path], path)
    wrong = adapter_directory(data, work("optimizer_as_adapter"), f"{FMS}/optimizer.bin")
    refused([zt, "eval", "--model", work("base"), "--data", work("tok.h5"), "--seq-len", "32",
             "--batches", "1", "--adapter", wrong],
            os.path.join(wrong, "adapter_model.bin"))
    refused([zt, "info", os.path.join(data, "kimiko-lora-alpaca")],
            "target_modules: 'query_key_value' is not a projection zerotrain can adapt")
    refused([zt, "info", os.path.join(data, "lerobot-libero")],
            "lerobot-libero/adapter_config.json: neither 'peft_type' nor 'r' (the LoRA rank): not "
            "a PEFT LoRA adapter config (its keys: 'base_model')")
    tensors = torch_state_dict(os.path.join(data, FMS, "pytorch_model_fsdp.bin"))
    name = "base_model.model.model.layers.5.self_attn.v_proj.lora_B.weight"
    tensors[name].view(-1)[37] = float("nan")
    torch.save(tensors, work("nan.bin"))
    run_tool([zt, "info", work("nan.bin")])
    refused([zt, "info", work("nan.bin"), "--verify"],
            f"tensor '{name}': 1 value(s), the first at element 37")
    from safetensors.torch import save_file
    save_file({"a": torch.ones(3), "b": torch.tensor([1.0, float("inf"), 2.0, float("-inf")])},
              work("inf.safetensors"))
    refused([zt, "info", work("inf.safetensors"), "--verify"],
            "tensor 'b': 2 value(s), the first at element 1")
    print("ok   the Trainer's other files, an optimizer state as an adapter, a config that is no "
          "PEFT config and non-finite values are refused by name")


def main():
    global torch
    args, work, torch = mutation_oracle_arguments(__doc__.split("\n")[0], ["roll"],
                                                  "transformers", "safetensors")
    data = os.path.join(args.source_dir, "tests", "data", "torch_checkpoints")

    def checks():
        check_sources(data)
        check_state_dicts(args.zerotrain, data, work, args.mutation)
        check_adapter_on_base(args.zerotrain, data, work)
        check_refusals(args.zerotrain, data, work)

    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       "values_sha256 of")


if __name__ == "__main__":
    sys.exit(main())
