"""What the GGUF tests share (test_gguf.py, tests/realmodel): transformers' GGUF loader as the
reference model, a zerotrain model directory's tensors read back, and definitions taken from
llama.cpp's own Python sources (its converter, gguf-py) to run as references."""

import ast
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


def model_dir_tensors(model_dir):
    """Every tensor of a zerotrain model directory as float32 (bf16 widens exactly)."""
    import h5py
    from llama_reference import read_float32
    index = json.load(open(os.path.join(model_dir, "model.h5.index.json")))["weight_map"]
    out = {}
    for name, shard in index.items():
        with h5py.File(os.path.join(model_dir, shard), "r") as f:
            out[name] = read_float32(f[name])
    return out


def python_classes(path):
    """The top-level classes of a Python file, by name (their AST, not run)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def run_definitions(path, nodes, scope):
    """Compiles the definitions `nodes` taken from `path` alone into `scope` (the names they use
    from their module given there) and returns it: llama.cpp's converter and gguf-py import
    packages Debian's torch lacks, so a test runs only the parts it compares with. Annotations are
    postponed (never evaluated) and a function's decorators dropped (a static method runs as a
    plain function)."""
    for node in nodes:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
    future = ast.ImportFrom(module="__future__", names=[ast.alias("annotations")], level=0)
    module = ast.fix_missing_locations(ast.Module(body=[future] + list(nodes), type_ignores=[]))
    exec(compile(module, path, "exec"), scope)
    return scope


def class_constant(path, class_name, name):
    """The literal value class `class_name` in `path` assigns to its attribute `name` (Gemma3Model's
    norm_shift); one missing is an AssertionError naming the file."""
    cls = python_classes(path).get(class_name)
    for node in cls.body if cls else []:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path}: {class_name} assigns no {name}")


def class_methods(path, class_name, names, scope):
    """The methods `names` of class `class_name` in `path`, run as plain functions in `scope`
    (run_definitions); a method missing is an AssertionError naming the file."""
    cls = python_classes(path).get(class_name)
    methods = [n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef)
               and n.name in names]
    assert len(methods) == len(names), f"{path}: {class_name} lacks {names}"
    run_definitions(path, methods, scope)
    return [scope[n] for n in names]

