"""One token planner per node (node/plan_feed.h) under torchrun, and with ranks killed.

Usage: torchrun_plan_feed.py PYTHON_PACKAGE_DIR

1. Two torchrun agents on this host as two nodes of 2 local ranks (W = 4). Every rank reads
   STEPS steps of a TokenStream(planner="node") through TokenStream.loader() with 2 workers and
   checks each batch against the same rank's planner="inline" stream, token for token. The driver
   checks that on each node local rank 0's process planned the steps and served its feed once,
   and that local rank 1's planned nothing and mapped local rank 0's feed. Rank 0 saves the
   state at step STEPS.
2. That checkpoint resumed on another node shape: one agent of 3 local ranks (W = 3), each
   checked against the inline stream resumed from the same checkpoint.
3. Without torchrun (which stops a job when one rank dies), three processes with torchrun's
   variables as one node: local rank 0, the planner, kills itself with SIGKILL inside step 4; the
   other two read on to step 20, the same batches as the inline stream, planning themselves once
   the planner is gone. Then local rank 1 kills itself inside step 4; ranks 0 and 2 finish with
   their steps read from the feed (the planner never waits for a reader). The ranks keep in step
   through files, as a training loop's collectives keep them.
Run as a rank (the "rank" argument), it is one such process.
"""
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

STEPS = 12
SEQ_LEN, BATCH, MICRO = 63, 24, 2


def write_sources(root):
    import random
    from distsampler.indexed import write_indexed
    rng = random.Random(7)
    sources = []
    for s in range(4):
        docs = [[(s * 31 + d * 7 + t) % 50000 for t in range(rng.choice([1, 5, 30, 200]))]
                for d in range(3000 + 500 * s)]
        prefix = os.path.join(root, f"source{s}")
        write_indexed(prefix, docs)
        sources.append((prefix, 1.0 + s))
    return sources


def streams(sources, rank, world, state=None, ahead=16):
    from distsampler.tokens import TokenStream
    made = []
    for planner in ("node", "inline"):
        s = TokenStream(sources, seq_len=SEQ_LEN, global_batch=BATCH, seed=11, rank=rank,
                        world_size=world, micro_batch=MICRO, planner=planner, plan_ahead=ahead)
        if state is not None:
            s.load_state_dict(state)
        made.append(s)
    return made


def same(a, b):
    return all(bool((a[k] == b[k]).all()) if hasattr(a[k], "shape") else a[k] == b[k]
               for k in ("tokens", "labels", "loss_mask", "position_ids", "sequence", "step"))


def rank_main(out_dir, sources_file, mode):
    """One rank: `mode` is "torchrun" (parts 1 and 2) or "kill:LOCAL_RANK" (part 3)."""
    from distsampler import _core
    with open(sources_file) as f:
        config = json.load(f)
    sources = [tuple(s) for s in config["sources"]]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    state = config.get("state")
    victim = int(mode.split(":")[1]) if mode.startswith("kill:") else -1
    # Killing the planner: a ring of 2 steps ahead, so that the others must plan once it is gone;
    # killing a reader: 8, so that only a planner waiting for the dead reader makes them plan.
    fed, inline = streams(sources, rank, world, state, ahead={-1: 16, 0: 2}.get(victim, 8))
    per_step = BATCH // world // MICRO
    report = {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]),
              "group_rank": int(os.environ["GROUP_RANK"]), "ok": True}
    steps = 20 if victim >= 0 else STEPS
    workers = 0 if victim >= 0 else 2
    if victim < 0:  # under torchrun: in step through a collective per step, as training is
        import torch.distributed as dist
        dist.init_process_group("gloo")
    if victim >= 0:  # start together
        with open(os.path.join(out_dir, f"pid{rank}"), "w") as f:
            f.write(str(os.getpid()))
        wait_for(lambda: all(os.path.exists(os.path.join(out_dir, f"pid{r}")) for r in range(world)))
    got, want = fed.loader(num_workers=workers), inline.loader(num_workers=0)
    for i in range(steps * per_step):
        if report["local_rank"] == victim and i == 4 * per_step + 1:
            os.kill(os.getpid(), signal.SIGKILL)  # inside step 4
        if victim < 0 and i % per_step == 0:
            dist.barrier()
        if victim >= 0 and i % per_step == 0:  # in step with the others, as a collective would
            with open(os.path.join(out_dir, f"at{rank}_{i}"), "w"):
                pass
            wait_for(lambda: all(os.path.exists(os.path.join(out_dir, f"at{r}_{i}"))
                                 for r in range(world) if r != victim))
        if victim == 0 and i == 5 * per_step:  # the planner is gone before step 5 is read
            with open(os.path.join(out_dir, "pid0")) as f:
                planner = int(f.read())
            wait_for(lambda: ended(planner))
        a, b = next(got), next(want)
        report["ok"] = report["ok"] and same(a, b)
    report["counts"] = _core.plan_feed_counts()
    if victim >= 0:  # the planner's process lives until every survivor has read its steps
        with open(os.path.join(out_dir, f"done{rank}"), "w"):
            pass
        wait_for(lambda: all(os.path.exists(os.path.join(out_dir, f"done{r}"))
                             for r in range(world) if r != victim))
    report["state"] = fed.state_dict() if victim < 0 else None
    report["inline_state"] = inline.state_dict() if victim < 0 else None
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    if victim < 0:
        from distsampler.launch import destroy_distributed
        dist.barrier()
        destroy_distributed()


def wait_for(condition, seconds=120):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("waited 120 s")
        time.sleep(0.01)


