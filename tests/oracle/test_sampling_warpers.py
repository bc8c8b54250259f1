#!/usr/bin/env python3
"""generate's sampling distribution against transformers' logits warpers (CTest label "oracle";
runs in the project venv, ./run.sh deps).

For rows of random logits (some with ties at the top-k boundary, some with one logit far above the
rest) and every combination of temperature, top_k and top_p in CONFIGS, zt_sampling_dump prints
the distribution zerotrain's sampler draws from (model/token_sampling.h). The reference is what
transformers' generate() draws from: TemperatureLogitsWarper, TopKLogitsWarper and
TopPLogitsWarper, each added only where generate() adds it (temperature ≠ 1, top_k ≠ 0,
top_p < 1) and applied in generate()'s order, then softmax, on the same logits in float64.
The row with ties runs without top-p: which of several equal tokens top-p drops follows
torch.sort's order among equals, which transformers leaves unspecified (zerotrain drops the lower
indices first, a stable sort's order).
Each case must keep exactly the reference's tokens, with every probability within V·2⁻⁵⁰ of the
reference's (both sides double: a softmax's sum of V terms rounds by at most V·2⁻⁵³, its exp by
a few 2⁻⁵³; the factor 8 covers both sides). A case whose top-p cut falls within 1e-9 of a
cumulative probability is a setup error: the two sides could sum in another order there.

--mutation temperature-last --expect-mismatch applies the temperature after top-k and top-p (the
order some other samplers use) and passes only if a case then mismatches.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import itertools
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (SetupError, check, exit_status,  # noqa: E402
                            mutation_oracle_arguments)

VOCAB, ROWS, TIED_ROW = 48, 6, 4
CONFIGS = list(itertools.product((1.0, 0.6, 1.7), (0, 1, 5, 60), (1.0, 0.9, 0.5, 0.05)))
MARGIN = 1e-9


def logit_rows(torch):
    """ROWS rows of VOCAB float32 logits: normal ones at three scales, a row with a 5-way tie
    across the 5th largest value, and one with a logit far above the rest."""
    gen = torch.Generator().manual_seed(7)
    rows = [torch.randn(VOCAB, generator=gen) * s for s in (1.0, 3.0, 0.2, 1.0)]
    tied = torch.randn(VOCAB, generator=gen)
    order = torch.argsort(tied, descending=True)
    # The 4th to the 8th largest equal: top-k 5 keeps the first 3 and all 5 of them.
    tied[order[3:8]] = tied[order[3]].item()
    peaked = torch.randn(VOCAB, generator=gen)
    peaked[11] = 25.0
    return [r.to(torch.float32) for r in rows + [tied, peaked]][:ROWS]


def reference(torch, logits, temperature, top_k, top_p, mutation):
    """transformers' distribution: the warpers generate() adds, in its order, then softmax."""
    from transformers.generation.logits_process import (TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    scores = logits.to(torch.float64).unsqueeze(0)
    ids = torch.zeros((1, 1), dtype=torch.long)
    warpers = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k != 0:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    if mutation == "temperature-last" and temperature != 1.0:
        warpers = warpers[1:] + warpers[:1]
    for warper in warpers:
        if isinstance(warper, TopPLogitsWarper):
            check_margin(torch, scores, top_p)
        scores = warper(ids, scores)
    return torch.softmax(scores, dim=-1)[0]


def check_margin(torch, scores, top_p):
    """A setup error where the top-p cut 1 − p lies within MARGIN of a cumulative probability."""
    cumulative = torch.softmax(torch.sort(scores[0]).values, dim=-1).cumsum(dim=-1)
    nearest = (cumulative - (1 - top_p)).abs().min().item()
    if nearest < MARGIN:
        raise SetupError(f"top_p {top_p}: a cumulative probability lies {nearest:.1e} from 1 - p")


def checks(args, torch):
    rows = logit_rows(torch)
    cases = [(row, (t, k, p)) for row in range(len(rows)) for t, k, p in CONFIGS
             if row != TIED_ROW or p == 1.0]
    text = "".join(f"{t} {k} {p} {VOCAB} " + " ".join(f"{x:.9g}" for x in rows[r].tolist()) + "\n"
                   for r, (t, k, p) in cases)
    done = subprocess.run([args.dump], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise SetupError(f"zt_sampling_dump exited {done.returncode}: {done.stdout}{done.stderr}")
    lines = done.stdout.splitlines()
    check(len(lines) == len(cases), f"{len(lines)} distributions for {len(cases)} cases")
    bound = VOCAB * 2.0 ** -50
    worst = 0.0
    for (row, (t, k, p)), line in zip(cases, lines):
        got = torch.tensor([float(x) for x in line.split()], dtype=torch.float64)
        want = reference(torch, rows[row], t, k, p, args.mutation)
        what = f"row {row}, temperature {t}, top_k {k}, top_p {p}"
        check(torch.equal(got > 0, want > 0),
              f"{what}: keeps tokens {(got > 0).nonzero().flatten().tolist()}, transformers "
              f"{(want > 0).nonzero().flatten().tolist()}")
        err = (got - want).abs().max().item()
        worst = max(worst, err)
        check(err <= bound, f"{what}: a probability {err:.2e} from transformers' (bound "
              f"{bound:.1e})")
    print(f"{len(cases)} cases: the same tokens kept, probabilities within {worst:.1e} of "
          f"transformers' (bound {bound:.1e})")


def main():
    args, _, torch = mutation_oracle_arguments(
        __doc__.split("\n")[0], ["temperature-last"], "transformers",
        extra=[("--dump", {"required": True, "help": "zt_sampling_dump"})])
    return exit_status(lambda: checks(args, torch), mutation=args.mutation,
                       mutation_fails="transformers")


if __name__ == "__main__":
    sys.exit(main())
