"""What the GGUF tests share (test_gguf.py, tests/realmodel): transformers' GGUF loader as the
reference model, and a zerotrain model directory's tensors read back."""

import contextlib
import json
import os
import unittest.mock


@contextlib.contextmanager
def gguf_files_in_memory():
    """Within it, gguf.GGUFReader (transformers' GGUF loader's too) reads the whole file into
    memory instead of mapping it: the same fields and tensors, three times faster on a 150k-token
    vocabulary. The reader slices its buffer once per value, and every slice of an np.memmap costs
    bookkeeping that a plain array's does not. The reader's `np` is numpy itself: within the
    block, numpy.memmap is replaced for the whole process (read-only files only)."""
    import gguf
    import numpy as np

    def read(path, mode="r"):
        if mode != "r":
            raise ValueError(f"{path}: only read-only GGUF files are read into memory")
        return np.fromfile(path, dtype=np.uint8)

    with unittest.mock.patch.object(gguf.gguf_reader.np, "memmap", read):
        yield


def read_gguf(path):
    """gguf.GGUFReader on the file at `path`, read into memory (gguf_files_in_memory)."""
    import gguf
    with gguf_files_in_memory():
        return gguf.GGUFReader(path)


def transformers_gguf_model(path):
    """transformers' GGUF loader on the file at `path`, the tie restored when the file has no
    output.weight (transformers 4.46 leaves lm_head random then), every weight rounded to bf16
    as zerotrain's model directory stores it."""
    import torch
    import transformers
    with gguf_files_in_memory():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32)
    if not any(t.name == "output.weight" for t in read_gguf(path).tensors):
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model.eval()


# HDF5's bf16 as zerotrain stores it: 2 bytes little-endian, sign bit 15, 8 exponent bits at 7
# with bias 127, 7 mantissa bits.
BF16_FIELDS = (15, 7, 8, 0, 7)


def is_bf16(stored):
    import h5py
    return isinstance(stored, h5py.h5t.TypeFloatID) and stored.get_size() == 2 and \
        stored.get_fields() == BF16_FIELDS and stored.get_ebias() == 127 and \
        stored.get_order() == h5py.h5t.ORDER_LE


def model_dir_tensors(model_dir):
    """Every tensor of a zerotrain model directory as float32 (bf16 widens exactly). A bf16
    tensor's bits are read as they are and shifted into float32's upper half, which is the
    widening HDF5's own conversion computes element by element, five times slower."""
    import h5py
    import numpy as np
    index = json.load(open(os.path.join(model_dir, "model.h5.index.json")))["weight_map"]
    out = {}
    for name, shard in index.items():
        with h5py.File(os.path.join(model_dir, shard), "r") as f:
            stored = f[name].id.get_type()
            if is_bf16(stored):
                bits = np.empty(f[name].shape, dtype="<u2")
                f[name].id.read(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=stored)
                out[name] = (bits.astype(np.uint32) << 16).view(np.float32)
            else:
                out[name] = f[name].astype("float32")[()]
    return out
