"""A build with CUDA also compiles, without it, the sources whose code depends on it.

Outside the `cuda` folders a source may guard CUDA code with ZEROTRAIN_HAVE_CUDA (and its
NCCL, cuDNN and CUPTI siblings) or, in the tests, ZT_CUDA_LIBRARY (docs/ARCHITECTURE.md §1).
A machine without CUDA builds those sources with the guards off, under -Werror, and that
configuration (`./run.sh test-asan`, a user's CPU-only build) is not the one CI builds here. This
check recompiles each such source from the build's compile_commands.json with the CUDA
definitions and CUDA's include directory removed, so that a helper left unused or a declaration
missing without CUDA fails here (a full compile to /dev/null: GCC reports unused functions only
then). Exit 0 when every source compiles, 1 naming those that do not; in a build without CUDA
the build itself compiled them so, and the check says that and passes.

  check_no_cuda_compile.py --compile-commands BUILD/compile_commands.json --root SOURCE_DIR
  check_no_cuda_compile.py --self-test
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

GUARD = re.compile(r"\b(ZEROTRAIN_HAVE_(CUDA|NCCL|CUDNN|CUPTI)|ZT_CUDA_LIBRARY)\b")
CUDA_DEFINITION = re.compile(r"^-D(ZEROTRAIN_HAVE_(CUDA|NCCL|CUDNN|CUPTI)|ZT_CUDA_LIBRARY)(=.*)?$")


def guarded_sources(entries, root):
    """The compile_commands entries under `root` outside a `cuda` folder (and tests/gpu) whose
    source text names a CUDA guard."""
    chosen = []
    for e in entries:
        path = os.path.realpath(e["file"])
        rel = os.path.relpath(path, root)
        parts = rel.split(os.sep)
        if rel.startswith("..") or "cuda" in parts[:-1] or parts[:2] == ["tests", "gpu"]:
            continue
        if not path.endswith((".cpp", ".cc")):
            continue
        with open(path, encoding="utf-8") as f:
            if GUARD.search(f.read()):
                chosen.append(e)
    return chosen


def without_cuda(arguments):
    """The compiler arguments with the CUDA definitions, CUDA's include directory and the output
    replaced: a compile to /dev/null."""
    out, skip = [], False
    for i, a in enumerate(arguments):
        if skip:
            skip = False
            continue
        if CUDA_DEFINITION.match(a):
            continue
        if a in ("-isystem", "-I") and i + 1 < len(arguments) and "cuda" in arguments[i + 1]:
            skip = True
            continue
        if (a.startswith("-I") or a.startswith("-isystem")) and "cuda" in a[2:]:
            continue
        if a == "-o":
            out += ["-o", os.devnull]
            skip = True
            continue
        out.append(a)
    return out


def arguments_of(entry):
    return entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])


def check(compile_commands, root):
    with open(compile_commands, encoding="utf-8") as f:
        entries = json.load(f)
    if not any(CUDA_DEFINITION.match(a) for e in entries for a in arguments_of(e)):
        print("built without CUDA: the build itself compiled every source without it")
        return 0
    sources = guarded_sources(entries, os.path.realpath(root))
    failed = []
    for e in sources:
        cmd = without_cuda(arguments_of(e))
        r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
        name = os.path.relpath(os.path.realpath(e["file"]), root)
        if r.returncode != 0:
            failed.append(name)
            sys.stdout.write(f"{name} does not compile without CUDA:\n{r.stderr}\n")
    if failed:
        print(f"{len(failed)} of {len(sources)} sources fail without CUDA: {', '.join(failed)}")
        return 1
    print(f"{len(sources)} sources with CUDA guards compile without CUDA: "
          + ", ".join(os.path.relpath(os.path.realpath(e["file"]), root) for e in sources))
    return 0


def self_test():
    """A guarded helper used only with CUDA fails without it; the fixed source passes; a build
    without CUDA passes; sources in cuda folders are not chosen."""
    bad = """namespace {
#ifdef ZT_CUDA_LIBRARY
#endif
int helper() { return 1; }
}  // namespace
int main() {
#ifdef ZT_CUDA_LIBRARY
  return helper();
#else
  return 0;
#endif
}
"""
    good = bad.replace("#ifdef ZT_CUDA_LIBRARY\n#endif\nint helper() { return 1; }",
                       "#ifdef ZT_CUDA_LIBRARY\nint helper() { return 1; }\n#endif")
    compiler = os.environ.get("CXX", "c++")
    results = {}
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "src", "cuda"))
        for name, text in (("bad", bad), ("good", good)):
            src = os.path.join(d, "src", name + ".cpp")
            with open(src, "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(d, "src", "cuda", "kernels.cpp"), "w", encoding="utf-8") as f:
            f.write("#ifdef ZEROTRAIN_HAVE_CUDA\n#endif\nint broken(\n")

        def entry(name, cuda=True):
            args = [compiler, "-Wall", "-Werror"] + (["-DZT_CUDA_LIBRARY=\"x\""] if cuda else [])
            src = os.path.join(d, "src", name + ".cpp")
            return {"directory": d, "file": src, "arguments": args + ["-o", "x.o", "-c", src]}

        for case, names, cuda in (("bad", ["bad"], True), ("good", ["good", "cuda/kernels"], True),
                                  ("no_cuda", ["bad"], False)):
            cc = os.path.join(d, case + ".json")
            with open(cc, "w", encoding="utf-8") as f:
                json.dump([entry(n, cuda) for n in names], f)
            results[case] = check(cc, d)
    expected = {"bad": 1, "good": 0, "no_cuda": 0}
    if results != expected:
        print(f"self-test failed: {results} (expected {expected})")
        return 1
    print("self-test passed")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compile-commands")
    p.add_argument("--root")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.compile_commands or not a.root:
        p.error("--compile-commands and --root are required")
    return check(a.compile_commands, a.root)


if __name__ == "__main__":
    sys.exit(main())
