#!/usr/bin/env python3
"""Writes tests/ctest_costs.txt, the measured test times a fresh build directory starts from.

`ctest -j2` starts the tests in descending order of their cost, which it learns from its own
runs (Testing/Temporary/CTestCostData.txt); a fresh build directory, as CI's is, has none and
would start them in an order that leaves long tests for the end, with one core idle. CMake
copies this file there when the build directory has no costs of its own (tests/CMakeLists.txt).

    python3 tests/ctest_costs.py LOG > tests/ctest_costs.txt

LOG: the output of `./run.sh test` (or of one `ctest` run); the first pass in it is read, and
every test that took at least MIN_SECONDS is kept (the others keep cost 0 and start last).
"""
import re
import sys

MIN_SECONDS = 1.0
RESULT = re.compile(r"Test +#\d+: (\S+) \.+\s*(?:\*+)?\s*\w+.*?([0-9.]+) sec")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    costs = {}
    with open(sys.argv[1], encoding="utf-8", errors="replace") as log:
        for line in log:
            if "Total Test time" in line and costs:
                break
            match = RESULT.search(line)
            if match:
                costs[match.group(1)] = float(match.group(2))
    if not costs:
        sys.exit(f"{sys.argv[1]}: no ctest results found")
    for name, seconds in sorted(costs.items(), key=lambda item: (-item[1], item[0])):
        if seconds >= MIN_SECONDS:
            print(f"{name} 1 {seconds:.2f}")
    print("---")


if __name__ == "__main__":
    main()
