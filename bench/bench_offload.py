#!/usr/bin/env python3
"""ZeRO-Offload modes against no offload in the same run: step time, optimizer time, offload
traffic and peak bytes per pool (device total, host, nvme) per rank.

Rows: at --stage (default 2) no offload (the reference), optimizer on cpu with the exact overlap
(forced on: `auto`, the default, is on only on a GPU backend), optimizer on cpu without the
overlap, optimizer on cpu with the delayed update (from step 1), optimizer on nvme; then at stage 3 no offload and optimizer + params on cpu
(--rows picks some; opt-cpu-fp32, the overlap with fp32 gradient copies where the other cpu rows
copy as --offload-gradient-copies auto says, is not a default row; --grad-accum applies to every row). Each row trains
--steps steps under `mpirun -np --ranks` on --backend; figures are means over the steps after
the first. "vs ref" is the row's step time over the no-offload step time at the same stage
(DeepSpeed users report 2-5x); "thru" is the row's tokens/s over that reference's (the goals on
a GPU at 1b: >= 0.6 with the overlap at grad-accum 1, >= 0.8 at grad-accum 4, >= 0.9 with the
delay). MFU is the metrics' (a GPU backend only). "adam Mp/s" is
the CPU AdamW's rate (metrics.jsonl's host_adam, rank 0) and "adam GB/s" the memory traffic that
rate moves (30 bytes per element: master, m, v read and written, the gradient read, a bf16 copy
written); the host's copy bandwidth, measured first with --threads threads (one rank's share:
with --ranks R the ranks share the host's bandwidth), is its ceiling.

  /usr/bin/python3 bench/bench_offload.py --zerotrain build/zerotrain --preset 125m \\
      --nvme-path /tmp
  # on a GPU host, from a bundle: 1b with and without optimizer offload
  python3 bench/bench_offload.py --zerotrain B/bin/zerotrain --mpirun B/bin/mpirun \\
      --backend cuda --preset 1b --seq-len 2048 --micro-batch 4 --rows none,opt-cpu
"""
import argparse
import json
import os
import subprocess
import tempfile
import threading
import time

MIB = 1024.0 * 1024.0
DEVICE_POOLS = ("params", "grads", "optimizer", "activations", "buffers")
ADAM_BYTES_PER_PARAM = 30


