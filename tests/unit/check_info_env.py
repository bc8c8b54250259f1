#!/usr/bin/env python3
"""`zerotrain info --env` against what the host says independently (docs/troubleshooting.md, "Checking an
installation"): the version and commit (git), the MPI version (`mpirun --version`), Boost's
(boost/version.hpp), the CPU features (/proc/cpuinfo), the CPU Adam path they imply, OpenBLAS's
core and threads as requested through its environment, the compiled-in CUDA/NCCL/cuDNN pieces
(CMake's findings), and the launcher's rank variables under a simulated srun and a real mpirun.

  check_info_env.py ZEROTRAIN SOURCE_DIR VERSION BOOST_VERSION_HPP HAVE_CUDA HAVE_NCCL HAVE_CUDNN
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN, SRC, VERSION, BOOST_HPP = sys.argv[1:5]
HAVE_CUDA, HAVE_NCCL, HAVE_CUDNN = (v.upper() in ("ON", "TRUE", "1") for v in sys.argv[5:8])
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def base_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_COMM_WORLD_", "PMIX_", "PMI_", "ZT_", "OPENBLAS_"))}
    env.update(extra)
    return env


def report(env, *args):
    out = subprocess.run([BIN, "info", "--env", "--json", *args], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


cpuinfo = open("/proc/cpuinfo").read()
flags = set(re.search(r"^flags\s*:(.*)$", cpuinfo, re.M).group(1).split())
avx2, fma, avx512 = "avx2" in flags, "fma" in flags, "avx512f" in flags

# A rank of a simulated srun step, with OpenBLAS pinned through its own variables.
core = "Haswell" if avx2 else "Nehalem"
srun = base_env(SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_PROCID="3", SLURM_NTASKS="8",
                SLURM_LOCALID="1", NCCL_SOCKET_IFNAME="lo", CUDA_VISIBLE_DEVICES="1,2",
                OPENBLAS_CORETYPE=core, OPENBLAS_NUM_THREADS="1")
r = report(srun)

check(r["zerotrain"]["version"] == VERSION, f"version {r['zerotrain']['version']} == {VERSION}")
git = subprocess.run(["git", "-C", SRC, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                     text=True)
if git.returncode == 0:
    # git describe: HASH[-dirty], or TAG-N-gHASH[-dirty] once the repository has tags.
    check(git.stdout.strip() in r["zerotrain"]["commit"],
          f"commit {r['zerotrain']['commit']} names HEAD {git.stdout.strip()}")
else:
    check(r["zerotrain"]["commit"] == "unknown", "outside git the commit is 'unknown'")

mpirun = shutil.which("mpirun")
if mpirun:
    first = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    version = re.search(r"(\d+\.\d+\.\d+)", first).group(1)
    check(version in r["libraries"]["mpi"], f"MPI {version} in '{r['libraries']['mpi']}'")

boost = re.search(r'#define BOOST_LIB_VERSION "([0-9_]+)"', open(BOOST_HPP).read()).group(1)
check(r["libraries"]["boost"] == boost.replace("_", "."), f"Boost {boost}")
check(re.fullmatch(r"\d+\.\d+\.\d+", r["libraries"]["hdf5"]) is not None, "HDF5 version")

features = r["cpu"]["features"]
check(features == {"avx2": avx2, "fma": fma, "avx512f": avx512},
      f"CPU features {features} match /proc/cpuinfo")
expected_adam = "avx512" if avx512 else "avx2" if avx2 and fma else "scalar"
check(r["cpu"]["adam_path"] == expected_adam, f"CPU Adam path {r['cpu']['adam_path']}")
check(r["libraries"]["openblas"]["core"].lower() == core.lower(),
      f"OpenBLAS core {r['libraries']['openblas']['core']} == OPENBLAS_CORETYPE {core}")
check(r["libraries"]["openblas"]["threads"] == 1, "OpenBLAS threads == OPENBLAS_NUM_THREADS 1")

p = r["process"]
check(p["launcher"] == "srun" and p["rank"] == "3" and p["world_size"] == "8"
      and p["local_rank"] == "1" and p["slurm_job"] == "4242",
      f"srun placement: {p['launcher']} rank {p['rank']}/{p['world_size']} local {p['local_rank']}")
check(p["variables"].get("NCCL_SOCKET_IFNAME") == "lo"
      and p["variables"].get("CUDA_VISIBLE_DEVICES") == "1,2", "NCCL and CUDA variables listed")

check(("cuda" in r["compiled"]["backends"]) == HAVE_CUDA, "CUDA backend as configured")
check((r["libraries"]["nccl"] is not None) == HAVE_NCCL, "NCCL version iff NCCL is built in")
check(any("fused" in a for a in r["compiled"]["attention"]) == HAVE_CUDNN,
      "fused attention iff cuDNN is built in")
if HAVE_CUDA:
    gpu = r["cuda"]
    check(re.fullmatch(r"\d+\.\d+", gpu["runtime"] or "") is not None, "CUDA runtime version")
    if not gpu["devices"]:
        check(any("no CUDA device" in m for m in r["missing"]), "no device is stated as missing")
    for d in gpu["devices"]:
        check(d["memory_bytes"] > 0 and d["name"], f"device {d['index']}: {d['name']}")
else:
    check(any("without the CUDA backend" in m for m in r["missing"]), "no CUDA is stated")

# A bad CPU Adam cap is stated, not an error.
bad = report(base_env(ZT_CPU_ADAM_SIMD="sse9"))
check(bad["cpu"]["adam_path"] is None and any("ZT_CPU_ADAM_SIMD" in m for m in bad["missing"]),
      "a bad ZT_CPU_ADAM_SIMD is reported under missing")
alone = report(base_env())
check(alone["process"]["launcher"] is None and any("no launcher" in m for m in alone["missing"]),
      "a process without a launcher says so")

# Two ranks of a real mpirun: each reports its own rank.
if mpirun:
    env = base_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader")
    # Each rank's stdout to its own file (--output-filename), so the two reports cannot interleave.
    with tempfile.TemporaryDirectory() as outputs:
        out = subprocess.run([mpirun, "--oversubscribe", "-np", "2", "--output-filename", outputs,
                              BIN, "info", "--env", "--json"],
                             env=env, capture_output=True, text=True, timeout=120)
        check(out.returncode == 0, f"mpirun -np 2 info --env exits 0 {out.stderr[-500:]}")
        docs = [json.load(open(os.path.join(root, "stdout")))
                for root, _, files in os.walk(outputs) if "stdout" in files]
    ranks = sorted(d["process"]["rank"] for d in docs)
    check(ranks == ["0", "1"] and all(d["process"]["launcher"].startswith("mpirun") for d in docs),
          f"mpirun ranks {ranks}")

# The CPUs a launcher's binding leaves each rank, and the OpenMP threads it will run: the
# process's own affinity mask, then one rank bound to a hardware thread (a core may hold two)
# and one not (Open MPI's --bind-to).
mine = report(base_env(OMP_NUM_THREADS="3"))
check(mine["cpu"]["affinity_cpus"] == len(os.sched_getaffinity(0)),
      f"affinity_cpus {mine['cpu']['affinity_cpus']} == sched_getaffinity's "
      f"{len(os.sched_getaffinity(0))}")
check(mine["cpu"]["openmp_threads"] == 3, "openmp_threads == OMP_NUM_THREADS 3")
if mpirun and 1 < len(os.sched_getaffinity(0)) == os.cpu_count():
    env = base_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl="self,vader")
    for binding, want in (("hwthread", 1), ("none", len(os.sched_getaffinity(0)))):
        out = subprocess.run([mpirun, "-np", "1", "--bind-to", binding, BIN, "info", "--env",
                              "--json"], env=env, capture_output=True, text=True, timeout=120)
        got = json.loads(out.stdout)["cpu"]["affinity_cpus"] if out.returncode == 0 else None
        check(got == want, f"mpirun --bind-to {binding}: affinity_cpus {got} == {want}")

# The text form and a refused PATH.
text = subprocess.run([BIN, "info", "--env"], env=base_env(), capture_output=True, text=True)
check(text.returncode == 0 and text.stdout.startswith("zerotrain:\n"), "text report")
refused = subprocess.run([BIN, "info", "--env", "/tmp"], env=base_env(), capture_output=True,
                         text=True)
check(refused.returncode != 0 and "takes no PATH" in refused.stderr, "info --env PATH is refused")

sys.exit(1 if failures else 0)
