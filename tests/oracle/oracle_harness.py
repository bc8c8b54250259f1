"""What the oracle scripts share: running zerotrain's tools and telling a failed check (exit 1)
from a test that could not run (exit 2)."""

import subprocess
import time


class SetupError(Exception):
    """The test could not run (a tool failed, an input is missing): exit 2."""


class CheckFailed(Exception):
    """A comparison failed: exit 1."""


U_FP32 = 2.0 ** -24  # fp32's unit roundoff


def fp32_model_bound(widest, layers, value=0.0):
    """How far zerotrain's and a reference's fp32 loss (or logit) of one Llama model on the same
    weights may differ. Each of the 2·layers + 2 sublayers (attention and MLP per layer, the
    embedding and the head) sums dot products of up to `widest` terms in another order, whose
    rounding grows as sqrt(widest)·u; the figure scales with max(1, |value|). The factor 10 covers
    the norms', softmax's and cross-entropy's own rounding."""
    return 10 * U_FP32 * widest ** 0.5 * (2 * layers + 2) * max(1.0, abs(value))


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def run_tool(cmd):
    """Runs cmd, echoing it and its output; a non-zero exit is a SetupError. Returns stdout."""
    print("+ " + " ".join(cmd), flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.stdout.strip():
        print(proc.stdout.rstrip(), flush=True)
    print(f"  ({cmd[0].rsplit('/', 1)[-1]} took {time.monotonic() - started:.1f} s)", flush=True)
    if proc.returncode != 0:
        raise SetupError(f"{cmd[0]} exited with {proc.returncode}")
    return proc.stdout


def last_json_line(text):
    """The last line of a command's output that holds a JSON object."""
    import json
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SetupError("no JSON line in the output")


def refused(cmd, must_contain):
    """Runs cmd, which must fail with output containing must_contain (a check)."""
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.rstrip())
    check(proc.returncode != 0, f"{' '.join(cmd)} was accepted")
    check(must_contain in proc.stdout, f"the refusal does not say {must_contain!r}")


def document_parts(starts, begin, end):
    """[(a, b)]: the pieces of the token range [begin, end) that lie in one document each, given
    the documents' first tokens (a dataset's /doc_starts)."""
    cuts = [begin] + [int(s) for s in starts if begin < s < end] + [end]
    return list(zip(cuts[:-1], cuts[1:]))


# The scratch directories of this run (fresh_work_dir), removed by exit_status when every check
# passed (a real model's run leaves gigabytes: a suite that kept them all could fill the disk);
# kept when one failed, for the reader.
_WORK_DIRS = []


def fresh_work_dir(path):
    """Recreates the scratch directory; returns work(*parts), a path inside it."""
    import os
    import shutil
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    _WORK_DIRS.append(path)
    return lambda *parts: os.path.join(path, *parts)


# mutation_oracle_arguments' `extra` for a test that starts ranks: the launcher.
MPIRUN_ARGUMENT = ("--mpirun", {"default": "mpirun"})


def mutation_oracle_arguments(description, mutations, *modules, extra=()):
    """argument_parser's arguments, `extra` ((flag, add_argument's keywords) pairs: --mpirun,
    a helper binary) and --mutation (one of `mutations`: the reference mutated) with
    --expect-mismatch; parses them, imports torch and `modules` from the venv
    (require_venv_modules), gives torch one thread and recreates the scratch directory. Returns
    (args, work, torch)."""
    parser = argument_parser(description)
    for flag, keywords in extra:
        parser.add_argument(flag, **keywords)
    parser.add_argument("--mutation", choices=mutations)
    parser.add_argument("--expect-mismatch", action="store_true")
    args = parser.parse_args()
    torch = require_venv_modules("torch", *modules)[0]
    torch.set_num_threads(1)
    return args, fresh_work_dir(args.work_dir), torch


