"""The node-shared torch order (node/node_order.h) under torchrun, as two "nodes" on this host.

Usage: torchrun_node_shared.py PYTHON_PACKAGE_DIR

Starts two torchrun agents (c10d rendezvous, --nnodes=2, 2 local ranks each); GROUP_RANK,
which differs between the agents, is part of the node's identity, so each agent's ranks form
their own node. Every rank iterates 3 epochs of two DistributedSampler(node_shared=True) of the
same configuration (a training loader and an evaluation pass over the training set: each keeps
its own permutation, issue 21's defect 6) with prefetching and checks them against the per-rank
build bit for bit; the driver then checks that on each node local rank 0 built every epoch's
permutation once per sampler and local rank 1 mapped them (built none), that no rank fell back to
a per-rank build, and that /dev/shm keeps no segment. Then one agent of 2 ranks where rank 1
raises an exception after epoch 0 (torchrun stops rank 0): /dev/shm keeps nothing (defect 7).
Run as a torchrun worker (the "worker" or "crash" argument), it is one such rank.
"""
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

N = 200_003
EPOCHS = 3


def worker(out_dir):
    import numpy as np
    import torch.distributed as dist
    from distsampler import _core
    from distsampler.launch import destroy_distributed
    from distsampler.torch import DistributedSampler

    dist.init_process_group("gloo")
    dataset = range(N)
    shared = DistributedSampler(dataset, seed=5, node_shared=True)
    twin = DistributedSampler(dataset, seed=5, node_shared=True)  # the same configuration
    plain = DistributedSampler(dataset, seed=5, prefetch=False, check_agreement=False)
    ok = True
    for epoch in range(EPOCHS):
        plain.set_epoch(epoch)
        want = np.fromiter(iter(plain), dtype=np.int64)
        for sampler in (shared, twin):
            sampler.set_epoch(epoch)
            got = np.fromiter(iter(sampler), dtype=np.int64)
            ok = ok and got.shape == want.shape and bool((got == want).all())
    del shared, twin  # waits for the background builds of epoch EPOCHS, if they started
    counts = _core.node_order_counts()
    report = dict(counts, ok=ok, rank=dist.get_rank(), local_rank=int(os.environ["LOCAL_RANK"]),
                  group_rank=int(os.environ["GROUP_RANK"]))
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    destroy_distributed()


def crash(out_dir):
    """Rank 1 raises after epoch 0; rank 0 waits in a barrier until torchrun stops it."""
    import torch.distributed as dist
    from distsampler.torch import DistributedSampler

    dist.init_process_group("gloo")
    sampler = DistributedSampler(range(N), seed=5, node_shared=True)
    sum(1 for _ in sampler)  # epoch 0 built and shared; epoch 1 prefetched
    with open(os.path.join(out_dir, f"crash{dist.get_rank()}"), "w") as f:
        f.write("read epoch 0")
    if dist.get_rank() == 1:
        raise RuntimeError("an ordinary exception on one rank")
    dist.barrier()


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def main(package_dir):
    before = set(glob.glob("/dev/shm/distsampler-*"))
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as out_dir:
        env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1")
        port = free_port()
        agents = []
        for node_rank in (0, 1):
            logs = os.path.join(out_dir, f"logs{node_rank}")
            cmd = [sys.executable, "-m", "distsampler.torchrun", "--nnodes=2",
                   f"--node_rank={node_rank}", "--nproc_per_node=2", "--rdzv_backend=c10d",
                   f"--rdzv_endpoint=localhost:{port}", "--redirects", "2", "--tee", "2",
                   "--monitor_interval", "0.1",  # torch 2's default; 1.13's is 5 s
                   "--log_dir", logs, os.path.abspath(__file__), "worker", out_dir]
            agents.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True))
        failed = False
        for agent in agents:
            try:
                output, _ = agent.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                agent.kill()
                output, _ = agent.communicate()
            if agent.returncode != 0:
                failed = True
                print(output[-4000:])
        if failed:
            for log in sorted(glob.glob(os.path.join(out_dir, "logs*", "**", "stderr.log"),
                                        recursive=True)):
                with open(log) as f:
                    print(f"--- {log}\n{f.read()[-3000:]}")
            sys.exit("FAIL: a torchrun agent failed")
        reports = []
        for rank in range(4):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                reports.append(json.load(f))
    problems = []
    for r in reports:
        if not r["ok"]:
            problems.append(f"rank {r['rank']}: indices differ from the per-rank build")
        if r["fallbacks"]:
            problems.append(f"rank {r['rank']}: fell back to a per-rank build")
        if r["local_rank"] == 0 and not 2 * EPOCHS <= r["built"] <= 2 * (EPOCHS + 1):
            problems.append(f"rank {r['rank']} (local 0): built {r['built']} permutations; "
                            f"expected 2 samplers x {EPOCHS} (+1 prefetched)")
        if r["local_rank"] != 0 and (r["built"] != 0 or r["mapped"] < 2 * EPOCHS):
            problems.append(f"rank {r['rank']} (local {r['local_rank']}): built {r['built']}, "
                            f"mapped {r['mapped']}; expected 0 and >= {2 * EPOCHS}")
    if sorted(r["group_rank"] for r in reports) != [0, 0, 1, 1]:
        problems.append(f"group ranks {[r['group_rank'] for r in reports]}: not two nodes of two")
    with tempfile.TemporaryDirectory() as out_dir:
        cmd = [sys.executable, "-m", "distsampler.torchrun", "--nnodes=1",
               "--nproc_per_node=2", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=localhost:{free_port()}", "--redirects", "2", "--tee", "2",
               "--monitor_interval", "0.1",  # torch 2's default; 1.13's is 5 s
               "--log_dir", os.path.join(out_dir, "logs"), os.path.abspath(__file__), "crash",
               out_dir]
        agent = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=120)
        read = sorted(n for n in os.listdir(out_dir) if n.startswith("crash"))
        if agent.returncode == 0 or read != ["crash0", "crash1"]:
            problems.append(f"crash run: exit {agent.returncode}, ranks that read epoch 0 "
                            f"{read}; expected a failure after both read it\n"
                            f"{agent.stdout[-3000:]}")
    # Only names that appeared meanwhile: another job's, there before, never count.
    left = set(glob.glob("/dev/shm/distsampler-*")) - before
    if left:
        problems.append(f"segments left in /dev/shm: {sorted(left)}")
    if problems:
        sys.exit("FAIL:\n" + "\n".join(problems))
    print(f"ok: 2 nodes x 2 local ranks, 2 samplers, {EPOCHS} epochs, one build per node, "
          f"sampler and epoch; nothing left after a rank's exception "
          f"({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "crash":
        crash(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
