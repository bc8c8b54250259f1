"""DoRA on the real model (test_real_model.py's check 10, label realmodel): PEFT's own DoRA adapter
on SmolLM2-135M-Instruct, read by `eval --adapter` and `export --merge-lora`."""

import torch

from oracle_harness import check, run_tool
from test_hf_families import hf_loss, last_json_line
from lora_merge_reference import compare_merge


def check_dora_adapter(work, zt, reference, tokens, compare, bound, shape):
    """test_real_model.py's check 10: a DoRA adapter PEFT made on the model (`reference`), read by
    eval --adapter and export --merge-lora; compare and bound are test_real_model.py's, shape its
    evaluation's (micro-batch, batches, sequence length)."""
    micro_batch, batches, seq_len = shape
    import copy
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    torch.manual_seed(7)
    config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", use_dora=True,
                        task_type="CAUSAL_LM")
    adapted = get_peft_model(copy.deepcopy(reference), config).eval()
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if ".lora_B." in name:
                p.normal_(0.0, 0.02)
            elif "lora_magnitude_vector" in name:
                p.mul_(1.0 + 0.05 * torch.randn_like(p))
    adapted.save_pretrained(work("dora_peft"))
    out = run_tool([zt, "eval", "--model", work("base"), "--data", work("text.h5"), "--batches",
                    str(batches), "--micro-batch", str(micro_batch), "--seq-len", str(seq_len),
                    "--adapter", work("dora_peft")])
    want = hf_loss(adapted, tokens, range(micro_batch * batches), seq_len)
    base = hf_loss(reference, tokens, range(micro_batch * batches), seq_len)
    compare("eval --adapter with PEFT's DoRA adapter", last_json_line(out)["loss"], want)
    check(abs(want - base) > bound(base), f"the DoRA adapter left the loss at the base's: {base}")
    run_tool([zt, "export", work("base"), "--merge-lora", work("dora_peft"), "--out",
              work("dora_merged")])
    merged = {n: t.to(torch.bfloat16) for n, t in
              load_file(work("dora_merged", "model.safetensors")).items()}
    # Each merged projection within the rounding both sides do of the exact merge (float64
    # merge_and_unload; merge_bounds: export's fp32 error, DoRA's row factor included,
    # and half a bf16 step at each value); every other tensor bitwise the base's.
    c = compare_merge(merged, copy.deepcopy(adapted).to(torch.float64))
    check(c.unmatched == ["lm_head.weight"] and "lm_head.weight" not in merged,  # tied: not saved
          f"the merged tensors are not PEFT's: {c.unmatched}")
    worst = c.worst
    check(worst <= 1, f"export --merge-lora of the DoRA adapter is {worst:.2f} times its "
          "rounding bound from PEFT's merge_and_unload")
    check(c.others == 0, f"a tensor without an adapter is {c.others} bf16 steps from the base's")
    print(f"ok   DoRA: eval --adapter gives PEFT's loss ({base:.6f} for the base); the merge is "
          f"within {worst:.2f} of its rounding bound from PEFT's merge_and_unload, the rest bitwise")