def lora_oracle_arguments(description, mutations):
    """argument_parser's arguments and --mutation (one of `mutations`, PEFT's side mutated) with
    --expect-mismatch; parses them, checks the venv has PEFT and transformers, and recreates the
    scratch directory. Returns (args, work)."""
    parser = argument_parser(description)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--mutation", choices=mutations,
                        help="mutate the reference (with --expect-mismatch: the runs must differ)")
    parser.add_argument("--expect-mismatch", action="store_true")
    args = parser.parse_args()
    require_venv_modules("peft", "transformers", "safetensors")
    import torch
    torch.set_num_threads(1)
    return args, fresh_work_dir(args.work_dir)


def argument_parser(description, deepspeed_sdist=False):
    """The arguments every oracle script takes: the zerotrain binary, the repository root and a
    scratch directory (recreated); with deepspeed_sdist, DeepSpeed's pinned sdist and
    --expect-mismatch (the variant in which the comparison must fail)."""
    import argparse
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--zerotrain", required=True, help="zerotrain binary")
    parser.add_argument("--source-dir", required=True, help="repository root (for inputs/)")
    parser.add_argument("--work-dir", required=True, help="scratch directory (recreated)")
    if deepspeed_sdist:
        parser.add_argument("--deepspeed-sdist", required=True,
                            help="DeepSpeed's PyPI source distribution (./run.sh deps)")
        parser.add_argument("--expect-mismatch", action="store_true")
    return parser


def exit_status(checks, mutation=None, mutation_fails=""):
    """Runs checks(): 0 when it returns, 1 on a CheckFailed, 2 on a SetupError (printed). With
    `mutation` (the variant whose reference is mutated), a CheckFailed whose message holds
    `mutation_fails` (the comparison the mutation targets) is the pass (0); checks returning, or
    failing another check, is the failure (1): the oracle could not tell the mutation."""
    try:
        checks()
    except SetupError as e:
        print(f"SETUP ERROR: {e}")
        return 2
    except CheckFailed as e:
        if not mutation or mutation_fails not in str(e):
            print(f"FAIL: {e}")
            return 1
        print(f"ok   the mutation ({mutation}) fails the comparison: {e}")
    else:
        if mutation:
            print(f"FAIL: the mutation ({mutation}) passed every check")
            return 1
        print("all checks passed")
    import shutil
    for path in _WORK_DIRS:
        shutil.rmtree(path, ignore_errors=True)
    return 0


def write_byte_windows(path, sample, windows, seq_len, extra_tokens=0):
    """A byte-token dataset (vocab 256) of exactly `windows` windows of seq_len + 1 tokens, the
    first bytes of `sample`: a run whose global batch is that many windows sees all of them at
    every step (extra_tokens more at the end, fewer than seq_len). Returns the tokens (numpy
    uint16)."""
    import h5py
    import numpy as np
    with open(sample, "rb") as f:
        data = np.frombuffer(f.read(windows * seq_len + 1 + extra_tokens),
                             dtype=np.uint8).astype(np.uint16)
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=data)
        f.attrs["vocab_size"] = np.int64(256)
        f.attrs["tokenizer"] = "bytes"
    return data


def require_venv_modules(*names):
    """Imports the named modules or exits 2 saying how to make the venv that has them. With
    ZT_EXPECT_PEFT set (a test run against PEFT installed beside the venv's), PEFT must be that
    version: without it on the path, the venv's own would stand in unnoticed."""
    import importlib
    import os
    import sys
    try:
        modules = [importlib.import_module(name) for name in names]
    except ImportError as e:
        print(f"cannot import {e.name}: run ./run.sh deps (it creates .venv/ with the pinned "
              f"oracle clients) and run this test with .venv/bin/python", file=sys.stderr)
        sys.exit(2)
    want = os.environ.get("ZT_EXPECT_PEFT")
    if want and "peft" in names and modules[names.index("peft")].__version__ != want:
        print(f"PEFT {modules[names.index('peft')].__version__} imported, ZT_EXPECT_PEFT={want}: "
              f"run ./run.sh deps (it installs PEFT {want} beside the venv's)", file=sys.stderr)
        sys.exit(2)
    return modules


