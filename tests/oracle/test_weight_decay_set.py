#!/usr/bin/env python3
"""Which tensors train with weight decay, against the Hugging Face Trainer's choice (CTest label
"oracle"; runs in the project venv, ./run.sh deps).

For Llama models written by transformers (FAMILIES: with attention biases, and with tied
embeddings), imported by zerotrain, one fp32 AdamW step runs twice from the same weights on the
same windows, with --weight-decay WD and with 0. A tensor decays when its two final masters
differ: by exactly the decay, master_WD − master_0 = −lr·WD·master (to fp32 rounding), and a
tensor that does not decay must come out bitwise the same. The reference is transformers'
Trainer.get_decay_parameter_names on the same transformers model (every parameter but biases
and the norm classes it lists), less the one documented exception: zerotrain does not decay the
embedding (and so a tied head; docs/running.md, "The optimizer, clipping and the loss").

--mutation no-exception --expect-mismatch compares with the Trainer's set as it is and passes only
if a family then mismatches: the comparison sees the embedding.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, checkpoint_masters, exit_status,  # noqa: E402
                            mutation_oracle_arguments, run_tool, write_byte_windows)

FAMILIES = ("llama-attention-bias", "llama3.2-tied")
LR, WD, SEQ_LEN = 1e-2, 0.5, 16
EMBEDDING = "model.embed_tokens.weight"


def decayed_tensors(zt, work, family, imported):
    """(the tensors whose one-step masters with --weight-decay WD and 0 differ, every tensor's
    name); each decayed one checked to differ by the decay alone."""
    import numpy as np
    masters = {}
    for wd in (WD, 0.0):
        out = work(family, f"wd{wd}")
        run_tool([zt, "train", "--model", imported, "--data", work("tok.h5"), "--out", out,
                  "--precision", "fp32", "--steps", "1", "--seq-len", str(SEQ_LEN),
                  "--micro-batch", "2", "--lr", str(LR), "--min-lr", str(LR), "--warmup-steps",
                  "0", "--clip", "0", "--weight-decay", str(wd), "--save-every", "1",
                  "--log-every", "0"])
        step = os.path.join(out, "checkpoints", "step-00000001")
        masters[wd] = {n: v.astype(np.float64) for n, (v, _) in checkpoint_masters(step).items()}
    decayed = set()
    for name, without in masters[0.0].items():
        with_wd = masters[WD][name]
        if np.array_equal(with_wd, without):
            continue
        decayed.add(name)
        # AdamW: master_WD − master_0 = −lr·WD·w, w the step's start, the same gradient and
        # moments in both runs. Taken at master_0 = w − lr·(±1 at step 1) instead of w, the
        # decay is off by at most lr·WD·lr; each run's fp32 result rounds by 2⁻²⁴ of its size.
        want = -LR * WD * without
        bound = LR * WD * LR + 4 * 2.0 ** -24 * (np.abs(without).max() + LR)
        err = np.abs(with_wd - without - want).max()
        check(err <= bound, f"{family}: {name} changed with weight decay by {err:.1e} more than "
              f"−lr·wd·master (bound {bound:.1e})")
    return decayed, set(masters[0.0])


def checks(args, work, torch):
    import transformers
    torch.manual_seed(1234)
    from hf_families_table import COMMON
    from hf_families_table import FAMILIES as TABLE
    from hf_family_reference import randomize_small_tensors
    zt = args.zerotrain
    write_byte_windows(work("tok.h5"), os.path.join(args.source_dir, "inputs", "data",
                                                    "sample.txt"), 2, SEQ_LEN)
    for family in FAMILIES:
        config_name, model_name, extra = TABLE[family]
        model = getattr(transformers, model_name)(
            getattr(transformers, config_name)(**COMMON, **extra))
        randomize_small_tensors(model)
        model.save_pretrained(work(family, "hf"), safe_serialization=True)
        run_tool([zt, "import", work(family, "hf"), "--out", work(family, "imported")])
        trainer = set(transformers.Trainer.get_decay_parameter_names(None, model))
        # The exception: the embedding, and with tied embeddings the head, which is the same
        # tensor (the Trainer names it twice; zerotrain's checkpoint once, as the embedding).
        tied = model.config.tie_word_embeddings
        exception = {EMBEDDING} | ({"lm_head.weight"} if tied else set())
        want = trainer if args.mutation == "no-exception" else trainer - exception
        got, names = decayed_tensors(zt, work, family, work(family, "imported"))
        check(want <= names, f"{family}: the Trainer's choice holds tensors zerotrain does not "
              f"have: {sorted(want - names)}")
        check(got == want, f"{family}: zerotrain decays {sorted(got - want)} beyond the "
              f"Trainer's choice and not {sorted(want - got)}")
        print(f"{family}: {len(got)} of {len(names)} tensors decay, the Trainer's choice but the "
              f"embedding; not decayed: {sorted(names - got)}")


def main():
    args, work, torch = mutation_oracle_arguments(__doc__.split("\n")[0], ["no-exception"],
                                                  "transformers")
    return exit_status(lambda: checks(args, work, torch), mutation=args.mutation,
                       mutation_fails="Trainer's choice")


if __name__ == "__main__":
    sys.exit(main())
