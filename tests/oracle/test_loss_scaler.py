#!/usr/bin/python3
"""zerotrain's fp16 loss scaler against DeepSpeed's own (CTest label "oracle").

The reference is DeepSpeed 0.19.8's deepspeed/runtime/fp16/loss_scaler.py from its PyPI source
distribution (./run.sh deps downloads it), run unmodified: its DynamicLossScaler built with the
arguments DeepSpeed's fp16 config gives it (precision_config.py's dynamic_loss_scale_args:
init_scale 2^initial_scale_power, scale_window, delayed_shift = hysteresis,
consecutive_hysteresis, min_scale; raise_error_at_min_scale left at its default, as the ZeRO
optimizers leave it), and its static LossScaler for loss_scale > 0. The imports it makes of the
rest of DeepSpeed (logging, the rank, a config base class) are stubs.

Each case is a configuration and a sequence of step outcomes (overflow or not): hand-written
ones for each rule (hysteresis absorbing overflows, consecutive refills, growth after a window,
the floor, the error at the floor) and seeded random sequences over a grid of settings.
tests/oracle/loss_scaler_replay.cpp feeds the same sequence to zerotrain's LossScaler. The scale
of every step, the final scale and the step at which a run is stopped must be identical (scales
are powers of two times the static scale, so equality is exact).

--shift K --expect-mismatch delays zerotrain's outcomes by K steps and passes only if every case
with an overflow then differs: the comparison can fail.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import importlib.util
import logging
import os
import random
import subprocess
import sys
import types

from oracle_harness import SetupError, argument_parser, extract_from_sdist

import torch


def load_deepspeed_loss_scaler(sdist, work_dir):
    """DeepSpeed's loss_scaler module from its sdist, its DeepSpeed imports stubbed."""
    path = extract_from_sdist(sdist, "deepspeed/runtime/fp16/loss_scaler.py", work_dir)

    def module(name, **attrs):
        m = types.ModuleType(name)
        for k, v in attrs.items():
            setattr(m, k, v)
        sys.modules[name] = m
        return m

    logger = logging.getLogger("deepspeed")
    module("deepspeed")
    module("deepspeed.comm", get_rank=lambda: 0)
    module("deepspeed.utils", logger=logger, log_dist=lambda *a, **k: None)
    module("deepspeed.runtime")
    module("deepspeed.runtime.config_utils", DeepSpeedConfigObject=object)
    module("deepspeed.runtime.utils", has_inf_or_nan=lambda x: False)
    sys.modules["deepspeed"].comm = sys.modules["deepspeed.comm"]
    spec = importlib.util.spec_from_file_location("deepspeed_loss_scaler", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def deepspeed_run(ds, case, outcomes):
    """[scale of each step], final scale, 1-based step of the error or None."""
    if case["loss_scale"] > 0:
        scaler = ds.LossScaler(scale=case["loss_scale"])
    else:
        scaler = ds.DynamicLossScaler(init_scale=2 ** case["power"],
                                      scale_window=case["window"],
                                      min_scale=case["min_scale"],
                                      delayed_shift=case["hysteresis"],
                                      consecutive_hysteresis=case["consecutive"],
                                      dtype=torch.half)
    scales = []
    for step, overflow in enumerate(outcomes, start=1):
        scales.append(float(scaler.loss_scale))
        try:
            scaler.update_scale(overflow)
        except Exception as e:  # noqa: BLE001 - DeepSpeed raises a bare Exception at the floor
            if "minimum" not in str(e):
                raise
            return scales, None, step
    return scales, float(scaler.loss_scale), None


def zerotrain_run(replay, case, outcomes):
    cmd = [replay, repr(float(case["loss_scale"])), str(case["power"]), str(case["window"]),
           str(case["hysteresis"]), "1" if case["consecutive"] else "0",
           repr(float(case["min_scale"])), "".join("1" if o else "0" for o in outcomes)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode not in (0, 3):
        raise SetupError(f"{' '.join(cmd)} exited with {proc.returncode}: {proc.stderr}")
    scales, final, error_step = [], None, None
    for line in proc.stdout.splitlines():
        if line.startswith("end "):
            final = float(line.split()[1])
        elif line.startswith("error step "):
            error_step = int(line.split()[2].rstrip(":"))
        else:
            scales.append(float(line))
    return scales, final, error_step


def cases():
    """(name, settings, outcomes): the rules one by one, then a seeded random grid."""
    def c(power=8, window=3, hysteresis=2, consecutive=False, min_scale=1.0, loss_scale=0.0):
        return dict(power=power, window=window, hysteresis=hysteresis, consecutive=consecutive,
                    min_scale=min_scale, loss_scale=loss_scale)
    T, F = True, False
    out = [
        ("hysteresis absorbs the first overflow", c(), [T, F, T, T, F, F, F, F]),
        ("hysteresis 1 halves at once", c(hysteresis=1), [T, T, F, F, F, F, F, F, F]),
        ("consecutive hysteresis refills", c(consecutive=True), [T, F, T, F, T, T, F]),
        ("growth after every window", c(window=2), [F] * 9),
        ("growth restarts after an overflow", c(window=2, hysteresis=1), [F, F, F, T, F, F, F, F]),
        ("the floor holds", c(power=3, hysteresis=1, min_scale=2.0), [T, T, T]),
        ("an overflow at the floor stops the run", c(power=1, hysteresis=1), [T, F, T, T, F]),
        ("the DeepSpeed defaults", c(power=16, window=1000), [T] * 3 + [F] * 1002),
        ("a static scale never moves", c(loss_scale=128.0), [T, F, T, F]),
    ]
    rng = random.Random(20261124)
    for i in range(200):
        settings = c(power=rng.randint(0, 24), window=rng.choice([1, 2, 3, 5, 8]),
                     hysteresis=rng.choice([1, 2, 3]), consecutive=rng.random() < 0.5,
                     min_scale=rng.choice([1.0, 1.0, 4.0, 0.5]))
        p = rng.choice([0.05, 0.2, 0.5])
        outcomes = [rng.random() < p for _ in range(rng.randint(5, 60))]
        out.append((f"random {i}", settings, outcomes))
    return out


def main():
    parser = argument_parser(__doc__.split("\n")[0], deepspeed_sdist=True)
    parser.add_argument("--replay", required=True, help="zt_loss_scaler_replay binary")
    parser.add_argument("--shift", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    try:
        ds = load_deepspeed_loss_scaler(args.deepspeed_sdist, args.work_dir)
        results = []
        for name, settings, outcomes in cases():
            want = deepspeed_run(ds, settings, outcomes)
            shifted = [False] * args.shift + outcomes[:len(outcomes) - args.shift]
            got = zerotrain_run(args.replay, settings, shifted)
            results.append((name, settings, outcomes, want, got))
    except SetupError as e:
        print(f"SETUP ERROR: {e}")
        return 2
    stops = sum(1 for r in results if r[3][2] is not None)
    print(f"{len(results)} cases, {stops} stopped at the minimum scale by DeepSpeed")
    differing = [r for r in results if r[3] != r[4]]
    for name, settings, outcomes, want, got in differing[:10]:
        print(f"DIFFERS {name} {settings} outcomes {''.join('1' if o else '0' for o in outcomes)}\n"
              f"  DeepSpeed scales {want[0]} final {want[1]} error step {want[2]}\n"
              f"  zerotrain scales {got[0]} final {got[1]} error step {got[2]}")
    if args.expect_mismatch:
        # Every hand-written dynamic case with an overflow must differ, and nearly every random
        # one (a shift can only hide an overflow that hysteresis absorbs in the last steps).
        with_overflow = [r for r in results if any(r[2]) and r[1]["loss_scale"] == 0]
        missed = [r[0] for r in with_overflow if r[3] == r[4]]
        missed_rules = [m for m in missed if not m.startswith("random")]
        if missed_rules or len(missed) > 0.1 * len(with_overflow):
            print(f"FAIL: shifted by {args.shift}, {len(missed)} of {len(with_overflow)} cases "
                  f"still agree: {missed[:10]}")
            return 1
        print(f"shifted by {args.shift}: {len(with_overflow) - len(missed)} of "
              f"{len(with_overflow)} cases with an overflow differ, every rule's among them")
        return 0
    if differing:
        print(f"FAIL: {len(differing)} of {len(results)} cases differ")
        return 1
    print("every scale sequence equals DeepSpeed's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
