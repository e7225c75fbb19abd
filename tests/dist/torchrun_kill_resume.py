"""Real processes under torchrun (gloo, CPU): SIGKILL one rank at a random step, resume from the
last checkpoint on a different number of processes (twice), and check exactly-once across the
kills; then the configuration-mismatch detector. The torchrun twin of mpi_kill_resume.py,
running examples/torch_checkpoint.py (distsampler.torch's state_dict and agreement).

usage: torchrun_kill_resume.py DISTSAMPLER_CLI PYTHON_PACKAGE_DIR [SEED]
The random choices come from SEED (default DEFAULT_SEED, so that every run makes the same
choices; printed, and any other seed may be given).
"""

import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exactly_once  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "torch_checkpoint.py")

DEFAULT_SEED = 20261203


def torchrun(nproc, args, package_dir, logs, timeout=120):
    # localhost:0: the rendezvous takes a free port. --redirects/--tee 2: Debian's torchrun
    # crashes with the default 0 (see examples/run_demos.sh); per-rank stderr goes to `logs`.
    # --monitor_interval 0.1, torch 2's default: Debian's 1.13 checks its workers every 5 s, so
    # each launch outlived its ranks by up to 5 s.
    env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "distsampler.torchrun", "--nnodes=1",
           f"--nproc_per_node={nproc}", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
           "--redirects", "2", "--tee", "2", "--monitor_interval", "0.1", "--log_dir", logs,
           EXAMPLE] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def read_checkpoint(path):
    """(epoch, consumed) of the sampler state in a checkpoint torch.save wrote."""
    import torch
    state = torch.load(path)["sampler"]
    return state["epoch"], state["consumed"]


def kill_and_resume(cli, package_dir, rng, order, drop_last, work):
    size, seed = rng.randint(100, 400), rng.randint(0, 99)
    worlds = rng.sample([1, 2, 3, 4], 3)  # three runs, each on a new world size

    def launch(world, args):
        with tempfile.TemporaryDirectory() as logs:
            return torchrun(world, args, package_dir, logs)

    exactly_once.kill_and_resume(launch, read_checkpoint, rng, work, worlds, size, seed, order,
                                 drop_last, cli, "Signal 9 (SIGKILL)")


def every_rank_failed(stderr, nproc):
    """Whether torchrun's report says that each of the nproc ranks ended non-zero: the ranks its
    summary lists, each with a non-zero exit code, and the others terminated by torchrun itself
    (SIGTERM, sent as soon as it sees the first failure: a rank that has printed its error may
    not have exited yet, and the summary leaves it out)."""
    listed = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)",
        stderr)}
    terminated = set(re.findall(r"Sending process (\d+) closing signal SIGTERM", stderr))
    terminated -= {pid for _, pid in listed.values()}
    return (all(code != 0 for code, _ in listed.values()) and set(listed) <= set(range(nproc))
            and len(listed) + len(terminated) == nproc)


def mismatch(package_dir, work):
    """Four ranks, rank 1 with another seed: every rank reports it and exits non-zero."""
    args = ["--size", "300", "--seed", "0", "--rank-seed", "1=7", "--log-dir", work,
            "--checkpoint", os.path.join(work, "c.pt")]
    with tempfile.TemporaryDirectory() as logs:
        r = torchrun(4, args, package_dir, logs)
        assert r.returncode != 0, r.stdout + r.stderr
        stderr = {}
        for dirpath, _, files in os.walk(logs):  # <logs>/<run id>/attempt_0/<rank>/stderr.log
            if "stderr.log" in files:
                with open(os.path.join(dirpath, "stderr.log")) as f:
                    stderr[int(os.path.basename(dirpath))] = f.read()
    assert sorted(stderr) == [0, 1, 2, 3], stderr
    for rank in range(4):
        expected = (f"rank {rank}: error: the sampler configuration differs across ranks, "
                    "refusing to start: seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1")
        assert expected in stderr[rank], f"rank {rank} did not report it: {stderr[rank]!r}"
    assert every_rank_failed(r.stderr, 4), r.stderr
    for name in os.listdir(work):  # the logs are opened before the first batch: empty
        assert not name.endswith(".log") or os.path.getsize(os.path.join(work, name)) == 0, name
    assert not os.path.exists(os.path.join(work, "c.pt")), "a checkpoint was written"
    print("  mismatched seed: every rank stopped before the first batch, naming seed and ranks")


def main():
    cli, package_dir = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_SEED
    print(f"seed {seed}", flush=True)
    rng = random.Random(seed)
    for order, drop_last in [("torch", False), ("feistel", True)]:
        with tempfile.TemporaryDirectory() as work:
            kill_and_resume(cli, package_dir, rng, order, drop_last, work)
    with tempfile.TemporaryDirectory() as work:
        mismatch(package_dir, work)
    print("torchrun kill-and-resume: exactly-once held across the kills; mismatch detected")


if __name__ == "__main__":
    main()
