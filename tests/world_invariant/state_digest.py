"""Digests of zerotrain training state that do not depend on the world size that wrote it.

  state_digest.py checkpoint DIR   the fp32 optimizer state of a training checkpoint: every
                                   group's master, m and v put back together from the rank
                                   files' slices (manifest file_ranges), SHA-256 in group order
                                   (a frozen group kept as a digest: that digest)
  state_digest.py model DIR        every tensor of a model directory's HDF5 shards, by name

Equal digests mean bitwise-equal state, whatever the number of ranks or ZeRO stage.
"""
import glob
import hashlib
import json
import sys

import h5py
import numpy as np


def checkpoint_digest(checkpoint_dir: str) -> str:
    with open(f"{checkpoint_dir}/manifest.json") as f:
        manifest = json.load(f)
    files = [h5py.File(f"{checkpoint_dir}/{entry['name']}", "r") for entry in manifest["files"]]
    h = hashlib.sha256()
    for g, group in enumerate(manifest["groups"]):
        # A frozen group kept as a digest (no rank file holds it): the manifest's digest instead.
        h.update(group.get("frozen_values_digest", "").encode())
        for name in ("master", "m", "v"):
            whole = np.zeros(group["numel"], dtype=np.float32)
            for rank, (begin, count) in enumerate(group["file_ranges"]):
                path = f"group_{g:03d}/{name}"
                if count and path in files[rank]:  # a frozen group has no m and v
                    whole[begin : begin + count] = files[rank][path][...][:count]
            h.update(whole.tobytes())
    return h.hexdigest()


def model_digest(model_dir: str) -> str:
    tensors = {}
    for path in sorted(glob.glob(f"{model_dir}/*.h5")):
        with h5py.File(path, "r") as f:
            for name in f:
                tensors[name] = np.asarray(f[name][...]).tobytes()
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name])
    return h.hexdigest()


if __name__ == "__main__":
    kind, path = sys.argv[1], sys.argv[2]
    print(checkpoint_digest(path) if kind == "checkpoint" else model_digest(path))
