"""What the oracle scripts share: running zerotrain's tools and telling a failed check (exit 1)
from a test that could not run (exit 2)."""

import subprocess


class SetupError(Exception):
    """The test could not run (a tool failed, an input is missing): exit 2."""


class CheckFailed(Exception):
    """A comparison failed: exit 1."""


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def run_tool(cmd):
    """Runs cmd, echoing it and its output; a non-zero exit is a SetupError. Returns stdout."""
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.stdout.strip():
        print(proc.stdout.rstrip(), flush=True)
    if proc.returncode != 0:
        raise SetupError(f"{cmd[0]} exited with {proc.returncode}")
    return proc.stdout
