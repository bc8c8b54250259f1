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
HDF5 shards; bf16-typed datasets are read as exact float32 (`read_float32`).

Fault injection (proves the oracle is sensitive, see test_oracle.py): the environment variable
ZT_ORACLE_BREAK=rope pairs RoPE dimensions interleaved (GPT-J style: (0,1), (2,3), ...) instead
of rotate-half ((i, i+hd/2)); ZT_ORACLE_BREAK=eps uses 10·rms_norm_eps; ZT_ORACLE_BREAK=act keeps
the 16-bit-storage reference's activations in float32.

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


# HDF5's bf16 as zerotrain stores it: 2 bytes little-endian, sign bit 15, 8 exponent bits at 7
# with bias 127, 7 mantissa bits.
BF16_FIELDS = (15, 7, 8, 0, 7)


def read_float32(dataset):
    """An HDF5 dataset as exact float32. bf16's bits are read as they are and shifted into
    float32's upper half: the widening HDF5's own conversion (`astype('float32')`, kept for
    every other type) computes element by element, twenty times slower."""
    stored = dataset.id.get_type()
    if isinstance(stored, h5py.h5t.TypeFloatID) and stored.get_size() == 2 and \
            stored.get_fields() == BF16_FIELDS and stored.get_ebias() == 127 and \
            stored.get_order() == h5py.h5t.ORDER_LE:
        bits = np.empty(dataset.shape, dtype="<u2")
        dataset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=stored)
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return dataset.astype("float32")[()]


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
                values = read_float32(f[name])
                weights[name] = torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
    return weights


def round_to_bf16(t):
    """Nearest bf16 value (ties to even), returned in t's dtype."""
    return t.to(torch.float32).to(torch.bfloat16).to(t.dtype)


def round_to_fp16(t):
    """Nearest IEEE fp16 value (ties to even, ±inf beyond 65504), returned in t's dtype."""
    return t.to(torch.float32).to(torch.float16).to(t.dtype)


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
    """Mean natural-log next-token cross-entropy over the B·T positions (those whose target is not
    PyTorch's ignore_index, -100, when a loss mask left some out)."""
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def loss_and_grads(weights, config, inputs, targets, trainable=None, loss_fn=None):
    """(logits [B·T, V], mean loss, {name: d loss / d tensor}) at the given weights. With
    `trainable` (a set of names), only those tensors require a gradient (requires_grad=False on
    the rest, as a partial fine-tune sets it) and only theirs are returned. loss_fn(logits
    [B, T, V], targets [B, T]) gives the loss instead of mean_cross_entropy."""
    leaves = {n: t.detach().clone().requires_grad_(trainable is None or n in trainable)
              for n, t in weights.items()}
    logits = forward(leaves, config, inputs)
    loss = (loss_fn or mean_cross_entropy)(logits, targets)
    loss.backward()
    grads = {n: t.grad.detach() for n, t in leaves.items() if t.requires_grad}
    return logits.detach().reshape(-1, logits.shape[-1]), loss.item(), grads


# ---------------------------------------------------------------------------------------------
# 16-bit activation storage (zerotrain --activations bf16 | fp16)
# ---------------------------------------------------------------------------------------------
#
# The same equations with every activation and activation gradient stored as torch.bfloat16 (or
# torch.float16) and
# every op computed in float32, rounding where backend.h's storage contract says: an op reads its
# inputs widened, computes in float32 and rounds its output once; an accumulating output (+=) is
# read, added to in float32 and rounded once. The forward and the backward are written out op by
# op so that these rounding points are explicit; the derivative of each op comes from autograd
# on its float32 definition (the attention's from the flash-attention identity
# ds = p·(dp − rowsum(dout·out)) with the stored out, as every fused attention computes it).
# Weight gradients accumulate in float32. ZT_ORACLE_BREAK=act rounds nothing (a check that the
# oracle test can fail).

def _stored(t, dtype):
    """t rounded to the storage type `dtype` (torch.bfloat16 or torch.float16), kept as float32
    (the stored value, widened)."""
    if _break_mode() == "act":
        return t
    return t.to(dtype).float()


def round_to(dtype):
    """The working-weight rounding of a storage type: round_to_bf16 or round_to_fp16."""
    return round_to_bf16 if dtype == torch.bfloat16 else round_to_fp16


def _rms_f32(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))


