"""A build with CUDA also compiles, without it, the sources whose code depends on it.

Outside the `cuda` folders a source may guard CUDA code with ZEROTRAIN_HAVE_CUDA (and its
NCCL, cuDNN and CUPTI siblings, CMake's definitions) or, in the tests, ZT_CUDA_LIBRARY
(tests/CMakeLists.txt), and `app` may include headers from a `cuda` folder under such a guard
(docs/ARCHITECTURE.md §1). A machine without CUDA builds those sources with the guards off,
under -Werror, and that configuration (`./run.sh test-asan`, a user's CPU-only build) is not
the one CI builds here. This check recompiles, from the build's compile_commands.json, every
source outside the `cuda` folders and tests/gpu that names a guard or reaches, through its
quoted includes, a header that names one or lies in a `cuda` folder. It removes the CUDA
definitions and the include directories that hold CUDA's, NCCL's, cuDNN's or CUPTI's headers,
and compiles to /dev/null (GCC reports unused functions only in a real compile), so a helper left
unused or an unguarded CUDA include fails here (the latter only where CUDA's headers are not on
the compiler's default path too; on this project's machines /usr/local/include has them).
Targets CMake builds only with CUDA are named with --cuda-only-target and skipped. Exit 0 when every source compiles, 1 naming
those that do not; in a build without CUDA the build itself compiled them so, and the check says
that and passes.

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
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# CMake's target_precompile_headers forces this header (and its .gch) into every source.
PRECOMPILED_HEADER = "cmake_pch."
# A directory that holds one of these is a CUDA library's include directory.
CUDA_HEADERS = ("cuda_runtime.h", "nccl.h", "cudnn.h", "cupti.h", "cublasLt.h")


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def include_dirs(arguments, directory):
    """The -I and -isystem directories of a compile, absolute."""
    dirs, i = [], 0
    while i < len(arguments):
        a = arguments[i]
        if a in ("-I", "-isystem") and i + 1 < len(arguments):
            dirs.append(arguments[i + 1])
            i += 2
            continue
        if a.startswith("-isystem") and len(a) > len("-isystem"):
            dirs.append(a[len("-isystem"):])
        elif a.startswith("-I") and len(a) > 2:
            dirs.append(a[2:])
        i += 1
    return [os.path.realpath(os.path.join(directory, d)) for d in dirs]


def in_cuda_folder(rel):
    parts = rel.split(os.sep)
    return "cuda" in parts[:-1] or parts[:2] == ["tests", "gpu"]


def depends_on_cuda(path, dirs, root, seen):
    """Whether `path` names a guard, or one of the in-tree headers it reaches through quoted
    includes does or lies in a `cuda` folder."""
    if path in seen:
        return False
    seen.add(path)
    text = read_text(path)
    if GUARD.search(text):
        return True
    for name in QUOTED_INCLUDE.findall(text):
        for base in [os.path.dirname(path)] + dirs:
            header = os.path.realpath(os.path.join(base, name))
            if not os.path.isfile(header):
                continue
            rel = os.path.relpath(header, root)
            if rel.startswith(".."):
                break  # outside the tree: a library's header
            if in_cuda_folder(rel) or depends_on_cuda(header, dirs, root, seen):
                return True
            break
    return False


def object_of(entry):
    args = arguments_of(entry)
    return entry.get("output") or next(
        (args[i + 1] for i, a in enumerate(args[:-1]) if a == "-o"), "")


def guarded_sources(entries, root, cuda_only_targets=()):
    """The compile_commands entries under `root`, outside a `cuda` folder and tests/gpu and
    not of a target built only with CUDA, whose source depends on CUDA (depends_on_cuda)."""
    chosen = []
    for e in entries:
        if any(f"{t}.dir/" in object_of(e) for t in cuda_only_targets):
            continue
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(path, root)
        if rel.startswith("..") or in_cuda_folder(rel) or not path.endswith((".cpp", ".cc")):
            continue
        if not os.path.isfile(path):
            continue  # a stale entry
        dirs = include_dirs(arguments_of(e), e["directory"])
        if depends_on_cuda(path, dirs, root, set()):
            chosen.append((e, rel))
    return chosen


def is_cuda_include_dir(d):
    return any(os.path.isfile(os.path.join(d, h)) for h in CUDA_HEADERS)


def without_cuda(arguments, directory):
    """The compiler arguments with the CUDA definitions and CUDA's include directories removed
    and the output replaced: a compile to /dev/null. A precompiled header CMake forces in
    (`-include .../cmake_pch.hxx`, `-Winvalid-pch`) goes too: it was built with the CUDA
    definitions, and the source must compile from its own includes."""
    out, i = [], 0
    while i < len(arguments):
        a = arguments[i]
        if CUDA_DEFINITION.match(a) or a == "-Winvalid-pch":
            i += 1
            continue
        if a == "-include" and i + 1 < len(arguments) and \
                os.path.basename(arguments[i + 1]).startswith(PRECOMPILED_HEADER):
            i += 2
            continue
        if a in ("-I", "-isystem", "-o") and i + 1 < len(arguments):
            value = arguments[i + 1]
            if a == "-o":
                out += ["-o", os.devnull]
            elif not is_cuda_include_dir(os.path.join(directory, value)):
                out += [a, value]
            i += 2
            continue
        joined = next((f for f in ("-isystem", "-I") if a.startswith(f) and len(a) > len(f)), None)
        if joined and is_cuda_include_dir(os.path.join(directory, a[len(joined):])):
            i += 1
            continue
        out.append(a)
        i += 1
    return out


def arguments_of(entry):
    return entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])


def check(compile_commands, root, cuda_only_targets=()):
    root = os.path.realpath(root)
    with open(compile_commands, encoding="utf-8") as f:
        entries = json.load(f)
    if not any(CUDA_DEFINITION.match(a) for e in entries for a in arguments_of(e)):
        print("built without CUDA: the build itself compiled every source without it")
        return 0
    sources = guarded_sources(entries, root, cuda_only_targets)
    failed = []
    for e, rel in sources:
        cmd = without_cuda(arguments_of(e), e["directory"])
        r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
        if r.returncode != 0:
            failed.append(rel)
            sys.stdout.write(f"{rel} does not compile without CUDA:\n{r.stderr}\n")
    if failed:
        print(f"{len(failed)} of {len(sources)} sources fail without CUDA: {', '.join(failed)}")
        return 1
    print(f"{len(sources)} sources that depend on CUDA compile without it: "
          + ", ".join(rel for _, rel in sources))
    return 0


SELF_TEST_FILES = {
    # A helper only the CUDA branch uses: -Werror=unused-function without CUDA.
    "src/bad.cpp": """namespace {
int helper() { return 1; }
}  // namespace
int main() {
#ifdef ZT_CUDA_LIBRARY
  return helper();
#else
  return 0;
#endif
}
""",
    # Guarded right, and it needs a header of a build directory named build-cuda.
    "src/good.cpp": """#include "generated.h"
