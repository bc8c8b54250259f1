"""export --merge-lora's tensors against PEFT's merge_and_unload of the same adapters, within the
rounding both do: the bound derived per element (merge_bounds), the excess over it
(merge_excess) and the whole comparison the LoRA oracles make (compare_merge). Shared by
tests/oracle/test_lora*.py and tests/realmodel/real_model_dora.py."""
import collections
import os

import torch

PREFIX = "base_model.model."  # PeftModel's names of the base model's tensors


def read_merged(hf_dir):
    """The tensors of an exported Hugging Face directory (one safetensors file), as bf16."""
    from safetensors.torch import load_file
    return {n: t.to(torch.bfloat16) for n, t in
            load_file(os.path.join(hf_dir, "model.safetensors")).items()}


def ulp_bf16(w):
    """One bf16 step at each element's magnitude (frexp: |w| = m·2^e, m in [0.5, 1)); below
    2^-126, and at zero, the subnormal step 2^-133."""
    _, e = torch.frexp(w)
    e = torch.where(w == 0, torch.full_like(e, -125), e.clamp(min=-125))
    return torch.ldexp(torch.ones_like(w), e - 8)


def merge_bounds(peft_model):
    """{merged weight's name: how far each element of export --merge-lora's bf16 tensor may lie from
    the exact merge of the same adapter, elementwise}, read from a float64 PeftModel before its
    merge_and_unload. export forms W + s·Σ_k B[i,k]·A[k,j] in fp32 (io/lora_merge.cpp): r products
    and sums, a product by s and a sum with W, each rounded (fused or not), at most
    (r + 2)·2^-24·(|W| + |s|·Σ_k |B[i,k]|·|A[k,j]|) from the exact value; then rounds it to bf16,
    half a step at its value. DoRA then scales each row by m/‖row‖ (the norm in double, the factor
    and the product in fp32): that factor's relative error is at most ‖E_row‖/‖row‖ + 4·2^-24.
    Where W and s·B·A nearly cancel, the fp32 error can exceed a bf16 step of the small result, so
    a bound of one bf16 step there would hold on one machine's adapters and not on another's."""
    u = 2.0 ** -24
    bounds = {}
    for name, module in peft_model.named_modules():
        if not (hasattr(module, "lora_A") and "default" in module.lora_A):
            continue
        with torch.no_grad():
            a = module.lora_A["default"].weight.double()
            b = module.lora_B["default"].weight.double()
            s = float(module.scaling["default"])
            w = module.get_base_layer().weight.double()
            error = (a.shape[0] + 2) * u * (w.abs() + abs(s) * (b.abs() @ a.abs())) * 1.001
            merged = w + s * (b @ a)
            if getattr(module, "use_dora", {}).get("default", False):
                m = module.lora_magnitude_vector["default"].weight.double().reshape(-1, 1)
                row = merged.norm(dim=1, keepdim=True)
                factor = (m / row).abs()
                relative = error.norm(dim=1, keepdim=True) / row + 4 * u
                error = factor * (error + merged.abs() * relative) * 1.001
        bounds[name[len(PREFIX):] + ".weight"] = error
    return bounds


def merge_excess(got, want, bound=None):
    """The largest |got − want| of two bf16 tensors (export's merge and the reference's, rounded
    from fp32) over what rounding allows: export's fp32 error `bound` (merge_bounds; 0 where no
    adapter), half a bf16 step at each value, and an fp32 step (the reference's first rounding).
    At most 1 where the two agree within the derivation."""
    g, w = got.double(), want.double()
    allowed = 0.5 * ulp_bf16(g) + 0.5 * ulp_bf16(w) + ulp_bf16(w) * 2.0 ** -16
    if bound is not None:
        allowed = allowed + bound
    return float(((g - w).abs() / allowed).max())


MergeComparison = collections.namedtuple("MergeComparison",
                                         "worst others unmatched adapted exact")


def compare_merge(got, peft_model):
    """export --merge-lora's bf16 tensors `got` against PEFT's merge_and_unload of the same adapters
    (peft_model, which it merges: pass a copy to keep one), as a MergeComparison: `worst`, the
    largest merge_excess of a tensor PEFT adapts (within merge_bounds' rounding when at most 1);
    `others`, the largest bf16_ulps of any other tensor (0 when each is bitwise); `unmatched`, the
    names found on one side only; `adapted`, the tensors PEFT adapts; `exact`, PEFT's merged state,
    unrounded."""
    bounds = merge_bounds(peft_model)
    exact = {n: t.detach().clone() for n, t in peft_model.merge_and_unload().state_dict().items()}
    want = {n: t.to(torch.float32).to(torch.bfloat16) for n, t in exact.items()}
    shared = set(got) & set(want)
    worst = max((merge_excess(got[n], want[n], bounds[n]) for n in bounds if n in shared),
                default=0.0)
    others = max((bf16_ulps(got[n], want[n]) for n in shared if n not in bounds), default=0)
    unmatched = sorted(set(got) ^ set(want) | set(bounds) - shared)
    return MergeComparison(worst, others, unmatched, sorted(bounds), exact)


def bf16_ulps(a, b):
    """The largest distance in bf16 steps between elements of two bf16 tensors (their bit
    patterns made monotonic: a negative value's magnitude bits negated)."""
    def ordered(t):
        i = t.view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -(i & 0x7fff), i)
    return int((ordered(a) - ordered(b)).abs().max().item())