def host_copy_bandwidth(threads, mib_per_thread=512, repeats=3):
    """GB/s of `threads` threads each copying its own buffer of mib_per_thread MiB (numpy releases
    the GIL in copies; buffers well past a CPU's last-level cache): bytes read plus bytes written
    over the slowest thread's time, the best of `repeats`; None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
    n = mib_per_thread * (1 << 20) // 8
    pairs = [(np.ones(n), np.empty(n)) for _ in range(threads)]
    best = 0.0
    for _ in range(repeats):
        workers = [threading.Thread(target=np.copyto, args=(dst, src)) for src, dst in pairs]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - start
        best = max(best, 2 * 8 * n * threads / seconds / 1e9)
    return best


def train(args, data, out, stage, flags):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    # --bind-to none: Open MPI binds each of two or fewer ranks to one core, and the CPU Adam's
    # --threads would then share it (the first GPU session's offload row crawled so).
    cmd = [args.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(args.ranks),
           args.zerotrain, "train",
           "--preset", args.preset, "--data", data, "--out", out, "--steps", str(args.steps),
           "--micro-batch", str(args.micro_batch), "--seq-len", str(args.seq_len),
           "--zero-stage", str(stage), "--log-every", "0", "--backend", args.backend,
           "--activation-checkpointing", args.activation_checkpointing,
           "--sub-group-size", str(args.sub_group_size), "--grad-accum", str(args.grad_accum),
           "--comm-timeout", str(args.comm_timeout)] + flags
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    timed = steps[1:] if len(steps) > 1 else steps

    def mean(get):
        return sum(get(s) for s in timed) / len(timed)

    peak = {k: max(s["peak_memory_bytes"].get(k, 0) for s in steps)
            for k in DEVICE_POOLS + ("host", "nvme")}
    return {
        "step_s": mean(lambda s: s["step_time_s"]),
        "tokens_s": mean(lambda s: s["tokens_per_s"]),
        "mfu": mean(lambda s: s["mfu"] or 0.0),
        "optimizer_s": mean(lambda s: s["time"]["optimizer_s"]),
        "adam_pps": mean(lambda s: s.get("host_adam", {}).get("params_per_s", 0.0)),
        "d2h": mean(lambda s: s["offload_bytes"]["device_to_host"]),
        "h2d": mean(lambda s: s["offload_bytes"]["host_to_device"]),
        "nvme_rw": mean(lambda s: s["offload_bytes"]["nvme_read"] +
                        s["offload_bytes"]["nvme_write"]),
        "device": max(sum(s["peak_memory_bytes"][k] for k in DEVICE_POOLS) for s in steps),
        "host": peak["host"], "nvme": peak["nvme"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--preset", default="125m")
    p.add_argument("--stage", type=int, default=2, choices=(1, 2, 3))
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS per rank")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--sub-group-size", type=int, default=10_000_000)
    p.add_argument("--nvme-path", default=tempfile.gettempdir())
    p.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    p.add_argument("--mpirun", default="mpirun", help="the launcher (a bundle's bin/mpirun)")
    p.add_argument("--comm-timeout", type=float, default=60,
                   help="zerotrain's --comm-timeout: a hang fails the row instead of the call")
    p.add_argument("--activation-checkpointing", default="none")
    p.add_argument("--rows", default="none,opt-cpu,opt-nvme,s3-none,s3-opt-param-cpu",
                   help="comma-separated subset of the default rows")
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "inputs",
                                                  "data", "sample.txt"))
    args = p.parse_args()
    all_rows = {
        "none": (args.stage, "none", []),
        # The overlap forced on: auto turns it off on the CPU backend (docs/offload.md). On keeps
        # a copy of the whole state in host memory (auto's limit does not apply): a model of 1b's
        # size, not 6b's (about 166 GiB of host memory on one GPU).
        "opt-cpu": (args.stage, "cpu, overlap", ["--offload-optimizer", "cpu",
                                                 "--offload-optimizer-overlap", "on"]),
        "opt-cpu-serial": (args.stage, "cpu, no overlap", ["--offload-optimizer", "cpu",
                                                           "--offload-optimizer-overlap", "off"]),
        # The other cpu rows copy gradients as auto says (bf16 on a GPU with bf16 params): this
        # one, the overlap with fp32 copies, shows what halving the copies bought.
        "opt-cpu-fp32": (args.stage, "cpu, fp32 copies", ["--offload-optimizer", "cpu",
                                                          "--offload-optimizer-overlap", "on",
                                                          "--offload-gradient-copies", "fp32"]),
        "opt-cpu-delay": (args.stage, "cpu, delayed", ["--offload-optimizer", "cpu",
                                                       "--offload-optimizer-delay", "1",
                                                       "--offload-optimizer-delay-after", "0"]),
        "opt-nvme": (args.stage, "optimizer nvme", ["--offload-optimizer", "nvme",
                                                    "--nvme-path", args.nvme_path]),
        "s3-none": (3, "none", []),
        "s3-opt-param-cpu": (3, "optimizer+params cpu", ["--offload-optimizer", "cpu",
                                                         "--offload-param", "cpu"]),
    }
    picked = args.rows.split(",")
    unknown = [r for r in picked if r not in all_rows]
    if unknown:
        p.error(f"--rows: unknown {unknown}; choose from {list(all_rows)}")
    rows = [all_rows[r] for r in picked]
    if args.stage == 3:  # the stage-3 reference is the first "none" row
        rows = [r for r in rows if r is not all_rows["s3-none"]] or rows
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.h5")
        subprocess.run([args.zerotrain, "prepare-data", "--text", args.data, "--out", data],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"preset {args.preset}, backend {args.backend}, {args.ranks} rank(s) x "
              f"{args.threads} threads, micro-batch {args.micro_batch}, grad-accum "
              f"{args.grad_accum}, seq-len {args.seq_len}, "
              f"checkpointing {args.activation_checkpointing}, sub_group_size "
              f"{args.sub_group_size}, mean of steps 2..{args.steps}; MiB per rank")
        bandwidth = host_copy_bandwidth(args.threads)
        print("host copy bandwidth: " + (f"{bandwidth:.1f} GB/s ({args.threads} threads, numpy)"
                                         if bandwidth else "not measured (no numpy)"))
        print(f"{'st':>2} {'offload':<21} {'step s':>7} {'vs ref':>6} {'tok/s':>9} {'thru':>5} "
              f"{'MFU':>6} {'optim s':>7} {'adam Mp/s':>9} {'adam GB/s':>9} {'D2H':>7} "
              f"{'H2D':>7} {'NVMe rw':>8} | {'device':>8} {'host':>8} {'nvme':>8}")
        reference = {}
        for i, (stage, name, flags) in enumerate(rows):
            r = train(args, data, os.path.join(tmp, f"run{i}"), stage, flags)
            if name == "none":
                reference[stage] = r
            ref = reference.get(stage)
            vs = f"{r['step_s'] / ref['step_s']:>6.2f}" if ref else f"{'-':>6}"
            thru = f"{r['tokens_s'] / ref['tokens_s']:>5.2f}" if ref else f"{'-':>5}"
            print(f"{stage:>2} {name:<21} {r['step_s']:>7.2f} {vs} {r['tokens_s']:>9.0f} {thru} "
                  f"{100 * r['mfu']:>5.1f}% {r['optimizer_s']:>7.2f} "
                  f"{r['adam_pps'] / 1e6:>9.1f} "
                  f"{r['adam_pps'] * ADAM_BYTES_PER_PARAM / 1e9:>9.2f} "
                  f"{r['d2h'] / MIB:>7.1f} {r['h2d'] / MIB:>7.1f} {r['nvme_rw'] / MIB:>8.1f} | "
                  f"{r['device'] / MIB:>8.1f} {r['host'] / MIB:>8.1f} {r['nvme'] / MIB:>8.1f}")


if __name__ == "__main__":
    main()
