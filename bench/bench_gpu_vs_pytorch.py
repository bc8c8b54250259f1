#!/usr/bin/env python3
"""zerotrain's training throughput on a GPU beside PyTorch training the same Llama on that GPU.

In one call: `zerotrain train` runs the preset (stage 0, one rank, bf16 with fp32 masters), and
PyTorch trains a model of the same shapes (taken from `zerotrain estimate --json`) with SDPA
attention and fused AdamW. PyTorch's rows (--modes):
  eager            fp32 parameters under bf16 autocast;
  compile          the same with the forward and the loss under torch.compile (default mode);
  compile-max      the same under mode "max-autotune-no-cudagraphs";
and each with "+bf16" for bf16 parameters (what FSDP2's mixed precision computes on), e.g.
compile-max+bf16. On a GPU the SDPA backend is forced to cuDNN's where torch has the switch
(torch.nn.attention.sdpa_kernel, torch 2.3 on), and the JSON records the backend asked for and
the attention kernels that ran (a profile of one step: `sdpa_kernels`). Each compiled row starts
from a reset Dynamo (torch._dynamo.reset), so that no row runs on another's graphs or past the
recompile limit. Every row runs --repeats times, the rows in alternating order (forward, then
reversed; the JSON's `run_order`), and the figure is the median tokens/s with its spread (min,
max); the strongest PyTorch row is named.
Every figure uses one FLOP count per token, the one zerotrain reports (torchtitan's
6·N_non-embedding + 12·L·D·T) and one peak (default 989 TFLOP/s, H100 SXM / H200 dense bf16),
so the ratio of tokens/s is the figure that counts. The first --warmup steps (at least one) are
not timed.
Each row is printed, and --json-out rewritten, as soon as it is measured: a call cut short keeps
the rows it finished.

  python3 bench/bench_gpu_vs_pytorch.py --zerotrain BUNDLE/bin/zerotrain --preset 1b \\
      --seq-len 2048 --micro-batch 4 --steps 8 --json-out result.json

--device cpu runs the same on the CPU (the dry run of bench/gpu_session.sh); an old PyTorch
without SDPA or torch.compile falls back to explicit attention and skips the compiled row.
"""
import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

# SDPA takes grouped-query K/V directly from torch 2.5 on.
_SDPA_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


def sets_option(zerotrain_args, option):
    """Whether --zerotrain-arg gives `option` (as --option X or --option=X)."""
    return any(a.split("=")[0] == option for a in zerotrain_args)


# A row's options that add a train option, and the option each adds.
ROW_FLAGS = {"nondeterministic": ["--deterministic", "false"], "graphs": ["--cuda-graphs", "on"]}


def row_parts(row, zerotrain_args=()):
    """A zerotrain row's --attention value and its options: "bf16" (--activations bf16, with a
    named attention: without one the row runs the backend's default activations),
    "nondeterministic" (--deterministic false) and "graphs" (--cuda-graphs on), neither of which
    --zerotrain-arg may set too. ValueError naming the row otherwise."""
    attention, *options = row.split("+")
    unknown = set(options) - {"bf16"} - set(ROW_FLAGS)
    if unknown:
        raise ValueError(f"zerotrain row {row!r}: unknown {sorted(unknown)} "
                         "(rows are ATTENTION[+bf16][+nondeterministic][+graphs])")
    if "bf16" in options and not attention:
        raise ValueError(f"zerotrain row {row!r}: +bf16 needs an attention (e.g. fused+bf16); "
                         "the defaults' row runs the backend's own activations")
    for option, flag in ROW_FLAGS.items():
        if option in options and sets_option(zerotrain_args, flag[0]):
            raise ValueError(f"zerotrain row {row!r}: --zerotrain-arg sets {flag[0]} already")
    return attention, options


