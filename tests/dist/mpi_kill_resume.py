"""Real processes under mpirun: SIGKILL one rank at a random step, resume from the last checkpoint
on a different number of processes (twice), and check exactly-once across the kills; then the
configuration-mismatch detector.

usage: mpi_kill_resume.py MPI_TRAIN DISTSAMPLER_CLI [SEED]
The random choices come from SEED (default DEFAULT_SEED, so that every run makes the same
choices; printed, and any other seed may be given).
"""

import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exactly_once  # noqa: E402

MPIRUN = [os.environ.get("DISTSAMPLER_MPIRUN") or "mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]

DEFAULT_SEED = 20261203  # every run makes the same choices; another seed as argument 3


def mpirun(np_, args, timeout=120):
    return subprocess.run(MPIRUN + ["-np", str(np_)] + args, capture_output=True, text=True,
                          timeout=timeout)


def kill_and_resume(train, cli, rng, order, drop_last, work):
    size, seed = rng.randint(200, 700), rng.randint(0, 99)
    worlds = [4] + rng.sample([1, 2, 3, 5, 6], 2)  # three runs, each on a new world size
    exactly_once.kill_and_resume(lambda world, args: mpirun(world, [train] + args),
                                 exactly_once.read_state, rng, work, worlds, size, seed, order,
                                 drop_last, cli, "signal 9")


def mismatch(train, work):
    base = [train, "--size", "300", "--log-dir", work, "--checkpoint", os.path.join(work, "c")]
    # One mpirun, four ranks; rank 1 started with another seed, and each rank's stderr in its own
    # file (mpirun interleaves the streams), by a shell around each rank. Not MPMD (a : b), on
    # which Open MPI 5.0.7's mpirun crashes (Debian 13), nor --output-filename, which writes
    # nothing there (PMIX_ERR_EXISTS).
    outdir = os.path.join(work, "out")
    os.mkdir(outdir)
    each = ["sh", "-c", 'r=$OMPI_COMM_WORLD_RANK; seed=0; [ "$r" = 1 ] && seed=7; '
                        'exec "$@" --seed "$seed" 2>"$0/rank.$r"', outdir]
    cmd = MPIRUN + ["-np", "4"] + each + base
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    for rank in range(4):
        path = os.path.join(outdir, f"rank.{rank}")
        with open(path) as f:
            err = f.read()
        expected = (f"rank {rank}: error: the sampler configuration differs across ranks, "
                    "refusing to start: seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1")
        assert expected in err, f"rank {rank} did not report the mismatch: {err!r}"
    assert not any(f.endswith(".log") for f in os.listdir(work)), "a rank consumed data"
    assert not os.path.exists(os.path.join(work, "c")), "a checkpoint was written"
    print("  mismatched seed: every rank stopped before the first batch, naming seed and ranks")


def main():
    train, cli = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_SEED
    print(f"seed {seed}")
    rng = random.Random(seed)
    for order, drop_last in [("torch", False), ("feistel", True), ("feistel", False),
                             ("torch", True)]:
        with tempfile.TemporaryDirectory() as work:
            kill_and_resume(train, cli, rng, order, drop_last, work)
    with tempfile.TemporaryDirectory() as work:
        mismatch(train, work)
    print("mpi kill-and-resume: exactly-once held across the kills; mismatch detected")


if __name__ == "__main__":
    main()
