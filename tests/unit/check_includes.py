#!/usr/bin/env python3
"""Checks every #include under src/ against the "may include" table of docs/ARCHITECTURE.md §1.

A file in room R (the first folder under src/) may include headers of R itself and of the rooms
the table lists for R. Also: a file outside a folder named `cuda` includes nothing from one,
except in `app`. Prints one line per violation, "FILE:LINE: ...", and exits 1 if there is any.
--self-test runs the checker on a small made-up tree with known violations instead.
"""
import argparse
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ROW = re.compile(r"^\|\s*`(\w+)`\s*\|.*\|\s*([^|]*?)\s*\|\s*$")


def read_rules(doc):
    """{room: set of rooms it may include, or None for 'every room'} from the doc's table."""
    rules = {}
    with open(doc, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if not m:
                continue
            room, allowed = m.group(1), m.group(2).strip()
            if allowed == "every room":
                rules[room] = None
            elif allowed == "nothing":
                rules[room] = set()
            else:
                rules[room] = {a.strip() for a in allowed.split(",")}
    if not rules:
        raise SystemExit(f"{doc}: no 'may include' table found")
    for room, allowed in rules.items():
        unknown = (allowed or set()) - set(rules)
        if unknown:
            raise SystemExit(f"{doc}: room {room} may include unknown rooms {sorted(unknown)}")
    return rules


def violations(src, rules):
    out = []
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            room = rel.split(os.sep)[0]
            if room not in rules:
                out.append(f"{rel}:1: room '{room}' is not in the table of docs/ARCHITECTURE.md")
                continue
            in_cuda = "cuda" in rel.split(os.sep)[:-1]
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, start=1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    parts = target.split("/")
                    target_room = parts[0]
                    if len(parts) == 1 or target_room not in rules:
                        continue  # a local or third-party header, not a room's
                    allowed = rules[room]
                    if target_room != room and allowed is not None and target_room not in allowed:
                        out.append(f"{rel}:{number}: includes \"{target}\": {room} may not "
                                   f"include {target_room} (docs/ARCHITECTURE.md §1)")
                    if "cuda" in parts[:-1] and not in_cuda and room != "app":
                        out.append(f"{rel}:{number}: includes \"{target}\" from a cuda folder "
                                   f"outside one: it would not build without CUDA")
    return out


def self_test(doc):
    rules = read_rules(doc)
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "model/ok.cpp": '#include "backend/backend.h"\n#include "model/layout.h"\n',
            "model/up.cpp": '#include <vector>\n\n#include "engine/zero_engine.h"\n',
            "engine/gpu.cpp": '// x\n#include "backend/cuda/cuda_backend.h"\n',
            "backend/cuda/k.cu": '#include "util/cuda/cuda_check.h"\n',
            "comm/x.h": '#include "backend/backend.h"\n',
        }
        for rel, text in files.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        got = sorted(v.split(": ")[0] for v in violations(tmp, rules))
    want = ["comm/x.h:1", "engine/gpu.cpp:2", "model/up.cpp:3"]
    if got != want:
        print(f"self-test: expected violations at {want}, got {got}")
        return 1
    print(f"self-test: the checker finds {want}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--doc", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    if args.self_test:
        return self_test(args.doc)
    rules = read_rules(args.doc)
    found = violations(args.src, rules)
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} include(s) against docs/ARCHITECTURE.md §1")
        return 1
    print(f"every include under {args.src} follows docs/ARCHITECTURE.md §1 ({len(rules)} rooms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
