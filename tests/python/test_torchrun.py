"""python -m distsampler.torchrun: torchrun itself, with every store on the classic backend where
that is needed (a torch without libuv, Debian 13's python3-torch) or asked for
(DISTSAMPLER_TORCHRUN_CLASSIC_STORE=1, which these tests set so that the path runs on every stack
whose torchrun has libuv stores). 2 ranks all-reduce their rank + 1 under each rendezvous a user
picks: torchrun's default (static), --standalone and c10d on a free port."""
import os
import subprocess
import sys
import tempfile

import pytest
import torch

from conftest import PYTHON_DIR

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
WORKER = """
import os
import sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
# One write per line: torchrun runs the ranks unbuffered (-u) on one console pipe, where print's
# text and its newline are two writes, and another rank's line can land between them.
sys.stdout.write(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {total.item():g} "
                 f"USE_LIBUV={os.environ.get('USE_LIBUV')}\\n")
dist.destroy_process_group()
"""
RENDEZVOUS = {
    "static": [],
    "standalone": ["--standalone"],
    "c10d": ["--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0"],
}


def launch(rendezvous, classic):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, OMP_NUM_THREADS="1")
    env.pop("USE_LIBUV", None)
    if classic:
        env["DISTSAMPLER_TORCHRUN_CLASSIC_STORE"] = "1"
    with tempfile.TemporaryDirectory() as work:
        script = os.path.join(work, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        # A static rendezvous takes --master_port (default 29500): a free one, for parallel runs.
        extra = ["--master_port=0"] if rendezvous == "static" and TORCH_VERSION >= (2, 0) else []
        proc = subprocess.run(
            [sys.executable, "-m", "distsampler.torchrun", "--nnodes=1", "--nproc_per_node=2",
             "--redirects", "2", "--tee", "2", "--monitor_interval", "0.1", "--log_dir", work,
             *RENDEZVOUS[rendezvous], *extra, script],
            env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))


@pytest.mark.parametrize("rendezvous", sorted(RENDEZVOUS))
def test_torchrun_with_classic_stores_runs_a_job(rendezvous):
    if TORCH_VERSION < (2, 4):
        pytest.skip(f"torch {torch.__version__}: its torchrun's stores have no libuv backend "
                    "to move off (from torch 2.4 on); the plain launch is test_plain_launch")
    assert launch(rendezvous, classic=True) == [
        "rank 0 of 2 sum 3 USE_LIBUV=0", "rank 1 of 2 sum 3 USE_LIBUV=0"]


def test_plain_launch_is_torchrun():
    """Where libuv works and nothing is asked, the launch is torch.distributed.run's own."""
    from distsampler.launch import libuv_available

    if not libuv_available():
        pytest.skip(f"torch {torch.__version__} has no libuv: the classic path is the plain one")
    assert launch("c10d", classic=False) == [
        "rank 0 of 2 sum 3 USE_LIBUV=None", "rank 1 of 2 sum 3 USE_LIBUV=None"]
