#!/usr/bin/env python3
"""Checks two rules of docs/ARCHITECTURE.md §1 over src/: no function is longer than --max-lines
lines (from the line of its opening brace to that of its closing one), and no two files of a room
include each other, directly or around a loop. With --python DIR (repeatable), the first rule
holds for the Python under DIR too (tests, benchmarks): a function or method, from its `def` line
to its last, nested functions counted in the one that holds them and on their own; folders that
hold no source of the project (hidden ones, build trees, virtual environments) are skipped. A
file's unit is its path without the extension (x.h, x.cpp and x.cu are one unit; x_impl.h, a private part of x, belongs to x too); unit A
depends on unit B when one of A's files includes one of B's headers. Prints one line per
violation and exits 1 if there is any. --self-test runs the checks on a small made-up tree.
"""
import argparse
import ast
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
# What may stand between a parameter list's ')' and a function body's '{'.
FUNCTION_TAIL = re.compile(
    r"\)\s*(?:const|noexcept|override|final|mutable|&|&&|\s)*(?:->\s*[\w:<>,\s\*&]+)?\s*$")
# A constructor's member initializer list: `) : a_(x), b_{y}` (braces inside are balanced out).
INITIALIZER_LIST = re.compile(r"\)\s*:\s*[^;{}]*$")
SCOPE_HEAD = re.compile(r"(\bnamespace\b[\w:\s]*|extern\s*\"C\"\s*)$")
TYPE_HEAD = re.compile(r"\b(class|struct|union|enum)\b[^;{}()]*$")


def blank_comments_and_literals(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i) + 2
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delimiter = text[i + 2:text.index("(", i)]
            j = text.index(")" + delimiter + '"', i) + len(delimiter) + 2
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isalnum()):
            quote, j = text[i], i + 1
            while text[j] != quote:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def long_functions(path, text, max_lines):
    """(lines, first line) of each function body in `text` longer than max_lines."""
    code = blank_comments_and_literals(text)
    found, stack, line = [], [], 1  # stack: (kind, line of the brace)
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            head = code[max(0, i - 400):i].rstrip()
            at_scope = all(kind == "scope" for kind, _ in stack)
            if SCOPE_HEAD.search(head) or (TYPE_HEAD.search(head) and not head.endswith(")")):
                kind = "scope"
            elif at_scope and (FUNCTION_TAIL.search(head) or INITIALIZER_LIST.search(head)):
                kind = "function"
            else:
                kind = "block"
            stack.append((kind, line))
        elif c == "}" and stack:
            kind, first = stack.pop()
            if kind == "function" and line - first + 1 > max_lines:
                found.append(f"{path}:{first}: a function of {line - first + 1} lines "
                             f"(at most {max_lines})")
    return found


def unit_of(rel):
    unit = os.path.splitext(rel)[0]
    return unit[:-len("_impl")] if unit.endswith("_impl") else unit


def include_cycles(files):
    """Each loop of includes between units, as 'a -> b -> a' (files: {rel path: text})."""
    units = {unit_of(rel) for rel in files}
    deps = {u: set() for u in units}
    for rel, text in files.items():
        for target in INCLUDE.findall(text):
            other = unit_of(target)
            if other in units and other != unit_of(rel):
                deps[unit_of(rel)].add(other)
    index, low, stack, on_stack, loops = {}, {}, [], set(), []

    def visit(u):  # Tarjan's strongly connected components
        index[u] = low[u] = len(index)
        stack.append(u)
        on_stack.add(u)
        for v in sorted(deps[u]):
            if v not in index:
                visit(v)
                low[u] = min(low[u], low[v])
            elif v in on_stack:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            component = []
            while True:
                v = stack.pop()
                on_stack.discard(v)
                component.append(v)
                if v == u:
                    break
            if len(component) > 1:
                loops.append(" <-> ".join(sorted(component)))

    for u in sorted(units):
        if u not in index:
            visit(u)
    return [f"{loop}: these files include each other (around a loop)" for loop in loops]