def ended(pid):
    """Whether process `pid` is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or before the read
        return True


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def torchrun(package_dir, out_dir, sources_file, nodes, local):
    env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1")
    port = free_port()
    agents = []
    for node_rank in range(nodes):
        cmd = [sys.executable, "-m", "distsampler.torchrun", f"--nnodes={nodes}",
               f"--node_rank={node_rank}", f"--nproc_per_node={local}", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=localhost:{port}", "--monitor_interval", "0.1",
               "--log_dir", os.path.join(out_dir, f"logs{node_rank}"), "--redirects", "2", "--tee", "2",
               os.path.abspath(__file__), "rank", out_dir, sources_file, "torchrun"]
        agents.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True))
    problems = []
    for agent in agents:
        try:
            output, _ = agent.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            agent.kill()
            output, _ = agent.communicate()
        if agent.returncode != 0:
            problems.append(f"an agent exited {agent.returncode}\n{output[-3000:]}")
    if problems:
        for log in sorted(glob.glob(os.path.join(out_dir, "logs*", "**", "stderr.log"),
                                    recursive=True)):
            with open(log) as f:
                problems.append(f"--- {log}\n{f.read()[-3000:]}")
        sys.exit("FAIL:\n" + "\n".join(problems))
    return [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(nodes * local)]


def check_node(reports, local, problems, label):
    for r in reports:
        c = r["counts"]
        where = f"{label}: rank {r['rank']} (node {r['group_rank']}, local {r['local_rank']})"
        if not r["ok"]:
            problems.append(f"{where}: batches differ from the inline planner's")
        if r["local_rank"] == 0 and (c["planned"] < STEPS or c["served"] != local - 1):
            problems.append(f"{where}: planned {c['planned']}, served {c['served']}; expected "
                            f">= {STEPS} and {local - 1}")
        if r["local_rank"] != 0 and (c["planned"] != 0 or c["attached"] != 1):
            problems.append(f"{where}: planned {c['planned']}, attached {c['attached']}; "
                            "expected 0 and 1")


def killed(package_dir, sources_file, victim, problems):
    with tempfile.TemporaryDirectory() as out_dir:
        job = f"plan-feed-kill-{os.getpid()}-{victim}"
        ranks = []
        for r in range(3):
            env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1", RANK=str(r),
                       WORLD_SIZE="3", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="3", GROUP_RANK="0",
                       TORCHELASTIC_RUN_ID=job, MASTER_ADDR="127.0.0.1", MASTER_PORT="1",
                       TORCHELASTIC_RESTART_COUNT="0")
            ranks.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "rank", out_dir, sources_file,
                 f"kill:{victim}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True))
        for r, p in enumerate(ranks):
            try:
                output, _ = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                p.kill()
                output, _ = p.communicate()
                problems.append(f"kill {victim}: rank {r} did not finish\n{output[-2000:]}")
                continue
            if r == victim and p.returncode != -signal.SIGKILL:
                problems.append(f"kill {victim}: the victim exited {p.returncode}\n{output[-2000:]}")
            if r != victim and p.returncode != 0:
                problems.append(f"kill {victim}: rank {r} exited {p.returncode}\n{output[-2000:]}")
        for r in range(3):
            if r == victim or not os.path.exists(os.path.join(out_dir, f"rank{r}.json")):
                continue
            report = json.load(open(os.path.join(out_dir, f"rank{r}.json")))
            c = report["counts"]
            if not report["ok"]:
                problems.append(f"kill {victim}: rank {r}'s batches differ from the inline planner's")
            if victim == 0 and c["fallback"] == 0:
                problems.append(f"kill 0: rank {r} never planned a step itself ({c})")
            if victim != 0 and c["read"] < 15:
                problems.append(f"kill {victim}: rank {r} read {c['read']} of 20 steps from the "
                                f"feed ({c}); the planner must not wait for the dead reader")


def main(package_dir):
    sys.path.insert(0, package_dir)
    start = time.monotonic()
    problems = []
    with tempfile.TemporaryDirectory() as root:
        sources_file = os.path.join(root, "sources.json")
        with open(sources_file, "w") as f:
            json.dump({"sources": write_sources(root)}, f)
        with tempfile.TemporaryDirectory() as out_dir:
            reports = torchrun(package_dir, out_dir, sources_file, nodes=2, local=2)
        check_node(reports, 2, problems, "2 nodes x 2")
        if sorted(r["group_rank"] for r in reports) != [0, 0, 1, 1]:
            problems.append(f"group ranks {[r['group_rank'] for r in reports]}: not two nodes")
        state = reports[0]["state"]
        if any(r["state"] != state or r["inline_state"] != state for r in reports):
            problems.append("the ranks' states at step STEPS differ")
        with open(sources_file, "w") as f:
            json.dump({"sources": write_sources(root), "state": state}, f)
        with tempfile.TemporaryDirectory() as out_dir:
            reports = torchrun(package_dir, out_dir, sources_file, nodes=1, local=3)
        check_node(reports, 3, problems, "resumed on 1 node x 3")
        with open(sources_file, "w") as f:
            json.dump({"sources": write_sources(root)}, f)
        for victim in (0, 1):
            killed(package_dir, sources_file, victim, problems)
    if problems:
        sys.exit("FAIL:\n" + "\n".join(problems))
    print(f"ok: one planner per node on 2 nodes x 2 ranks with 2 workers each, resumed on "
          f"1 node x 3, and the planner or a reader killed mid-step "
          f"({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "rank":
        rank_main(*sys.argv[2:])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
