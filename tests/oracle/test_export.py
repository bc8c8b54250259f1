#!/usr/bin/python3
"""Hugging Face export check (CTest label "oracle").

Trains the tiny preset for a few steps (OUT/final, a bf16 model directory), exports it with
`zerotrain export --format safetensors` (once as one model.safetensors, once sharded with an
index), then, independently of zerotrain's code:

  1. reads every safetensors file with a plain reader written here (8-byte little-endian header
     length, JSON header padded to 8 bytes, contiguous data_offsets, raw little-endian data)
     and, when the `safetensors` package is importable, with it as well;
  2. compares every tensor bit for bit with the HDF5 model directory read by h5py;
  3. runs the oracle's PyTorch Llama (llama_reference.py) in float64 on the exported weights and
     compares its logits with zerotrain's (zt_oracle_dump, fp32 mode, on the HDF5 directory):
     relative error below 1e-4, the oracle's fp32 tolerance.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import argparse
import json
import os
import shutil
import struct
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference as ref  # noqa: E402
from oracle_harness import CheckFailed, SetupError, check, run_tool  # noqa: E402

LOGITS_TOLERANCE = 1e-4
DTYPES = {"BF16": (2, np.uint16), "F32": (4, np.float32)}


def read_safetensors_plain(path):
    """{name: float32 torch tensor} from one file, validating the layout on the way."""
    with open(path, "rb") as f:
        data = f.read()
    check(len(data) >= 8, f"{path}: shorter than the length prefix")
    (n,) = struct.unpack("<Q", data[:8])
    check((8 + n) % 8 == 0, f"{path}: 8 + header length {n} is not a multiple of 8")
    check(8 + n <= len(data), f"{path}: header length {n} runs past the file")
    text = data[8:8 + n].decode("utf-8")
    check(text.rstrip(" ") == text.rstrip(" \t\n") and len(text) - len(text.rstrip(" ")) < 8,
          f"{path}: header padding is not up to 7 spaces")
    header = json.loads(text)
    check(header.get("__metadata__", {}).get("format") == "pt",
          f"{path}: __metadata__.format is not 'pt'")
    entries = sorted(((v["data_offsets"][0], v["data_offsets"][1], k, v)
                      for k, v in header.items() if k != "__metadata__"))
    body = data[8 + n:]
    expected = 0
    tensors = {}
    for begin, end, name, v in entries:
        check(begin == expected, f"{path}: {name} starts at {begin}, expected {expected}")
        size, np_type = DTYPES[v["dtype"]]
        shape = v["shape"]
        check(end - begin == size * int(np.prod(shape)), f"{path}: {name} has a wrong size")
        raw = np.frombuffer(body[begin:end], dtype=np_type).reshape(shape)
        if v["dtype"] == "BF16":  # bf16 bits are the top half of a float32: exact upcast
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = torch.from_numpy(np.array(raw, dtype=np.float32))
        expected = end
    check(expected == len(body), f"{path}: {len(body) - expected} bytes after the last tensor")
    return tensors, expected


def read_hf_dir(hf_dir):
    """All tensors of an exported directory, via the index when there is one."""
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            j = json.load(f)
        files = sorted(set(j["weight_map"].values()))
        check(len(files) > 1, "an index for a single file")
    else:
        files, j = ["model.safetensors"], None
    tensors = {}
    data_bytes = 0
    for name in files:
        part, part_bytes = read_safetensors_plain(os.path.join(hf_dir, name))
        data_bytes += part_bytes
        check(not set(part) & set(tensors), f"{name} repeats tensors")
        if j is not None:
            for t in part:
                check(j["weight_map"][t] == name, f"index puts {t} in another file than {name}")
        tensors.update(part)
        try:
            from safetensors.torch import load_file  # optional
        except ImportError:
            continue
        lib = load_file(os.path.join(hf_dir, name))
        check(set(lib) == set(part), f"safetensors package sees other tensors in {name}")
        for t, value in lib.items():
            check(torch.equal(value.to(torch.float32), part[t]),
                  f"safetensors package reads {t} differently")
    if j is not None:
        check(j["metadata"]["total_size"] == data_bytes,
              f"index total_size {j['metadata']['total_size']} != {data_bytes} tensor bytes")
    return tensors


def bits(t):
    return t.contiguous().view(torch.int32)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--dump", required=True, help="zt_oracle_dump binary")
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    try:
        shutil.rmtree(args.work_dir, ignore_errors=True)
        os.makedirs(args.work_dir)
        w = lambda name: os.path.join(args.work_dir, name)  # noqa: E731
        run_tool([args.zerotrain, "prepare-data", "--text",
                  os.path.join(args.source_dir, "inputs", "data", "sample.txt"),
                  "--out", w("tokens.h5")])
        run_tool([args.zerotrain, "train", "--preset", "tiny", "--data", w("tokens.h5"),
                  "--out", w("run"), "--steps", "3", "--micro-batch", "2", "--seq-len", "16",
                  "--lr", "5e-3", "--log-every", "0"])
        model_dir = w("run/final")
        run_tool([args.zerotrain, "export", model_dir, "--format", "safetensors",
                  "--out", w("hf_single")])
        run_tool([args.zerotrain, "export", model_dir, "--format", "safetensors",
                  "--out", w("hf_sharded"), "--max-shard-size-mb", "0.04"])
        config = ref.load_config(model_dir)
        h5_weights = ref.load_weights(model_dir, dtype=torch.float32)
        names = set(ref.expected_tensor_names(config))
        check(set(h5_weights) == names, "the HDF5 model has unexpected tensor names")
        with open(os.path.join(model_dir, "config.json")) as f:
            model_config = f.read()
        exported = {}
        for hf in ("hf_single", "hf_sharded"):
            with open(w(hf + "/config.json")) as f:
                check(f.read() == model_config, f"{hf}/config.json differs from the model's")
            exported[hf] = read_hf_dir(w(hf))
            check(set(exported[hf]) == names, f"{hf} has other tensors than the model")
            for name in sorted(names):
                check(exported[hf][name].shape == h5_weights[name].shape, f"{hf}: {name} shape")
                check(torch.equal(bits(exported[hf][name]), bits(h5_weights[name])),
                      f"{hf}: {name} differs from the HDF5 weights")
            print(f"{hf}: {len(names)} tensors bitwise equal to the HDF5 model directory")
        check(os.path.exists(w("hf_sharded/model.safetensors.index.json")),
              "the sharded export has no index")

        # Logits: the oracle's Llama on the exported weights vs zerotrain on the HDF5 model.
        B, T = 2, 16
        run_tool([args.dump, "--model", model_dir, "--tokens", w("tokens.h5"),
                  "--out", w("dump.h5"), "--precision", "fp32", "--micro-batch", str(B),
                  "--seq-len", str(T), "--steps", "1"])
        with h5py.File(w("dump.h5"), "r") as f:
            engine_logits = torch.from_numpy(f["logits"][()]).to(torch.float64)
            window = torch.from_numpy(f["tokens"][()].astype(np.int64))
        weights64 = {n: t.to(torch.float64) for n, t in exported["hf_sharded"].items()}
        logits = ref.forward(weights64, config, window[:, :T]).reshape(B * T, -1)
        error = ((engine_logits - logits).norm() / logits.norm()).item()
        print(f"logits: ‖zerotrain − reference on exported weights‖ / ‖reference‖ = {error:.3e} "
              f"(tolerance {LOGITS_TOLERANCE:g})")
        check(error < LOGITS_TOLERANCE, f"logits differ: relative error {error:.3e}")
    except SetupError as e:
        print(f"SETUP ERROR: {e}", flush=True)
        return 2
    except CheckFailed as e:
        print(f"FAILED: {e}", flush=True)
        return 1
    print("PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