namespace {
#ifdef ZT_CUDA_LIBRARY
int helper() { return 1; }
#endif
}  // namespace
int main() {
#ifdef ZT_CUDA_LIBRARY
  return helper();
#else
  return kGenerated - 1;
#endif
}
""",
    # Right without CUDA, compiled with a precompiled header made with CUDA's definitions.
    "src/precompiled.cpp": """#include <vector>
#ifdef ZEROTRAIN_HAVE_CUDA
#endif
int main() { return static_cast<int>(std::vector<int>{}.size()); }
""",
    # The same, but it uses a header only the precompiled one brings in.
    "src/needs_precompiled.cpp": """#ifdef ZEROTRAIN_HAVE_CUDA
#endif
int main() { return static_cast<int>(std::vector<int>{}.size()); }
""",
    # A cuda-folder header included without a guard: it needs CUDA's own header.
    "src/app/unguarded.cpp": """#include "cuda/kernels.h"
int main() { return kernel_value() - 1; }
""",
    "src/app/guarded.cpp": """#ifdef ZEROTRAIN_HAVE_CUDA
#include "cuda/kernels.h"
#endif
int main() {
#ifdef ZEROTRAIN_HAVE_CUDA
  return kernel_value() - 1;
#else
  return 0;
#endif
}
""",
    "src/cuda/kernels.h": """#include <cuda_runtime.h>
