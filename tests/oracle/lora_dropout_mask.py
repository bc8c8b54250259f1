"""The LoRA dropout mask docs/lora.md describes, written here from its description (label oracle):
test_lora.py's dropout check gives it to PEFT, whose lora_dropout modules then drop what
zerotrain's do."""

import numpy as np
import torch

from oracle_harness import splitmix64


def dropout_keep(seed, layer, target, first_token, rows, cols, p):
    """The kept elements of docs/lora.md's mask, [rows, cols]: stream = mix(mix(seed) + 8·layer +
    target); element (first_token + i)·cols + j kept when the top 24 bits of
    mix(stream ^ mix(element)), over 2^24, are >= p (as fp32). mix is splitmix64 (wrapping)."""
    with np.errstate(over="ignore"):
        stream = splitmix64(splitmix64(np.uint64(seed)) + np.uint64(8 * layer + target))
        elements = np.uint64(first_token * cols) + np.arange(rows * cols, dtype=np.uint64)
    top24 = (splitmix64(stream ^ splitmix64(elements)) >> np.uint64(40)).astype(np.float32)
    uniform = top24 / np.float32(16777216)
    return torch.from_numpy((uniform >= np.float32(p)).reshape(rows, cols))


class MaskedDropout(torch.nn.Module):
    """PEFT's lora_dropout replaced by zerotrain's mask for one (layer, projection)."""
    step = 0  # the current optimizer step (1-based), set by the training loop

    def __init__(self, layer, target, p, seed):
        super().__init__()
        self.layer, self.target, self.p, self.seed = layer, target, p, seed

    def forward(self, x):
        rows, cols = x.shape[-2], x.shape[-1]
        keep = dropout_keep(self.seed, self.layer, self.target, (MaskedDropout.step - 1) * rows,
                            rows, cols, self.p)
        scale = 1.0 / (1.0 - float(np.float32(self.p)))
        return x * keep.to(x.dtype) * scale
