#!/usr/bin/env python3
"""bench/bench_gpu_vs_pytorch.py's statistics, on the CPU (label unit, in the project venv).

The GPU comparison's figures rest on its bookkeeping, which a CPU run exercises the same way:
1. run_order: every row in every round, forward in even rounds and reversed in odd ones;
   median of odd and even counts; strongest_row picks the highest median of the prefix's rows;
   a zerotrain row's command (+bf16, +nondeterministic); an unknown option, +bf16 without an
   attention and a second --deterministic refused, the rows checked as the command line is read.
2. A run on the CPU (tiny preset, 3 repeats, zerotrain's default row and PyTorch eager with fp32
   and with bf16 parameters): the JSON's run_order is run_order's; every row ran 3 times; its
   figure is the median of its runs, its MFU and TFLOP/s that figure times the FLOPs per token;
   each ratio is the quotient of the rows' figures; the strongest PyTorch row is the one with the
   highest figure; the attention kernels profiled are none (CPU).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from oracle_harness import SetupError, check, exit_status  # noqa: E402

REPEATS = 3


def check_helpers(bench):
    order = [("zerotrain", ""), ("pytorch", "eager"), ("pytorch", "compile")]
    got = bench.run_order(order, REPEATS)
    want = [(0, *o) for o in order] + [(1, *o) for o in reversed(order)] + \
        [(2, *o) for o in order]
    check(got == want, f"run_order: {got}")
    check(bench.run_order(order, 0) == [(0, *o) for o in order], "run_order of 0 repeats")
    check(bench.median([3, 1, 2]) == 2 and bench.median([4, 1, 3, 2]) == 2.5, "median")
    rows = {"zerotrain x": {"tokens_per_s": 9}, "pytorch a": {"tokens_per_s": 5},
            "pytorch b": {"tokens_per_s": 7}}
    check(bench.strongest_row(rows) == "pytorch b", "strongest_row")
    check(bench.strongest_row({"zerotrain x": {"tokens_per_s": 1}}) is None,
          "strongest_row without a PyTorch row")
    print("ok   run_order, median and strongest_row")
    args = bench.parse_arguments(["--zerotrain", "zt", "--preset", "tiny"])

    def command(row):
        return " ".join(bench.zerotrain_command(args, "d.h5", "out", row))

    check("--deterministic false" in command("+nondeterministic") and
          "--attention" not in command("+nondeterministic"), command("+nondeterministic"))
    check(command("+graphs").endswith("--cuda-graphs on") and
          "--attention" not in command("+graphs"), command("+graphs"))
    check(command("fused+bf16").endswith("--attention fused --activations bf16"),
          command("fused+bf16"))
    check(command("gemm").endswith("--attention gemm --activations fp32") and
          "--deterministic" not in command("gemm"), command("gemm"))
    for row, culprit in (("fused+fp8", "fp8"), ("+bf16", "needs an attention")):
        try:
            command(row)
            check(False, f"the row {row} was accepted")
        except ValueError as e:
            check(row in str(e) and culprit in str(e), str(e))
    # A row option whose train option --zerotrain-arg sets already.
    for row, given in (("+nondeterministic", "--deterministic=true"),
                       ("+graphs", "--cuda-graphs=off")):
        option = given.split("=")[0]
        twice = bench.parse_arguments(["--zerotrain", "zt", "--zerotrain-arg=" + given])
        try:
            bench.zerotrain_command(twice, "d.h5", "out", row)
            check(False, f"{row} accepted beside --zerotrain-arg {option}")
        except ValueError as e:
            check(f"sets {option} already" in str(e), str(e))
    # The rows are checked as the command line is read, before anything runs.
    refused = subprocess.run([sys.executable, bench.__file__, "--zerotrain", "zt",
                              "--attentions", ",gemm+fp8"], capture_output=True, text=True)
    check(refused.returncode == 2 and "--attentions: zerotrain row 'gemm+fp8'" in refused.stderr,
          f"exit {refused.returncode}: {refused.stderr}")
    print("ok   zerotrain rows: +bf16, +nondeterministic, +graphs; unknown options, +bf16 "
          "without an attention and a second --deterministic or --cuda-graphs refused, the rows "
          "as the command line is read")


def check_run(bench, zt, work):
    out = os.path.join(work, "result.json")
    cmd = [sys.executable, os.path.join(HERE, "..", "..", "bench", "bench_gpu_vs_pytorch.py"),
           "--zerotrain", zt, "--device", "cpu", "--preset", "tiny", "--seq-len", "16",
           "--micro-batch", "2", "--steps", "3", "--warmup", "1", "--repeats", str(REPEATS),
           "--modes", "eager,eager+bf16", "--json-out", out]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout)
    if proc.returncode != 0:
        raise SetupError(f"bench_gpu_vs_pytorch.py exited with {proc.returncode}")
    with open(out) as f:
        result = json.load(f)
    rows, ratios = result["rows"], result["ratios"]
    names = ["zerotrain (defaults)", "pytorch eager", "pytorch eager+bf16"]
    check(sorted(rows) == sorted(names), f"rows {sorted(rows)}")
    order = [("zerotrain", ""), ("pytorch", "eager"), ("pytorch", "eager+bf16")]
    want_order = [n for _, who, what in bench.run_order(order, REPEATS)
                  for n in [f"zerotrain {what or '(defaults)'}" if who == "zerotrain"
                            else f"pytorch {what}"]]
    check(result["run_order"] == want_order, f"run_order {result['run_order']}")
    flops = result["flops_per_token"]
    for name, row in rows.items():
        runs = row["tokens_per_s_runs"]
        check(len(runs) == REPEATS, f"{name}: {len(runs)} runs")
        check(row["tokens_per_s"] == bench.median(runs), f"{name}: figure is not the median")
        check(row["tflops"] == row["tokens_per_s"] * flops / 1e12, f"{name}: TFLOP/s")
        check(row["mfu"] == row["tokens_per_s"] * flops / (result["peak_tflops"] * 1e12),
              f"{name}: MFU")
        if name.startswith("pytorch"):
            check(row["sdpa_kernels"] == [], f"{name}: attention kernels on the CPU")
    for theirs in names[1:]:
        key = f"zerotrain (defaults) / {theirs}"
        check(ratios[key] == rows["zerotrain (defaults)"]["tokens_per_s"] /
              rows[theirs]["tokens_per_s"], f"ratio {key}")
    strongest = max(names[1:], key=lambda n: rows[n]["tokens_per_s"])
    check(ratios["strongest_pytorch"] == strongest, f"strongest {ratios['strongest_pytorch']}")
    print(f"ok   {len(result['run_order'])} runs in alternating order; figures the medians; "
          f"strongest {strongest}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True)
    args = p.parse_args()
    try:
        import bench_gpu_vs_pytorch as bench
    except ImportError as e:
        print(f"cannot import the benchmark ({e}): run with the project venv's python")
        return 2

    def checks():
        check_helpers(bench)
        with tempfile.TemporaryDirectory() as work:
            check_run(bench, args.zerotrain, work)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