inline int kernel_value() { return kCudaValue; }
""",
    "src/cuda/kernels.cpp": "#ifdef ZEROTRAIN_HAVE_CUDA\n#endif\nint broken(\n",
    "tests/gpu/gpu_test.cpp": "#ifdef ZT_CUDA_LIBRARY\n#endif\nint broken(\n",
    "bench/gpu_only.cpp": "#ifdef ZEROTRAIN_HAVE_CUDA\n#endif\nint broken(\n",
    "build-cuda/generated/generated.h": "constexpr int kGenerated = 1;\n",
    "fake-cuda/include/cuda_runtime.h": "constexpr int kCudaValue = 1;\n",
}


def self_test():
    """Each way to break a CPU-only build fails; the right guards pass with a build directory
    whose name holds "cuda"; cuda folders, tests/gpu and a CUDA-only target are not compiled; a
    build without CUDA passes."""
    compiler = os.environ.get("CXX", "c++")
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELF_TEST_FILES.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                f.write(text)

        def entry(rel, cuda=True):
            defs = "-DZEROTRAIN_HAVE_CUDA=1 -DZT_CUDA_LIBRARY=\\\"x\\\" " if cuda else ""
            pch = f"-Winvalid-pch -include {header} " if "precompiled" in rel else ""
            return {"directory": os.path.join(d, "build-cuda"), "file": os.path.join(d, rel),
                    "command": f"{compiler} {defs}-I{d}/src -I {d}/build-cuda/generated "
                               f"-isystem {d}/fake-cuda/include -Wall -Werror {pch}"
                               f"-o CMakeFiles/{os.path.basename(rel)[:-4]}.dir/x.o "
                               f"-c {os.path.join(d, rel)}"}

        # A precompiled header as CMake makes one: the .gch beside the header it forces in,
        # built with a CUDA definition that tests the source's guard (so invalid without it).
        header = os.path.join(d, "build-cuda", "pch", "cmake_pch.hxx")
        os.makedirs(os.path.dirname(header))
        with open(header, "w", encoding="utf-8") as f:
            f.write("#ifdef ZEROTRAIN_HAVE_CUDA\n#endif\n#include <vector>\n")
        subprocess.run([compiler, "-DZEROTRAIN_HAVE_CUDA=1", "-x", "c++-header", header, "-o",
                        header + ".gch"], check=True)

        good = ["src/good.cpp", "src/app/guarded.cpp", "src/cuda/kernels.cpp",
                "tests/gpu/gpu_test.cpp", "bench/gpu_only.cpp"]
        for case, rels, cuda in (("unused_helper", ["src/bad.cpp"], True),
                                 ("unguarded_include", ["src/app/unguarded.cpp"], True),
                                 ("guarded", good, True),
                                 ("precompiled", ["src/precompiled.cpp"], True),
                                 ("needs_precompiled", ["src/needs_precompiled.cpp"], True),
                                 ("no_cuda", ["src/bad.cpp"], False)):
            cc = os.path.join(d, case + ".json")
            with open(cc, "w", encoding="utf-8") as f:
                json.dump([entry(r, cuda) for r in rels], f)
            results[case] = check(cc, d, ["gpu_only"])
    expected = {"unused_helper": 1, "unguarded_include": 1, "guarded": 0, "precompiled": 0,
                "needs_precompiled": 1, "no_cuda": 0}
    if results != expected:
        print(f"self-test failed: {results} (expected {expected})")
        return 1
    print("self-test passed")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compile-commands")
    p.add_argument("--root")
    p.add_argument("--cuda-only-target", action="append", default=[],
                   help="a target CMake builds only with CUDA (its sources are not checked)")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.compile_commands or not a.root:
        p.error("--compile-commands and --root are required")
    return check(a.compile_commands, a.root, a.cuda_only_target)


if __name__ == "__main__":
    sys.exit(main())
