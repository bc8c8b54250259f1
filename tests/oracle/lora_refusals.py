"""Part 9 of test_lora.py: bad LoRA configs and adapter directories, refused saying why.

check_lora_refusals takes the test's LoraOracle once its runs are done (OUT/final of the 1-rank
run is the adapter directory the cases edit)."""

import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import check, refused  # noqa: E402


def rewrite_config(adapter_dir, **changes):
    path = os.path.join(adapter_dir, "adapter_config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)


def poison_element_5(adapter_dir):
    """Writes a NaN over element 5 of the first lora_B tensor of an adapter's safetensors file."""
    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    with open(path, "r+b") as f:
        header_bytes = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_bytes))
        name = sorted(k for k in header if k.endswith("lora_B.weight"))[0]
        assert header[name]["dtype"] == "F32", header[name]
        f.seek(8 + header_bytes + header[name]["data_offsets"][0] + 5 * 4)
        f.write(struct.pack("<f", float("nan")))


def edited_adapter(work, case, edit):
    """A copy of the 1-rank run's adapter directory (OUT/final) as work/adapter_CASE, `edit`
    applied to it."""
    d = work("adapter_" + case)
    shutil.copytree(work("one", "final"), d)
    edit(d)
    return d


def check_lora_refusals(o):
    """Configs, options and adapter directories that do not fit the model."""
    zt, work, train_args, seq_len = o.zt, o.work, o.train_args, o.seq_len
    bad = work("bad")
    for name, config, says in (
            ("replicated.json", {"r": 4, "target_modules": ["q_proj"],
                                 "layer_replication": [[0, 1]]}, "key 'layer_replication'"),
            ("regex.json", {"r": 4, "target_modules": r"model\.layers\.7\..*proj"},
             "selects no projection in the model's 2 layers"),
            ("head.json", {"r": 4, "target_modules": ["lm_head"]}, "'lm_head' is not"),
            ("dropout.json", {"r": 4, "lora_dropout": 1.0}, "lora_dropout must be in")):
        with open(work(name), "w") as f:
            json.dump(config, f)
        refused([zt, "train", "--backend", "cpu", "--model", work("model"), "--data",
                 work("tok.h5"), "--out", bad, "--seq-len", str(seq_len),
                 "--lora-config", work(name)], says)
    refused(train_args(zt, work, bad, ["--trainable", r"layers\.0\.mlp\.up_proj"]),
            "with LoRA a decoder layer's own tensors stay frozen")
    refused(train_args(zt, work, bad, [], targets="q_proj,qproj"), "'qproj' is not")
    refused(train_args(zt, work, bad, ["--lora-rank", "0"], targets=None) +
            ["--lora-alpha", "16"], "--lora-alpha needs --lora-rank R")
    # Adapter directories that do not fit: no weights, another rank than the file's, a
    # safetensors file under the .bin name; and the options that would contradict the
    # directory's config.
    for case, edit, says in (
            ("no_weights", lambda d: os.remove(os.path.join(d, "adapter_model.safetensors")),
             "has neither adapter_model.safetensors nor adapter_model.bin"),
            ("other_rank", lambda d: rewrite_config(d, r=8), "has shape"),
            ("renamed", lambda d: os.replace(os.path.join(d, "adapter_model.safetensors"),
                                             os.path.join(d, "adapter_model.bin")),
             "adapter_model.bin' is not a PyTorch checkpoint"),
            ("nan", poison_element_5, "lora_B.weight' holds a non-finite value (NaN or "
             "infinity) at element 5")):
        d = edited_adapter(work, case, edit)
        refused(train_args(zt, work, bad, ["--lora-init-from", d, "--micro-batch", "2"],
                           targets=None), says)
        check(not os.path.exists(bad), f"a refused --lora-init-from ({case}) left {bad}")
        refused([zt, "export", work("model"), "--merge-lora", d, "--out", bad], says)
    refused(train_args(zt, work, bad, ["--lora-init-from", work("one", "final")]),
            "brings its adapter_config.json")

    refused(train_args(zt, work, bad, ["--lora-config", work("replicated.json")]),
            "both specify the adapters")
