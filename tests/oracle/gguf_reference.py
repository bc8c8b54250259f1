"""What the GGUF tests share (test_gguf.py, tests/realmodel): transformers' GGUF loader as the
reference model, and a zerotrain model directory's tensors read back."""

import json
import os


def transformers_gguf_model(path):
    """transformers' GGUF loader on the file at `path`, the tie restored when the file has no
    output.weight (transformers 4.46 leaves lm_head random then), every weight rounded to bf16
    as zerotrain's model directory stores it."""
    import gguf
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32)
    if not any(t.name == "output.weight" for t in gguf.GGUFReader(path).tensors):
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model.eval()


def model_dir_tensors(model_dir):
    """Every tensor of a zerotrain model directory as float32 (bf16 widens exactly)."""
    import h5py
    index = json.load(open(os.path.join(model_dir, "model.h5.index.json")))["weight_map"]
    out = {}
    for name, shard in index.items():
        with h5py.File(os.path.join(model_dir, shard), "r") as f:
            out[name] = f[name].astype("float32")[()]
    return out
