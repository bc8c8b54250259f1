"""Plain-PyTorch reference of zerotrain's model math (the oracle).

Written from the Llama equations, not from zerotrain's code and without `transformers`:

    x = embed_tokens[tokens]
    for each layer:
        h = RMSNorm(x) ; q, k, v = h Wqᵀ, h Wkᵀ, h Wvᵀ ; RoPE(q), RoPE(k) (HF rotate-half)
        x = x + softmax(q kᵀ / sqrt(hd) + causal) v Woᵀ      (GQA: kv heads repeated)
        h = RMSNorm(x) ; x = x + (silu(h Wgᵀ) * (h Wuᵀ)) Wdᵀ
    logits = RMSNorm(x) lm_headᵀ                              (untied head)

RMSNorm(x) = x / sqrt(mean(x²) + eps) * weight, eps from config.json. RoPE uses HF's
inv_freq = 1 / theta ** (arange(0, hd, 2, int64).float() / hd) computed in float32 (as HF
does); the angles t·inv_freq, their cos/sin and everything else are computed in the dtype of the
weights handed in (float64 for the oracle, so the reference is far more precise than the fp32
engine).

The model directory (docs/ARCHITECTURE.md §3) is read with h5py: config.json, model.h5.index.json and the
HDF5 shards; bf16-typed datasets are read as exact float32 via `ds.astype('float32')`.

Fault injection (proves the oracle is sensitive, see test_oracle.py): the environment variable
ZT_ORACLE_BREAK=rope pairs RoPE dimensions interleaved (GPT-J style: (0,1), (2,3), ...) instead
of rotate-half ((i, i+hd/2)); ZT_ORACLE_BREAK=eps uses 10·rms_norm_eps.

AdamW: `make_adamw` builds torch.optim.AdamW with the two parameter groups zerotrain uses
(weight decay on the q/k/v/o and gate/up/down projections and lm_head; none on the norms and
the embedding). torch's AdamW applies the decoupled decay first, p ← p·(1 − lr·wd), and then
p ← p − lr·m̂/(sqrt(v̂) + eps) with m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ). Expanded, that is
p − lr·m̂/(sqrt(v̂)+eps) − lr·wd·p with the pre-update p: exactly backend.h's
"master −= lr·(m/(1−β1ᵗ))/(sqrt(v/(1−β2ᵗ)) + eps) + lr·wd·master". `adamw_formula_step` is that
header formula written out by hand; `check_torch_adamw_matches_header` verifies numerically
that the two agree (the oracle test runs it first).
"""

import json
import math
import os

import h5py
import numpy as np
import torch


# ---------------------------------------------------------------------------------------------
# Model directory
# ---------------------------------------------------------------------------------------------

def load_config(model_dir):
    """config.json as a dict (HF LlamaConfig keys)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def load_weights(model_dir, dtype=torch.float64):
    """All tensors of a model directory, by HF name, as `dtype` tensors (exact upcasts)."""
    with open(os.path.join(model_dir, "model.h5.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    weights = {}
    by_file = {}
    for name, shard in weight_map.items():
        by_file.setdefault(shard, []).append(name)
    for shard, names in sorted(by_file.items()):
        with h5py.File(os.path.join(model_dir, shard), "r") as f:
            for name in names:
                # astype('float32') makes HDF5 convert bf16 (or fp32) storage to exact float32.
                values = f[name].astype("float32")[()]
                weights[name] = torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
    return weights


def round_to_bf16(t):
    """Nearest bf16 value (ties to even), returned in t's dtype."""
    return t.to(torch.float32).to(torch.bfloat16).to(t.dtype)


def expected_tensor_names(config):
    """HF tensor names of a LlamaForCausalLM with this config (untied head)."""
    names = ["model.embed_tokens.weight"]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight"]
        names += [p + f"self_attn.{x}_proj.weight" for x in ("q", "k", "v", "o")]
        names += [p + "post_attention_layernorm.weight"]
        names += [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
    names += ["model.norm.weight", "lm_head.weight"]
    return names


# ---------------------------------------------------------------------------------------------
# Model math
# ---------------------------------------------------------------------------------------------

def _break_mode():
    return os.environ.get("ZT_ORACLE_BREAK", "")


def rms_norm(x, weight, eps):
    if _break_mode() == "eps":
        eps = eps * 10.0
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def rope_cos_sin(seq_len, head_dim, theta, dtype):
    """cos, sin of shape [T, hd] for positions 0..T-1 (HF layout: the hd/2 angles twice)."""
    # HF's inverse frequencies, computed in float32 exactly as transformers does.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    positions = torch.arange(seq_len, dtype=dtype)
    angles = torch.outer(positions, inv_freq.to(dtype))  # [T, hd/2]
    emb = torch.cat((angles, angles), dim=-1)  # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x: [B, T, H, hd]; cos/sin: [T, hd]."""
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    if _break_mode() == "rope":
        # Deliberately wrong convention: rotate interleaved pairs (x[2i], x[2i+1]) by angle i.
        half = x.shape[-1] // 2
        c, s = cos[..., :half], sin[..., :half]
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((even * c - odd * s, odd * c + even * s), dim=-1)
        return rotated.flatten(-2)
    return x * cos + rotate_half(x) * sin


def attention(x, w, prefix, config, cos, sin):
    """Causal GQA self-attention of one layer; x is the normed input [B, T, D]."""
    B, T, D = x.shape
    H = config["num_attention_heads"]
    Hkv = config["num_key_value_heads"]
    hd = D // H
    q = (x @ w[prefix + "q_proj.weight"].T).view(B, T, H, hd)
    k = (x @ w[prefix + "k_proj.weight"].T).view(B, T, Hkv, hd)
    v = (x @ w[prefix + "v_proj.weight"].T).view(B, T, Hkv, hd)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    # GQA: query head h reads kv head h // (H / Hkv) (HF's repeat_kv).
    groups = H // Hkv
    k = k.repeat_interleave(groups, dim=2)
    v = v.repeat_interleave(groups, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(B, T, D)
    return out @ w[prefix + "o_proj.weight"].T


def mlp(x, w, prefix):
    gate = x @ w[prefix + "gate_proj.weight"].T
    up = x @ w[prefix + "up_proj.weight"].T
    return (torch.nn.functional.silu(gate) * up) @ w[prefix + "down_proj.weight"].T


def forward(weights, config, tokens):
    """Logits [B, T, V] for integer tokens [B, T]."""
    eps = float(config["rms_norm_eps"])
    theta = float(config.get("rope_theta", 10000.0))
    D = config["hidden_size"]
    hd = D // config["num_attention_heads"]
    dtype = weights["model.embed_tokens.weight"].dtype
    cos, sin = rope_cos_sin(tokens.shape[1], hd, theta, dtype)
    x = weights["model.embed_tokens.weight"][tokens]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, weights[p + "input_layernorm.weight"], eps), weights,
                          p + "self_attn.", config, cos, sin)
        x = x + mlp(rms_norm(x, weights[p + "post_attention_layernorm.weight"], eps), weights,
                    p + "mlp.")
    x = rms_norm(x, weights["model.norm.weight"], eps)
    return x @ weights["lm_head.weight"].T


