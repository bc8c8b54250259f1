#!/usr/bin/env python3
"""Every registered test but the gpu-labelled ones runs with CUDA_VISIBLE_DEVICES empty, so that
on a GPU node `--backend auto` still picks the CPU backend their references are written for
(tests/CMakeLists.txt: zt_hide_gpus_from_cpu_tests, ZT_CPU_TEST_ENV); and no gpu-labelled test
hides the GPU it needs. Reads the build's test list through `ctest --show-only=json-v1`.

  check_cpu_tests_hide_gpus.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys

CTEST, BUILD = sys.argv[1:3]
listing = subprocess.run([CTEST, "--show-only=json-v1"], cwd=BUILD, check=True,
                         capture_output=True, text=True).stdout
tests = json.loads(listing)["tests"]


def properties(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


missed, hidden_gpu_tests, cpu_tests = [], [], 0
for test in tests:
    props = properties(test)
    labels = props.get("LABELS", [])
    hides = "CUDA_VISIBLE_DEVICES=" in props.get("ENVIRONMENT", [])
    if "gpu" in labels:
        if hides:
            hidden_gpu_tests.append(test["name"])
    else:
        cpu_tests += 1
        if not hides:
            missed.append(test["name"])

print(f"{len(tests)} tests registered, {cpu_tests} of them not labelled gpu")
# The listing must hold the discovered GoogleTest cases too, or the check would pass on nothing.
if cpu_tests < 100:
    print(f"FAIL: only {cpu_tests} non-gpu tests listed; is {BUILD} built?")
    sys.exit(1)
for name in missed:
    print(f"FAIL: {name} sees the GPUs (no CUDA_VISIBLE_DEVICES= in its ENVIRONMENT)")
for name in hidden_gpu_tests:
    print(f"FAIL: {name} is labelled gpu but hides the GPUs")
sys.exit(1 if missed or hidden_gpu_tests else 0)
