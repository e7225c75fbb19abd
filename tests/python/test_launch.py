"""distsampler.launch: torch.distributed from a SLURM step's or torchrun's variables (issue 21,
defect 2), with faked environments; tests/slurm/run.sh runs it under a real srun."""
import os
import socket
import stat

import pytest

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)
import torch.distributed as dist  # noqa: E402

from distsampler import launch  # noqa: E402

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID",
                 "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_JOB_NODELIST",
                 "SLURM_STEP_NODELIST")

STEP = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "2",
        "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0",
        "SLURM_JOB_NODELIST": "node[07-09],gpu1", "SLURM_STEP_NODELIST": "node[08-09]"}


@pytest.fixture
def no_scontrol(monkeypatch):
    """first_host parses the list itself (no scontrol on PATH)."""
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)


def test_a_step_gives_torchruns_variables(no_scontrol):
    env = launch.slurm_environment(STEP)
    assert env["RANK"] == "2"
    assert env["WORLD_SIZE"] == "4"  # the step's tasks, not the allocation's 8
    assert env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == "node08"  # the step's first host
    port = int(env["MASTER_PORT"])
    assert 12000 <= port < 32000
    # The same on every task of the step, another for the job's next step.
    assert launch.slurm_environment(dict(STEP, SLURM_PROCID="0"))["MASTER_PORT"] == str(port)
    assert launch.slurm_environment(dict(STEP, SLURM_STEP_ID="1"))["MASTER_PORT"] != str(port)
    # What is set stays.
    kept = launch.slurm_environment(dict(STEP, MASTER_PORT="29400", MASTER_ADDR="head"))
    assert "MASTER_PORT" not in kept and "MASTER_ADDR" not in kept


@pytest.mark.parametrize("nodelist,first", [
    ("localhost", "localhost"), ("a,b", "a"), ("node[01-04,07],gpu3", "node01"),
    ("gpu3,node[01-04]", "gpu3"), ("rack[2-3]-n[005-006]", "rack2-n005"), ("n[7]", "n7")])
def test_first_host_of_the_simple_forms(no_scontrol, nodelist, first):
    assert launch.first_host(nodelist) == first


def test_a_bad_node_list_is_named(no_scontrol):
    with pytest.raises(ValueError, match=r"SLURM node list = 'a\]\['"):
        launch.first_host("a][")


def test_scontrol_expands_the_list_and_gives_the_nodes_address(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\n"
                    "[ \"$1 $2\" = 'show hostnames' ] && printf 'fromscontrol\\nb\\n'\n"
                    "[ \"$1 $2 $3 $4\" = 'show node -o fromscontrol' ] && "
                    "echo 'NodeName=fromscontrol Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=h'\n"
                    "exit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert launch.first_host("whatever[1-2]") == "fromscontrol"
    # A node name need not resolve: the master is the first node's NodeAddr.
    assert launch.slurm_environment(STEP)["MASTER_ADDR"] == "10.1.2.3"


def test_outside_a_step_is_refused_in_one_line():
    # A program run directly in an `sbatch -n 4` script: the allocation's variables.
    with pytest.raises(RuntimeError) as batch:
        launch.slurm_environment({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4"})
    assert "SLURM_PROCID = 0, SLURM_NTASKS = 4 without SLURM_STEP_ID" in str(batch.value)
    assert "\n" not in str(batch.value)
    # launch/env.h's text (the C++ library owns the rule), with this module's remedy.
    assert str(batch.value).endswith("not in a job step, so those describe the allocation, not "
                                     "this process; start it with srun (or torchrun)")
    # An `salloc -n 2` shell sets SLURM_NTASKS only.
    with pytest.raises(RuntimeError, match="SLURM_NTASKS = 2 without SLURM_STEP_ID"):
        launch.slurm_environment({"SLURM_JOB_ID": "8", "SLURM_NTASKS": "2"})
    assert launch.slurm_environment({}) == {}


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher variables; afterwards the environment as before (init_distributed writes
    os.environ itself) and no process group."""
    saved = {name: os.environ.get(name) for name in LAUNCHER_VARS}
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    assert not dist.is_initialized()
    yield monkeypatch
    if dist.is_initialized():
        dist.destroy_process_group()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_init_from_a_one_task_step(clean_env, no_scontrol):
    for name, value in dict(STEP, SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="1",
                            SLURM_STEP_NODELIST="localhost",
                            MASTER_PORT=str(free_port())).items():
        clean_env.setenv(name, value)
    got = launch.init_distributed("gloo")
    assert got == (0, 1, 0)
    assert dist.is_initialized() and dist.get_world_size() == 1
    assert os.environ["MASTER_ADDR"] == "localhost" and os.environ["RANK"] == "0"
    assert launch.init_distributed("gloo") == (0, 1, 0)  # a group exists: nothing more


def test_init_from_torchrun_variables(clean_env):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                        # torchrun under srun: torchrun's ranks win
                        "SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}.items():
        clean_env.setenv(name, value)
    assert launch.init_distributed("gloo") == (0, 1, 0)


def test_no_launcher_is_refused(clean_env):
    with pytest.raises(RuntimeError, match="no launcher variables"):
        launch.init_distributed("gloo")
    clean_env.setenv("SLURM_PROCID", "0")
    clean_env.setenv("SLURM_NTASKS", "4")
    with pytest.raises(RuntimeError, match="without SLURM_STEP_ID"):
        launch.init_distributed("gloo")
    assert not dist.is_initialized()


def test_destroy_distributed_ends_the_group_and_is_a_no_op_without_one(clean_env):
    launch.destroy_distributed()  # no group: nothing
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}.items():
        clean_env.setenv(name, value)
    launch.init_distributed("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    del total  # the last reference to a collective's tensor, as the examples drop theirs
    launch.destroy_distributed()
    assert not dist.is_initialized()
    launch.destroy_distributed()