def extract_from_sdist(sdist, member_path, work_dir):
    """Copies the file of DeepSpeed's sdist whose path ends with member_path (e.g.
    "deepspeed/runtime/lr_schedules.py") into work_dir; returns the copy's path. A missing sdist
    or file is a SetupError."""
    import os
    import tarfile
    if not os.path.isfile(sdist):
        raise SetupError(f"{sdist}: DeepSpeed's source distribution is missing "
                         "(./run.sh deps downloads it)")
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith(member_path)), None)
        if member is None:
            raise SetupError(f"{sdist}: no {member_path} inside")
        path = os.path.join(work_dir, os.path.basename(member_path))
        with open(path, "wb") as out:
            out.write(tar.extractfile(member).read())
    return path


def checkpoint_masters(step_dir, kind="master"):
    """Every tensor's fp32 master (kind "master") or Adam moment ("m", "v") from a checkpoint's
    rank files (manifest ranges), with whether it is frozen; a frozen tensor has no moments and
    is left out of "m" and "v"."""
    import json
    import os
    import h5py
    import numpy as np
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    groups = []
    for g, group in enumerate(manifest["groups"]):
        values = np.zeros(group["numel"], dtype=np.float32)
        for r, (begin, count) in enumerate(group["file_ranges"]):
            if count == 0:
                continue
            with h5py.File(os.path.join(step_dir, manifest["files"][r]["name"]), "r") as f:
                name = f"group_{g:03d}/{kind}"
                if name not in f:  # a frozen group: its values only
                    values = None
                    break
                values[begin:begin + count] = f[name][()]
        groups.append(values)
    out = {}
    for t in manifest["tensors"]:
        n = int(np.prod(t["shape"]))
        if groups[t["group"]] is None or (kind != "master" and t.get("frozen", False)):
            continue
        out[t["name"]] = (groups[t["group"]][t["offset"]:t["offset"] + n].reshape(t["shape"]),
                          t.get("frozen", False))
    return out


def splitmix64(x):
    """util/splitmix64.h's splitmix64 over a uint64 array or scalar (wrapping arithmetic)."""
    import numpy as np
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def frozen_values_digest(values):
    """The digest docs/checkpoints-and-formats.md defines for a frozen group's values (a float32
    array, the whole group), computed here from that definition: the sum modulo 2^64 of
    splitmix64(splitmix64(i) ^ bits(v_i)), as "splitmix64-sum:" and 16 hex digits."""
    import numpy as np
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    total = np.uint64(0)
    chunk = 1 << 22
    for begin in range(0, bits.size, chunk):
        index = np.arange(begin, min(begin + chunk, bits.size), dtype=np.uint64)
        terms = splitmix64(splitmix64(index) ^ bits[begin:begin + index.size])
        with np.errstate(over="ignore"):
            total = total + np.sum(terms, dtype=np.uint64)
    return f"splitmix64-sum:{int(total):016x}"


def frozen_digest_mismatches(step_dir, tensors):
    """The groups a checkpoint's manifest keeps as frozen_values_digest, each put together from
    `tensors` (name -> float32 array: the base as a reference loaded it) at the manifest's offsets
    and digested here. Returns (the number of such groups, [(group, ours, the manifest's)] where
    they differ); a tensor of such a group missing from `tensors` counts as a difference."""
    import json
    import os
    import numpy as np
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    kept = {g: group for g, group in enumerate(manifest["groups"])
            if "frozen_values_digest" in group}
    wrong = []
    for g, group in kept.items():
        values = np.zeros(group["numel"], dtype=np.float32)
        for t in (t for t in manifest["tensors"] if t["group"] == g):
            if t["name"] not in tensors:
                wrong.append((g, f"no tensor {t['name']}", group["frozen_values_digest"]))
                break
            flat = np.asarray(tensors[t["name"]], dtype=np.float32).reshape(-1)
            values[t["offset"]:t["offset"] + flat.size] = flat
        else:
            ours = frozen_values_digest(values)
            if ours != group["frozen_values_digest"]:
                wrong.append((g, ours, group["frozen_values_digest"]))
    return len(kept), wrong