def read_tree(src):
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    files[os.path.relpath(path, src)] = f.read()
    return files


def violations(src, max_lines):
    files = read_tree(src)
    out = []
    for rel, text in sorted(files.items()):
        out += long_functions(rel, text, max_lines)
    return out + include_cycles(files)


def long_python_functions(path, text, max_lines):
    """(lines, first line) of each Python function in `text` longer than max_lines."""
    found = []
    for node in ast.walk(ast.parse(text, filename=path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > max_lines:
                found.append(f"{path}:{node.lineno}: a function of {lines} lines "
                             f"(at most {max_lines}): {node.name}")
    return found


def project_folder(dirpath, name):
    """Whether a folder under a --python root holds the project's sources: not hidden, not a
    virtual environment or package cache, not a CMake build tree."""
    if name.startswith(".") or name in ("__pycache__", "site-packages", "node_modules"):
        return False
    path = os.path.join(dirpath, name)
    return not any(os.path.exists(os.path.join(path, marker))
                   for marker in ("pyvenv.cfg", "CMakeCache.txt", "CTestTestfile.cmake"))


def python_violations(roots, max_lines):
    out = []
    for root in roots:
        top = os.path.dirname(os.path.abspath(root))  # paths printed as tests/..., bench/...
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if project_folder(dirpath, d))
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, top)
                try:
                    with open(path, encoding="utf-8") as f:
                        out += long_python_functions(rel, f.read(), max_lines)
                except (SyntaxError, UnicodeDecodeError) as e:
                    out.append(f"{rel}: not Python this checker can read ({e})")
    return out


def self_test():
    body = "  x += 1;\n" * 4
    files = {
        "a/long.cpp": "namespace zt {\nint f(int x) {\n" + body + "  return x;\n}\n}\n",
        "a/short.cpp": "struct S {\n  int g() const { return 1; }\n};\nint h() {\n  return 2;\n}\n",
        "a/ctor.cpp": "S::S() : v_{1}, w_(2) {\n" + body + "}\n",
        "a/text.cpp": 'const char* t = "{{{{";\nint k() {\n  return 0;  // }}\n}\n',
        "a/x.h": '#include "a/y.h"\n',
        "a/y.cpp": '#include "a/y.h"\n#include "a/x.h"\n',
        "a/y.h": "",
        "a/z.h": '#include "a/z_impl.h"\n',
        "a/z_impl.h": '#include "a/z.h"\n',
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        long_method = ("def short():\n    return 1\n\n\nclass C:\n    def long(self):\n" +
                       "        x = 1\n" * 5 + "        return x\n")
        os.makedirs(os.path.join(tmp, "a", "venv", "lib"))  # a virtual environment: not read
        for rel, text in (("long.py", long_method), ("venv/pyvenv.cfg", ""),
                          ("venv/lib/long.py", long_method)):
            with open(os.path.join(tmp, "a", rel), "w", encoding="utf-8") as f:
                f.write(text)
        got = sorted(v.split(": ")[0] for v in violations(tmp, max_lines=5) +
                     python_violations([os.path.join(tmp, "a")], max_lines=5))
    want = sorted(["a/ctor.cpp:1", "a/long.cpp:2", "a/x <-> a/y", "a/long.py:6"])
    if got != want:
        print(f"self-test: expected {want}, got {got}")
        return 1
    print(f"self-test: the checker finds {want}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src")
    p.add_argument("--python", action="append", default=[], metavar="DIR",
                   help="check the length of the Python functions under DIR too (repeatable)")
    p.add_argument("--max-lines", type=int, default=100)
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    if args.self_test:
        return self_test()
    if not args.src and not args.python:
        p.error("give --src DIR, --python DIR or --self-test")
    found = (violations(args.src, args.max_lines) if args.src else []) + python_violations(
        args.python, args.max_lines)
    where = " ".join(([args.src] if args.src else []) + args.python)
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} violation(s) of docs/ARCHITECTURE.md §1 under {where}")
        return 1
    print(f"under {where}: no function over {args.max_lines} lines, no include loop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
