#!/usr/bin/env python3
"""Runs the shell blocks of the README and docs pages that are marked ```bash tested, so that a
command a user copies works.

Each page's blocks run in order, in one scratch directory per page (removed once they all ran)
that links the repository's inputs/, slurm/ and .deps/ (so the blocks read them as from the
repository root), with `zerotrain` on PATH. A block's first line may be `# test: --opt VALUE
...`: each listed option's value in the block is replaced by the given one (realistic shapes for
the reader, tiny ones here). A block fails on the first failing command (bash -euo pipefail);
the test names the page, the block's line and its output.

Exit status: 0 every block ran, 1 one failed, 2 the test could not run.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

FENCE = re.compile(r"^```bash tested\s*$")


def blocks(page):
    """(line number, text) of each tested block of a markdown page."""
    out, lines = [], open(page, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((start + 1, "\n".join(body) + "\n"))
        i += 1
    return out


def substituted(text):
    """The block with its `# test:` replacements applied (the line itself kept as a comment)."""
    first, _, rest = text.partition("\n")
    if not first.startswith("# test:"):
        return text
    tokens = shlex.split(first[len("# test:"):])
    i = 0
    while i < len(tokens):
        option = tokens[i]
        if not option.startswith("--") or i + 1 >= len(tokens):
            sys.exit(f"bad '# test:' line (want --option VALUE pairs): {first}")
        value = tokens[i + 1]
        rest = re.sub(re.escape(option) + r"(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)",
                      lambda m: option + m.group(1) + shlex.quote(value), rest)
        i += 2
    return first + "\n" + rest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("pages", nargs="+", help="markdown pages, relative to the source dir")
    args = p.parse_args()
    bin_dir = os.path.join(args.work_dir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    link = os.path.join(bin_dir, "zerotrain")
    if not os.path.islink(link):
        os.symlink(os.path.abspath(args.zerotrain), link)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    total = 0
    for page in args.pages:
        found = blocks(os.path.join(args.source_dir, page))
        if not found:
            continue
        scratch = os.path.join(args.work_dir, page.replace("/", "_"))
        shutil.rmtree(scratch, ignore_errors=True)
        os.makedirs(scratch)
        for entry in ("inputs", "slurm", ".deps"):
            os.symlink(os.path.join(os.path.abspath(args.source_dir), entry),
                       os.path.join(scratch, entry))
        for line, text in found:
            script = substituted(text)
            print(f"--- {page}:{line}\n{script}", flush=True)
            t0 = time.time()
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=scratch, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace", timeout=900)  # a byte model's text
            print(proc.stdout[-6000:], flush=True)
            if proc.returncode != 0:
                print(f"FAIL: the block at {page}:{line} exited with {proc.returncode}")
                return 1
            print(f"ok   {page}:{line} ({time.time() - t0:.0f} s)", flush=True)
            total += 1
        # A page whose blocks all ran leaves nothing (the real model's pages write gigabytes);
        # a failed page's directory stays for the reader.
        shutil.rmtree(scratch, ignore_errors=True)
    if total == 0:
        print("SETUP ERROR: no ```bash tested block in the pages given")
        return 2
    print(f"all {total} tested blocks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
