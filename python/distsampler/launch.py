"""One call that starts ``torch.distributed`` under the launcher that started this process.

``init_distributed()`` in a script run by ``srun``, ``torchrun`` or in an existing process group::

    from distsampler.launch import init_distributed
    rank, world_size, local_rank = init_distributed()

- A process group already exists: returns its rank and world size, initialises nothing.
- torchrun (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set): ``env://``.
- A SLURM job step (``srun``: ``SLURM_PROCID`` and ``SLURM_STEP_ID`` or
  ``SLURM_STEP_NUM_TASKS``): sets ``RANK`` (``SLURM_PROCID``), ``WORLD_SIZE``
  (``SLURM_STEP_NUM_TASKS``, else ``SLURM_NTASKS``), ``LOCAL_RANK`` (``SLURM_LOCALID``),
  ``MASTER_ADDR`` (the first node of ``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``, by
  ``scontrol show hostnames`` when it runs, else parsed; its ``NodeAddr`` by ``scontrol show
  node`` when that runs, else its name) and ``MASTER_PORT`` (unless set: derived
  from ``SLURM_JOB_ID`` and ``SLURM_STEP_ID``, the same on every task, different for the job's
  other steps), then ``env://``. Variables already set are kept.
- SLURM's variables outside a step (a program run in a batch script or an ``salloc`` shell
  without ``srun``: they describe the allocation, not this process) or no launcher at all:
  ``RuntimeError`` in one line.

``backend`` defaults to ``"nccl"`` when CUDA is available, else ``"gloo"``; other keyword
arguments go to ``torch.distributed.init_process_group``. ``destroy_distributed()`` ends the
group at the end of the program (a barrier, then ``destroy_process_group``; see its docstring).
"""
import os
import re
import shutil
import subprocess
from typing import Any, Dict, Mapping, NamedTuple, Optional

from . import _core

__all__ = ["Launch", "init_distributed", "destroy_distributed", "libuv_available",
           "slurm_environment", "first_host"]


class Launch(NamedTuple):
    rank: int
    world_size: int
    local_rank: Optional[int]


def _scontrol(*args: str) -> str:
    """What ``scontrol ARGS`` prints; '' when scontrol is not on PATH or fails."""
    scontrol = shutil.which("scontrol")
    if not scontrol:
        return ""
    try:
        out = subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list (``"node[01-04,07],gpu3"`` -> ``"node01"``), by
    ``scontrol show hostnames`` when it runs, else by parsing the list's first entry (each
    bracket group contributes its first number, zero padding kept)."""
    hosts = _scontrol("show", "hostnames", nodelist).split()
    return hosts[0] if hosts else _core.slurm_first_host(nodelist)


def _node_address(node: str) -> str:
    """The address SLURM reaches `node` at (its NodeAddr, which defaults to the node's name; a
    node name need not resolve), by ``scontrol show node``; `node` itself when that fails."""
    found = re.search(r"(?:^|\s)NodeAddr=(\S+)", _scontrol("show", "node", "-o", node))
    return found.group(1) if found else node


def slurm_environment(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The torchrun-style variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``) a SLURM job step's variables give, those already in ``env`` kept; ``{}``
    when ``env`` (default ``os.environ``) has no SLURM task variables. Raises ``RuntimeError``
    outside a step (see the module's docstring)."""
    env = os.environ if env is None else env  # the rules and their texts: launch/env.h's
    return dict(_core.slurm_torchrun_env(env, lambda nodes: _node_address(first_host(nodes))))


def init_distributed(backend: Optional[str] = None, **kwargs: Any) -> Launch:
    """Initialises ``torch.distributed`` from the launcher's variables unless a process group
    exists; returns (rank, world_size, local_rank). See the module's docstring."""
    import torch
    import torch.distributed as dist

    env = os.environ
    local = env.get("LOCAL_RANK", env.get("SLURM_LOCALID"))  # of an existing group
    if not (dist.is_available() and dist.is_initialized()):
        torchrun = all(n in env for n in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
        if not torchrun:
            found = slurm_environment(env)
            if not found:
                raise RuntimeError(
                    "no launcher variables: neither torchrun's (RANK, WORLD_SIZE, MASTER_ADDR, "
                    "MASTER_PORT) nor a SLURM step's (SLURM_PROCID, SLURM_STEP_NUM_TASKS); start "
                    "the program with torchrun or srun, or call "
                    "torch.distributed.init_process_group")
            env.update(found)
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if not libuv_available():
            # A torch built without libuv (Debian 13's 2.6) refuses env://'s default store
            # unless told; USE_LIBUV is what env:// reads.
            env.setdefault("USE_LIBUV", "0")
        dist.init_process_group(backend, init_method="env://", **kwargs)
        local = env.get("LOCAL_RANK")
    return Launch(dist.get_rank(), dist.get_world_size(), None if local is None else int(local))


def destroy_distributed() -> None:
    """``torch.distributed.destroy_process_group()`` after a barrier; nothing without a group.

    A gloo group's destructor joins gloo's threads holding the GIL in a PyTorch without pull
    request 154976 (2025), Debian 13's 2.6 among them: a thread still dropping the last reference
    to a tensor Python made waits for the GIL, and destroy_process_group hangs (seen in examples/
    under torchrun on Debian 13). The barrier and a short sleep wait with the GIL released, so
    those threads finish first: that narrows the window, it cannot close it."""
    import time

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()


def libuv_available() -> bool:
    """Whether this torch's TCPStore takes the libuv backend (the default of torchrun's stores and
    of init_process_group's from torch 2.4 on): a server on a free loopback port, at once closed.
    False on a build without libuv (Debian 13's python3-torch 2.6); True before torch 2.2, whose
    TCPStore has no libuv backend to ask for."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # C, not re-exported

    try:
        store = TCPStore("127.0.0.1", 0, 1, True, use_libuv=True, wait_for_workers=False)
    except TypeError:
        return True
    except RuntimeError as error:
        if "libuv" not in str(error):
            raise
        return False
    del store
    return True
