"""Shared by the CPU benchmarks: train runs under mpirun, one OpenMP thread per rank, and the
token dataset they read."""
import os
import subprocess

MIB = 1024.0 * 1024.0


def mpirun_train(zerotrain, ranks, preset, data, out, options):
    """`mpirun --oversubscribe -np RANKS zerotrain train` with the given options; raises on failure."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    cmd = ["mpirun", "--oversubscribe", "-np", str(ranks), zerotrain, "train", "--preset", preset,
           "--data", data, "--out", out, "--log-every", "0"] + [str(o) for o in options]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


def prepare_text(zerotrain, text, out):
    subprocess.run([zerotrain, "prepare-data", "--text", text, "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