def _vjp(fn, inputs, grad_out):
    """Gradients of sum(fn(*inputs)·grad_out) with respect to every input (float32)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    return torch.autograd.grad(out, leaves, grad_out)


def _attention_f32(q, k, v, causal):
    """q [B,T,H,hd], k/v [B,T,Hkv,hd] -> (out [B,T,H,hd], probs [B,H,T,T])."""
    H, Hkv, hd = q.shape[2], k.shape[2], q.shape[3]
    kk = k.repeat_interleave(H // Hkv, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(H // Hkv, dim=2).transpose(1, 2)
    scores = (q.transpose(1, 2) @ kk.transpose(-1, -2)) / math.sqrt(hd)
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return (probs @ vv).transpose(1, 2), probs


def _attention_backward_f32(dout, q, k, v, out, probs):
    """dq, dk, dv of _attention_f32 with D = rowsum(dout·out) from the stored out."""
    H, Hkv, hd = q.shape[2], k.shape[2], q.shape[3]
    group = H // Hkv
    kk = k.repeat_interleave(group, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(group, dim=2).transpose(1, 2)
    do = dout.transpose(1, 2)                                     # [B,H,T,hd]
    dp = do @ vv.transpose(-1, -2)                                # [B,H,T,T]
    D = (do * out.transpose(1, 2)).sum(dim=-1, keepdim=True)
    ds = probs * (dp - D) / math.sqrt(hd)
    dq = (ds @ kk).transpose(1, 2)
    dkk = (ds.transpose(-1, -2) @ q.transpose(1, 2))              # [B,H,T,hd]
    dvv = (probs.transpose(-1, -2) @ do)
    B, T = q.shape[0], q.shape[1]
    dk = dkk.view(B, Hkv, group, T, hd).sum(dim=2).transpose(1, 2)
    dv = dvv.view(B, Hkv, group, T, hd).sum(dim=2).transpose(1, 2)
    return dq, dk, dv


def loss_and_grads_16bit_storage(weights, config, inputs, targets, dtype):
    """loss_and_grads with activations stored in `dtype` (torch.bfloat16: --activations bf16, or
    torch.float16: --activations fp16) at the weights rounded to that type."""
    w = {n: round_to(dtype)(t.detach()).float() for n, t in weights.items()}

    def store(t):  # what the engine stores: t rounded to the storage type
        return _stored(t, dtype)

    eps = float(config["rms_norm_eps"])
    theta = float(config.get("rope_theta", 10000.0))
    B, T = inputs.shape
    D = config["hidden_size"]
    H = config["num_attention_heads"]
    Hkv = config["num_key_value_heads"]
    hd = D // H
    L = config["num_hidden_layers"]
    cos, sin = rope_cos_sin(T, hd, theta, torch.float32)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    rope = lambda t: apply_rope(t, cos, sin)  # noqa: E731
    grads = {n: torch.zeros_like(t) for n, t in w.items()}

    # Forward, keeping what the backward reads.
    x = store(w["model.embed_tokens.weight"][inputs])
    saved = []
    for i in range(L):
        p = f"model.layers.{i}."
        a = {"x": x}
        a["xn"] = store(_rms_f32(x, w[p + "input_layernorm.weight"], eps))
        a["q"] = store(rope(store(a["xn"] @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd)))
        a["k"] = store(rope(store(a["xn"] @ w[p + "self_attn.k_proj.weight"].T)
                            .view(B, T, Hkv, hd)))
        a["v"] = store(a["xn"] @ w[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, hd)
        att, a["probs"] = _attention_f32(a["q"], a["k"], a["v"], causal)
        a["att"] = store(att)
        # A residual add happens in its projection's GEMM: the fp32 sum, rounded once.
        a["x2"] = store(a["att"].reshape(B, T, D) @ w[p + "self_attn.o_proj.weight"].T + x)
        a["xn2"] = store(_rms_f32(a["x2"], w[p + "post_attention_layernorm.weight"], eps))
        a["gate"] = store(a["xn2"] @ w[p + "mlp.gate_proj.weight"].T)
        a["up"] = store(a["xn2"] @ w[p + "mlp.up_proj.weight"].T)
        a["h"] = store(torch.nn.functional.silu(a["gate"]) * a["up"])
        x = store(a["h"] @ w[p + "mlp.down_proj.weight"].T + a["x2"])
        saved.append(a)
    xf = store(_rms_f32(x, w["model.norm.weight"], eps))
    logits = store(xf @ w["lm_head.weight"].T)
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    loss = torch.nn.functional.cross_entropy(flat.double(), targets.reshape(-1))

    # Backward. dlogits = (softmax − onehot)/C over the C counted targets, stored in that type; a
    # target left out (PyTorch's negative ignore_index) gets a zero row.
    N = flat.shape[0]
    flat_targets = targets.reshape(-1)
    counted = flat_targets >= 0
    dlogits = torch.softmax(flat, dim=-1)
    dlogits[torch.arange(N)[counted], flat_targets[counted]] -= 1.0
    dlogits[~counted] = 0.0
    dlogits = store(dlogits * (1.0 / int(counted.sum()))).view(B, T, V)

    def linear_back(dy, xin, name, dx=None):
        """dW += dyᵀ·x (float32); returns the stored dx (= or += dy·W, rounded once)."""
        grads[name] += dy.reshape(-1, dy.shape[-1]).T @ xin.reshape(-1, xin.shape[-1])
        prod = dy @ w[name]
        return store(prod if dx is None else dx + prod)

    def rms_back(dres, dxn, xin, name):
        dx, dg = _vjp(lambda t, g: _rms_f32(t, g, eps), (xin, w[name]), dxn)
        grads[name] += dg
        return store(dres + dx)

    dxf = linear_back(dlogits, xf, "lm_head.weight")
    dres = rms_back(torch.zeros_like(dxf), dxf, x, "model.norm.weight")
    for i in reversed(range(L)):
        p = f"model.layers.{i}."
        a = saved[i]
        dh = linear_back(dres, a["h"], p + "mlp.down_proj.weight")
        dgate, dup = _vjp(lambda g, u: torch.nn.functional.silu(g) * u, (a["gate"], a["up"]), dh)
        dgate, dup = store(dgate), store(dup)
        dxn = linear_back(dgate, a["xn2"], p + "mlp.gate_proj.weight")
        dxn = linear_back(dup, a["xn2"], p + "mlp.up_proj.weight", dxn)
        dres = rms_back(dres, dxn, a["x2"], p + "post_attention_layernorm.weight")
        datt = linear_back(dres, a["att"].reshape(B, T, D), p + "self_attn.o_proj.weight")
        dq, dk, dv = _attention_backward_f32(datt.view(B, T, H, hd), a["q"], a["k"], a["v"],
                                             a["att"], a["probs"])
        dq, dk, dv = store(dq), store(dk), store(dv)
        # RoPE's transpose, then rounded (the rotation is linear: its vjp is the transpose).
        dq = store(_vjp(rope, (torch.zeros_like(dq),), dq)[0]).reshape(B, T, D)
        dk = store(_vjp(rope, (torch.zeros_like(dk),), dk)[0]).reshape(B, T, Hkv * hd)
        dv = dv.reshape(B, T, Hkv * hd)
        dxn = linear_back(dq, a["xn"], p + "self_attn.q_proj.weight")
        dxn = linear_back(dk, a["xn"], p + "self_attn.k_proj.weight", dxn)
        dxn = linear_back(dv, a["xn"], p + "self_attn.v_proj.weight", dxn)
        dres = rms_back(dres, dxn, a["x"], p + "input_layernorm.weight")
    grads["model.embed_tokens.weight"].index_add_(0, inputs.reshape(-1), dres.reshape(-1, D))
    return (flat.detach().double(), loss.item(), {n: g.double() for n, g in grads.items()})


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
                 bf16_working, fp16_working=False):
    """Losses of `steps` AdamW steps on one batch, the way zerotrain trains.

    Master weights (the optimizer's parameters) stay in the weights' dtype. Each step computes
    the loss and gradients at the working weights - the masters themselves, or the masters
    rounded to bf16 when `bf16_working` (zerotrain's bf16 mode) or to fp16 when `fp16_working`
    (its fp16 mode; the loss scale is a power of two and nothing overflows, so it changes no
    value) - and hands those gradients to the optimizer as the masters' gradients. Clipping is
    off. Returns (one loss per step, each measured before that step's update; (logits, loss,
    grads) of the first step).
    """
    rounding = round_to_bf16 if bf16_working else round_to_fp16 if fp16_working else None
    masters = {n: t.detach().clone().requires_grad_(True) for n, t in weights.items()}
    optimizer = make_adamw(masters, lr, weight_decay, betas, eps)
    losses = []
    first = None
    for _ in range(steps):
        working = {n: (rounding(t.detach()) if rounding else t.detach())
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


def adamw_clipped_trajectory(weights, config, tokens, trainable, steps, hyper, clip,
                             working=None, loss_fn=None):
    """`steps` AdamW steps on one batch of windows (tokens [B, T + 1]) with only `trainable`
    (a set of names) requiring gradients, the gradients clipped as the Hugging Face Trainer and
    DeepSpeed clip them: torch.nn.utils.clip_grad_norm_ over every trainable gradient, which
    returns the norm before clipping and scales by clip / (norm + 1e-6) when that is below 1
    (clip <= 0: no clipping). hyper = (lr, weight_decay, betas, eps), the rate constant.
    working: how the working weights the gradients are taken at come from the masters (None: the
    masters themselves; round_to_fp16: fp16 training's). loss_fn: as loss_and_grads'. Returns (one
    loss per step, measured before its update; each step's norm before clipping;
    the final masters)."""
    lr, weight_decay, betas, eps = hyper
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    masters = {n: t.detach().clone().requires_grad_(n in trainable) for n, t in weights.items()}
    optimizer = make_adamw({n: masters[n] for n in trainable}, lr, weight_decay, betas, eps)
    losses, norms = [], []
    for _ in range(steps):
        at = {n: (working(t.detach()) if working else t.detach()) for n, t in masters.items()}
        _, loss, grads = loss_and_grads(at, config, inputs, targets, trainable, loss_fn)
        if set(grads) != set(trainable):
            raise AssertionError("the reference computed gradients of frozen tensors")
        losses.append(loss)
        for n in trainable:
            masters[n].grad = grads[n]
        norm = torch.nn.utils.clip_grad_norm_([masters[n] for n in sorted(trainable)],
                                              clip if clip > 0 else math.inf)
        norms.append(norm.item())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses, norms, {n: t.detach() for n, t in masters.items()}