def mean_cross_entropy(logits, targets):
    """Mean natural-log next-token cross-entropy over all B·T positions."""
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def loss_and_grads(weights, config, inputs, targets):
    """(logits [B·T, V], mean loss, {name: d loss / d tensor}) at the given weights."""
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in weights.items()}
    logits = forward(leaves, config, inputs)
    loss = mean_cross_entropy(logits, targets)
    loss.backward()
    grads = {n: t.grad.detach() for n, t in leaves.items()}
    return logits.detach().reshape(-1, logits.shape[-1]), loss.item(), grads


# ---------------------------------------------------------------------------------------------
# AdamW
# ---------------------------------------------------------------------------------------------

def decays(name):
    """zerotrain's weight-decay rule: projections and the LM head decay; norms, embedding not."""
    return name.endswith("_proj.weight") or name == "lm_head.weight"


def make_adamw(masters, lr, weight_decay, betas, eps):
    """torch.optim.AdamW over the master tensors (dict name -> leaf), two parameter groups."""
    decay = [t for n, t in masters.items() if decays(n)]
    no_decay = [t for n, t in masters.items() if not decays(n)]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=betas, eps=eps, foreach=False)


def adamw_formula_step(master, m, v, grad, step, lr, weight_decay, betas, eps):
    """backend.h's AdamW written out: returns new (master, m, v)."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * grad
    v = b2 * v + (1 - b2) * grad * grad
    m_hat = m / (1 - b1 ** step)
    v_hat = v / (1 - b2 ** step)
    master = master - (lr * m_hat / (torch.sqrt(v_hat) + eps) + lr * weight_decay * master)
    return master, m, v


def check_torch_adamw_matches_header(steps=5, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95),
                                     eps=1e-8):
    """Max |torch AdamW − header formula| over `steps` steps on random float64 data."""
    gen = torch.Generator().manual_seed(7)
    start = torch.randn(1000, generator=gen, dtype=torch.float64)
    grads = [torch.randn(1000, generator=gen, dtype=torch.float64) * 1e-3 for _ in range(steps)]
    worst = 0.0
    for wd in (weight_decay, 0.0):
        p = start.clone().requires_grad_(True)
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
        master, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
        for t, g in enumerate(grads, start=1):
            p.grad = g.clone()
            opt.step()
            master, m, v = adamw_formula_step(master, m, v, g, t, lr, wd, betas, eps)
            worst = max(worst, (p.detach() - master).abs().max().item())
    return worst


def adamw_losses(weights, config, inputs, targets, steps, lr, weight_decay, betas, eps,
                 bf16_working):
    """Losses of `steps` AdamW steps on one batch, the way zerotrain trains.

    Master weights (the optimizer's parameters) stay in the weights' dtype. Each step computes
    the loss and gradients at the working weights - the masters themselves, or the masters
    rounded to bf16 when `bf16_working` (zerotrain's bf16 mode) - and hands those gradients to
    the optimizer as the masters' gradients. Clipping is off. Returns (one loss per step, each
    measured before that step's update; (logits, loss, grads) of the first step).
    """
    masters = {n: t.detach().clone().requires_grad_(True) for n, t in weights.items()}
    optimizer = make_adamw(masters, lr, weight_decay, betas, eps)
    losses = []
    first = None
    for _ in range(steps):
        working = {n: (round_to_bf16(t.detach()) if bf16_working else t.detach())
                   for n, t in masters.items()}
        logits, loss, grads = loss_and_grads(working, config, inputs, targets)
        if first is None:
            first = (logits, loss, grads)
        losses.append(loss)
        for n, t in masters.items():
            t.grad = grads[n].to(t.dtype)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses, first
