#!/usr/bin/env python3
"""The option reference of every zerotrain command, from the program's own --help.

  reference.py --zerotrain BIN --out DIR     writes DIR/README.md (the commands) and DIR/CMD.md
  reference.py --zerotrain BIN --check DIR   exits 1 naming each page of DIR that differs from
                                             what BIN prints (the committed copy drifted)

The build writes build/reference/ (target zt_reference); the test docs_reference checks the
committed docs/reference/ against the binary. To update the committed copy after changing an
option: python3 tests/docs/reference.py --zerotrain build/zerotrain --out docs/reference
"""

import argparse
import difflib
import os
import re
import subprocess
import sys

HEADER = ("<!-- Generated from `zerotrain {cmd} --help` by tests/docs/reference.py; do not edit: "
          "the test docs_reference fails when this page and the program differ. -->\n\n")


def help_text(binary, *args):
    proc = subprocess.run([binary, *args, "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "80"})
    if proc.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} --help exited with {proc.returncode}")
    return proc.stdout


def pages(binary):
    """{file name: text} for the index and every command."""
    overview = help_text(binary)
    commands = re.findall(r"^  ([a-z-]+)\t", overview, flags=re.M)
    if not commands:
        sys.exit(f"{binary} --help lists no commands")
    out = {"README.md": HEADER.format(cmd="").replace("`zerotrain  --help`", "`zerotrain --help`")
           + "# zerotrain command reference\n\n```text\n" + overview.rstrip() + "\n```\n\n"
           + "".join(f"- [{c}]({c}.md)\n" for c in commands)}
    for c in commands:
        out[f"{c}.md"] = (HEADER.format(cmd=c) + f"# zerotrain {c}\n\n```text\n"
                          + help_text(binary, c).rstrip() + "\n```\n")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", required=True)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out")
    mode.add_argument("--check")
    args = p.parse_args()
    generated = pages(args.zerotrain)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name, text in generated.items():
            with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
                f.write(text)
        return 0
    differs = []
    committed = set(n for n in os.listdir(args.check) if n.endswith(".md")) \
        if os.path.isdir(args.check) else set()
    for name, text in generated.items():
        path = os.path.join(args.check, name)
        have = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
        if have != text:
            differs.append(name)
            sys.stdout.writelines(difflib.unified_diff(
                have.splitlines(True), text.splitlines(True), path, "zerotrain --help"))
    for extra in sorted(committed - set(generated)):
        differs.append(extra)
        print(f"{os.path.join(args.check, extra)}: no such command any more")
    if differs:
        print(f"FAIL: {', '.join(differs)} in {args.check} differ from the program's --help; "
              f"update with: python3 tests/docs/reference.py --zerotrain build/zerotrain "
              f"--out docs/reference")
        return 1
    print(f"{len(generated)} reference pages match the program's --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