def zerotrain_command(args, data, out, row):
    """The train command of a zerotrain row: an --attention value, optionally with "+bf16" for
    --activations bf16 (e.g. "fused+bf16"); without it the row runs --activations fp32. An empty
    --attention runs zerotrain's defaults. "+nondeterministic" adds --deterministic false (e.g.
    "+nondeterministic": the defaults so), "+graphs" --cuda-graphs on. ValueError for a row
    row_parts refuses."""
    attention, options = row_parts(row, args.zerotrain_arg)
    activations = "bf16" if "bf16" in options else ""
    cmd = [args.zerotrain, "train", "--backend", args.backend, "--preset", args.preset,
           "--data", data, "--out", out, "--steps", str(args.steps),
           "--micro-batch", str(args.micro_batch), "--seq-len", str(args.seq_len),
           "--comm-timeout", "60", "--log-every", "1", "--seed", "1"] + args.zerotrain_arg
    for option in options:
        cmd += ROW_FLAGS.get(option, [])
    if attention:
        cmd += ["--attention", attention]
        # --zerotrain-arg's own choice stands (--activations X or --activations=X).
        if not sets_option(args.zerotrain_arg, "--activations"):
            cmd += ["--activations", activations or "fp32"]
    return cmd


def run_zerotrain(args, data, out, row):
    """zerotrain's steady tokens/s (steps after the first) and peak device memory for a row
    (zerotrain_command)."""
    cmd = zerotrain_command(args, data, out, row)
    print("zerotrain:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=args.timeout)
    steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    timed = steps[args.warmup:] or steps[-1:]
    tokens = sum(s["tokens"] for s in timed)
    seconds = sum(s["step_time_s"] for s in timed)
    # The categories' peaks plus the backend's own scratch, as PyTorch's peak counts its workspaces.
    device = max(sum(v for k, v in s["peak_memory_bytes"].items() if k not in ("host", "nvme"))
                 + s.get("backend_scratch_bytes", 0) for s in steps)
    return {"tokens_per_s": tokens / seconds, "peak_device_gib": device / 2**30,
            "loss_first": steps[0]["loss"], "loss_last": steps[-1]["loss"]}


class Llama(torch.nn.Module):
    """Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU) from an HF config dict."""

    def __init__(self, c):
        super().__init__()
        d, self.heads, self.kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd, self.eps = d // self.heads, c["rms_norm_eps"]
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.embed = torch.nn.Embedding(c["vocab_size"], d)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.q, layer.k = lin(d, d), lin(d, self.kv * self.hd)
            layer.v, layer.o = lin(d, self.kv * self.hd), lin(d, d)
            layer.gate, layer.up = lin(d, c["intermediate_size"]), lin(d, c["intermediate_size"])
            layer.down = lin(c["intermediate_size"], d)
            layer.norm1, layer.norm2 = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(d))
        self.head = lin(d, c["vocab_size"])
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.hd, 2).float() / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)  # moves with the model

    def rms(self, x, w):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * w

    def rope(self, x, cos, sin):
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat((-b, a), dim=-1) * sin

    def attend(self, q, k, v):
        if self.kv != self.heads and _SDPA_GQA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if self.kv != self.heads:
            k = k.repeat_interleave(self.heads // self.kv, dim=1)
            v = v.repeat_interleave(self.heads // self.kv, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        T = q.shape[-2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v

    def forward(self, tokens):
        B, T = tokens.shape
        freqs = torch.outer(torch.arange(T, device=tokens.device).float(), self.inv_freq)
        cos = torch.cat((freqs, freqs), -1).cos()
        sin = torch.cat((freqs, freqs), -1).sin()
        x = self.embed(tokens)
        for L in self.layers:
            h = self.rms(x, L.norm1)
            q = L.q(h).view(B, T, self.heads, self.hd).transpose(1, 2)
            k = L.k(h).view(B, T, self.kv, self.hd).transpose(1, 2)
            v = L.v(h).view(B, T, self.kv, self.hd).transpose(1, 2)
            a = self.attend(self.rope(q, cos, sin).to(v.dtype), self.rope(k, cos, sin).to(v.dtype), v)
            x = x + L.o(a.transpose(1, 2).reshape(B, T, -1))
            h = self.rms(x, L.norm2)
            x = x + L.down(F.silu(L.gate(h)) * L.up(h))
        return self.head(self.rms(x, self.norm))


def sdpa_backend(device):
    """(a factory of contexts that force cuDNN's SDPA where torch can, the backend's name)."""
    if device.type != "cuda":
        return contextlib.nullcontext, "cpu"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return (lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)), "cudnn (forced)"
    except (ImportError, AttributeError):
        return contextlib.nullcontext, "torch default (no sdpa_kernel switch)"


def run_pytorch(args, config, mode):
    """PyTorch's steady tokens/s and peak device memory for one --modes entry."""
    kind, _, params = mode.partition("+")
    device = torch.device(args.device)
    torch.manual_seed(1)
    # Built and initialised on the device where torch can (2.0 on): no host copy of the weights.
    new_torch = hasattr(torch, "set_default_device")
    with torch.device(device) if new_torch else contextlib.nullcontext():
        model = Llama(config)
    model = model.to(device)
    bf16_params = params == "bf16"
    if bf16_params:
        model = model.to(torch.bfloat16)
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **fused)
    vocab = config["vocab_size"]
    tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), device=device)
    autocast = device.type == "cuda" and not bf16_params

    def forward_loss(inputs, targets):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(inputs)
        return F.cross_entropy(logits.float().view(-1, vocab), targets.reshape(-1))

    loss_fn = forward_loss
    if kind.startswith("compile") and hasattr(torch, "_dynamo"):
        torch._dynamo.reset()  # this row's graphs only, and the recompile limit afresh
    if kind == "compile":
        loss_fn = torch.compile(forward_loss)
    elif kind == "compile-max":
        loss_fn = torch.compile(forward_loss, mode="max-autotune-no-cudagraphs")
    elif kind != "eager":
        raise ValueError(f"unknown PyTorch mode {mode!r}")
    attention, backend_name = sdpa_backend(device)

    def step():
        with attention():
            loss = loss_fn(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses = []
    try:  # the first step: cuDNN's SDPA may refuse the shape (then torch's default runs)
        losses.append(float(step()))
    except RuntimeError as e:
        if attention is contextlib.nullcontext:
            raise
        attention = contextlib.nullcontext
        backend_name = f"torch default (cuDNN refused: {str(e).splitlines()[0][:120]})"
        opt.zero_grad(set_to_none=True)
        losses.append(float(step()))
    t0 = time.perf_counter()
    for i in range(1, args.steps):
        if i == args.warmup:
            sync()
            t0 = time.perf_counter()
        losses.append(float(step()))
    sync()
    seconds = time.perf_counter() - t0
    timed = max(1, args.steps - max(1, args.warmup))  # the first step is never timed
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
    kernels = attention_kernels(step, device)
    model = opt = None  # clears the closures' cells: the device memory is freed for the next row
    return {"tokens_per_s": timed * args.micro_batch * args.seq_len / seconds,
            "peak_device_gib": peak, "loss_first": losses[0], "loss_last": losses[-1],
            "sdpa_backend": backend_name, "sdpa_kernels": kernels,
            "params": "bf16" if bf16_params else "fp32"}


# Substrings of the GPU kernels of SDPA's backends (cuDNN's fused attention, FlashAttention,
# memory-efficient attention), lower-case.
ATTENTION_KERNEL_MARKS = ("cudnn", "fmha", "flash", "attention", "sdpa")


def attention_kernels(step, device):
    """The attention kernels one more step runs (torch.profiler over the GPU's activity): the
    backend that really ran, which the request alone does not say; [] on the CPU."""
    if device.type != "cuda":
        return []
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        names = {e.key for e in prof.key_averages()}
    except Exception as e:  # noqa: BLE001 (no profiler here: say so rather than guess)
        return [f"(not profiled: {type(e).__name__})"]
    return sorted(n for n in names if any(m in n.lower() for m in ATTENTION_KERNEL_MARKS))


def run_order(order, repeats):
    """[(repeat, who, what)]: every row of `order` in each of `repeats` rounds, forward in the
    even rounds and reversed in the odd ones, so that no row always runs first (a cold GPU) or
    last (a warm one)."""
    out = []
    for repeat in range(max(1, repeats)):
        out += [(repeat, who, what) for who, what in
                (order if repeat % 2 == 0 else list(reversed(order)))]
    return out


def strongest_row(rows, prefix="pytorch"):
    """The name of the row of `rows` with `prefix` and the highest median tokens/s (None)."""
    names = [n for n in rows if n.startswith(prefix)]
    return max(names, key=lambda n: rows[n]["tokens_per_s"]) if names else None


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def parse_arguments(argv=None):
    """The command line (argv: sys.argv[1:] when None)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True, help="the binary (a bundle's bin/zerotrain)")
    p.add_argument("--preset", default="1b")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2, help="steps not timed (compile, autotune)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--backend", default=None, help="zerotrain's --backend (default: --device)")
    p.add_argument("--zerotrain-arg", action="append", default=[],
                   help="an extra argument for zerotrain train (repeat)")
    p.add_argument("--modes", default="eager,compile,compile-max,compile-max+bf16",
                   help="PyTorch rows: eager, compile, compile-max, each optionally +bf16")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of every row, in alternating order; the figure is their median")
    p.add_argument("--attentions", default="",
                   help="zerotrain rows, one per --attention value, each optionally with "
                        "+bf16 for --activations bf16 (e.g. gemm,fused,fused+bf16) and "
                        "+nondeterministic for --deterministic false and +graphs for "
                        "--cuda-graphs on; an empty --attention is "
                        "zerotrain's defaults (e.g. ,gemm,+nondeterministic); default: the "
                        "defaults' row alone")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak per GPU")
    p.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "inputs", "data", "sample.txt"))
    p.add_argument("--timeout", type=float, default=300, help="seconds for zerotrain's run")
    p.add_argument("--json-out", help="write the figures here as JSON")
    args = p.parse_args(argv)
    args.backend = args.backend or args.device
    for row in args.attentions.split(",") if args.attentions else []:
        try:
            row_parts(row, args.zerotrain_arg)
        except ValueError as e:
            p.error(f"--attentions: {e}")
    return args


class Figures:
    """The rows measured so far (each the median of its repeats), the ratios, and the order the
    runs ran in; written to --json-out after every run, so that a call cut short keeps them."""

    def __init__(self, args, flops_per_token):
        self.args, self.flops_per_token = args, flops_per_token
        self.peak = args.peak_tflops * 1e12
        self.rows, self.ratios = {}, {}
        self.runs = {}  # name -> the repeats' results
        self.ran = []  # the rows' names in the order they ran

    def write_json(self):
        args = self.args
        if not args.json_out:
            return
        with open(args.json_out + ".part", "w") as f:
            json.dump({"preset": args.preset, "device": args.device, "seq_len": args.seq_len,
                       "micro_batch": args.micro_batch, "flops_per_token": self.flops_per_token,
                       "peak_tflops": args.peak_tflops, "torch": torch.__version__,
                       "rows": self.rows, "ratios": self.ratios, "run_order": self.ran}, f,
                      indent=1)
        os.replace(args.json_out + ".part", args.json_out)

    def record(self, name, r):
        self.ran.append(name)
        self.runs.setdefault(name, []).append(r)
        all_tps = [x["tokens_per_s"] for x in self.runs[name]]
        row = dict(r)
        row["tokens_per_s"] = median(all_tps)
        row["tokens_per_s_runs"] = all_tps
        row["tflops"] = row["tokens_per_s"] * self.flops_per_token / 1e12
        row["mfu"] = row["tokens_per_s"] * self.flops_per_token / self.peak
        row["peak_device_gib"] = max(x["peak_device_gib"] for x in self.runs[name])
        self.rows[name] = row
        print(f"{name:>26} (run {len(all_tps)}): {r['tokens_per_s']:10.0f} tokens/s; median "
              f"{row['tokens_per_s']:10.0f} [{min(all_tps):.0f}, {max(all_tps):.0f}]  "
              f"MFU {100 * row['mfu']:5.1f}%  peak device {row['peak_device_gib']:6.2f} GiB  "
              f"loss {r['loss_first']:.3f} -> {r['loss_last']:.3f}"
              + (f"  sdpa {r['sdpa_backend']}" if "sdpa_backend" in r else ""), flush=True)
        self.write_json()

    def report_ratios(self):
        """Each zerotrain row over each PyTorch row, and the strongest PyTorch row."""
        rows, ratios = self.rows, self.ratios
        ours = [n for n in rows if n.startswith("zerotrain")]
        theirs = [n for n in rows if n.startswith("pytorch")]
        for name in theirs:
            for z in ours:
                ratios[f"{z} / {name}"] = rows[z]["tokens_per_s"] / rows[name]["tokens_per_s"]
                print(f"ratio {z} / {name}: {ratios[f'{z} / {name}']:.3f}")
        if theirs:
            strongest = strongest_row(rows)
            ratios["strongest_pytorch"] = strongest
            print(f"strongest PyTorch row: {strongest} ({rows[strongest]['tokens_per_s']:.0f} "
                  f"tokens/s, median of {len(self.runs[strongest])})")
        self.write_json()
        return 0 if ours and len(rows) > len(ours) else 1


def run_rows(args, config, modes, figures):
    """Every row's repeats in run_order's alternating order; a PyTorch row that fails (an OOM, a
    compile error) is a result and is not run again, a zerotrain row that fails ends the bench."""
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data.h5")
        subprocess.run([args.zerotrain, "prepare-data", "--text", args.data, "--out", data],
                       check=True, capture_output=True)
        order = [("zerotrain", a) for a in (args.attentions.split(",") if args.attentions
                                            else [""])] + [("pytorch", m) for m in modes]
        failed = set()
        for repeat, who, what in run_order(order, args.repeats):
            name = f"zerotrain {what or '(defaults)'}" if who == "zerotrain" else f"pytorch {what}"
            if name in failed:
                continue
            try:
                if who == "zerotrain":
                    run_dir = os.path.join(work, f"run{repeat}-" + name.replace(" ", "-"))
                    figures.record(name, run_zerotrain(args, data, run_dir, what))
                else:
                    figures.record(name, run_pytorch(args, config, what))
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                print(f"{name}: FAILED ({e})", flush=True)
                failed.add(name)
            except Exception as e:  # noqa: BLE001  (an OOM or a compile failure is a result)
                if who == "zerotrain":
                    raise
                print(f"{name}: FAILED ({type(e).__name__}: {e})", flush=True)
                failed.add(name)


def main():
    args = parse_arguments()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu_vs_pytorch: torch sees no GPU (torch.cuda.is_available() is False)")

    estimate = json.loads(subprocess.run(
        [args.zerotrain, "estimate", "--preset", args.preset, "--seq-len", str(args.seq_len),
         "--json"], check=True, capture_output=True, text=True).stdout)
    config, flops_per_token = estimate["model_config"], estimate["training_flops_per_token"]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{args.preset} on {args.device} ({gpu}), "
          f"seq {args.seq_len}, micro-batch {args.micro_batch}, {args.steps} steps "
          f"({args.warmup} untimed), {flops_per_token / 1e9:.3f} GFLOP/token, "
          f"peak {args.peak_tflops:g} TFLOP/s, torch {torch.__version__}", flush=True)
    modes = [m for m in args.modes.split(",") if m]
    if not hasattr(torch, "compile"):
        for m in [m for m in modes if m.startswith("compile")]:
            print(f"pytorch {m}: skipped (torch {torch.__version__} has no torch.compile)")
        modes = [m for m in modes if not m.startswith("compile")]
    figures = Figures(args, flops_per_token)
    run_rows(args, config, modes, figures)
    return figures.report_ratios()


if __name__ == "__main__":
    sys.exit(main())
