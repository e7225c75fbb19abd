"""Kill-and-resume under torchrun (gloo, CPU), the torchrun twin of mpi_kill_resume.py: SIGKILL a
random rank at a random step, resume from the last checkpoint on another world size, twice, and
check exactly-once across the kills; then ranks that disagree stop before the first batch. One
driver for two programs:

- the sampler alone (examples/torch_checkpoint.py: distsampler.torch's state_dict and its
  configuration agreement): two jobs, the torch order and the Feistel order with drop_last, each
  on three of the world sizes 1 to 4, every index read exactly once (exactly_once.check); then
  four ranks, rank 1 with another seed: every rank reports it and exits non-zero.
- --workers: through distsampler.data.DataLoader with 2 workers, prefetch 2, batch 8
  (examples/torch_checkpoint_workers.py), resumed from rank 0's last checkpoint of the loader on
  world sizes 1, 2, 3 in a random order, checked position by position from every rank's log
  (exactly_once.check_positions): each read at its global position C + r + j * W, compared with
  the epoch's order computed by the same sampler on one replica; the loader's consumed position
  after each batch equal to what the loop received. Then ranks loading mismatched checkpoints (3
  processes): every rank stops, naming the field.

usage: torchrun_kill_resume.py DISTSAMPLER_CLI PYTHON_PACKAGE_DIR [SEED]
       torchrun_kill_resume.py DISTSAMPLER_CLI PYTHON_PACKAGE_DIR [SEED] --workers [--kinds K,...]
                               [--loader distsampler|torchdata]
K: distributed, blended, weighted, bucketed, mismatch (default: all). The random choices come
from SEED (default DEFAULT_SEED, so that every run makes the same choices; printed, and any other
seed may be given). --loader torchdata runs the same jobs through torchdata's StatefulDataLoader
checkpointing our samplers. A process of a run (a DataLoader worker, a rank) still alive
LEFTOVER_GRACE seconds after torchrun exited fails the test, after it is killed.
"""

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exactly_once  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLER_EXAMPLE = os.path.join(ROOT, "examples", "torch_checkpoint.py")
EXAMPLE = os.path.join(ROOT, "examples", "torch_checkpoint_workers.py")
KINDS = ["distributed", "blended", "weighted", "bucketed"]
BATCH, WORKERS, PREFETCH, EPOCHS = 8, 2, 2, 2
DEFAULT_SEED = 20261203
# A DataLoader worker of a rank that torchrun stopped notices its parent's death within
# torch's MP_STATUS_CHECK_INTERVAL (5 s) and exits; one alive after this long has leaked.
LEFTOVER_GRACE = 15


def torchrun(example, nproc, args, package_dir, logs, timeout):
    """Runs `example` (its args hold --checkpoint PATH) on nproc ranks; a CompletedProcess."""
    # localhost:0: the rendezvous takes a free port. --redirects/--tee 2: Debian's torchrun
    # crashes with the default 0 (see examples/run_demos.sh); per-rank stderr goes to `logs`.
    # --monitor_interval 0.1, torch 2's default: Debian's 1.13 checks its workers every 5 s, so
    # each launch outlived its ranks by up to 5 s.
    env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "distsampler.torchrun", "--nnodes=1",
           f"--nproc_per_node={nproc}", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
           "--redirects", "2", "--tee", "2", "--monitor_interval", "0.1", "--log_dir", logs,
           example] + args
    # Its output goes to files, not pipes: a DataLoader worker whose rank is killed while the
    # worker is still starting never exits (PyTorch's worker watchdog reads its parent's pid after
    # the worker's setup, and by then the parent is init), and it keeps its copies of torchrun's
    # stdout and stderr open, so a reader waiting for their end would wait for it. torchrun's own
    # exit is what is awaited; the run's processes still alive LEFTOVER_GRACE seconds later are
    # killed, named, and fail the test.
    r, left = launch(cmd, env, args[args.index("--checkpoint") + 1], timeout)
    assert not left, (f"{len(left)} processes of the run were still alive {LEFTOVER_GRACE} s "
                      "after torchrun exited (leaked DataLoader workers or ranks; killed):\n"
                      + "\n".join(left))
    return r


def launch(cmd, env, marker, timeout, merge_stderr=False):
    """(CompletedProcess, leftovers): torchrun's `cmd` run with its output in files, awaited up to
    `timeout`, then its processes (those whose command line holds `marker`) still alive
    LEFTOVER_GRACE seconds later killed and listed. merge_stderr: stderr into stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out,
                                stderr=subprocess.STDOUT if merge_stderr else err, text=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            left = kill_leftovers(marker, LEFTOVER_GRACE)
            if left:  # printed even when torchrun timed out
                print("      processes left behind after torchrun exited (killed):\n"
                      + "\n".join(f"        {line}" for line in left), flush=True)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read()), left


def run_processes(marker):
    """{pid: 'pid PID ppid PPID: COMMAND LINE'} of the live processes whose command line holds
    `marker` (a run's checkpoint path: its ranks and their forked DataLoader workers)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().decode(errors="replace").rstrip("\0").split("\0")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) != os.getpid() and marker in words and fields[0] != "Z":
            found[int(pid)] = f"pid {pid} ppid {fields[1]}: {' '.join(words)}"
    return found


def kill_leftovers(marker, grace):
    """Waits up to `grace` seconds for the run's processes (run_processes) to exit by
    themselves, then SIGKILLs those still alive; returns their descriptions."""
    deadline = time.monotonic() + grace
    while run_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = []
    for pid, description in run_processes(marker).items():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        left.append(description)
    return left


def rank_stderr(logs):
    """{rank: its stderr} from torchrun's --log_dir: <logs>/<run id>/attempt_0/<rank>/stderr.log."""
    stderr = {}
    for dirpath, _, files in os.walk(logs):
        if "stderr.log" in files:
            with open(os.path.join(dirpath, "stderr.log")) as f:
                stderr[int(os.path.basename(dirpath))] = f.read()
    return stderr


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


# ---- The sampler alone (examples/torch_checkpoint.py) -----------------------------------------


def read_checkpoint(path):
    """(epoch, consumed) of the sampler state in a checkpoint torch.save wrote."""
    import torch
    state = torch.load(path)["sampler"]
    return state["epoch"], state["consumed"]


def sampler_kill_and_resume(cli, package_dir, rng, order, drop_last, work):
    size, seed = rng.randint(100, 400), rng.randint(0, 99)
    worlds = rng.sample([1, 2, 3, 4], 3)  # three runs, each on a new world size

    def launch(world, args):
        with tempfile.TemporaryDirectory() as logs:
            return torchrun(SAMPLER_EXAMPLE, world, args, package_dir, logs, timeout=120)

    exactly_once.kill_and_resume(launch, read_checkpoint, rng, work, worlds, size, seed, order,
                                 drop_last, cli, "Signal 9 (SIGKILL)")


def sampler_mismatch(package_dir, work):
    """Four ranks, rank 1 with another seed: every rank reports it and exits non-zero."""
    args = ["--size", "300", "--seed", "0", "--rank-seed", "1=7", "--log-dir", work,
            "--checkpoint", os.path.join(work, "c.pt")]
    with tempfile.TemporaryDirectory() as logs:
        r = torchrun(SAMPLER_EXAMPLE, 4, args, package_dir, logs, timeout=120)
        assert r.returncode != 0, r.stdout + r.stderr
        stderr = rank_stderr(logs)
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


def run_sampler(cli, package_dir, seed):
    print(f"seed {seed}", flush=True)
    rng = random.Random(seed)
    for order, drop_last in [("torch", False), ("feistel", True)]:
        with tempfile.TemporaryDirectory() as work:
            sampler_kill_and_resume(cli, package_dir, rng, order, drop_last, work)
    with tempfile.TemporaryDirectory() as work:
        sampler_mismatch(package_dir, work)
    print("torchrun kill-and-resume: exactly-once held across the kills; mismatch detected")


# ---- Through DataLoader with workers (examples/torch_checkpoint_workers.py) --------------------


def example():
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    import torch_checkpoint_workers
    return torch_checkpoint_workers


def read_position(path):
    """(epoch, consumed) of the loader state in a checkpoint of the example."""
    import torch
    state = example().sampler_position(torch.load(path)["loader"])
    return state["epoch"], state["consumed"]


def reference(args, cli):
    """reference(epoch) -> (length, item): the epoch's global positions computed by the sampler
    itself with one replica (the stream is the same for every world size), up to 3 positions of
    padding past the end (at most W - 1 with W <= 3)."""
    ex = example()
    dataset, sampler, batched = ex.make_loader_parts(args, 1, 0)
    if args.sampler == "weighted":  # padding reads the draws after num_samples (no wrap)
        wider = ex.parse_args(_argv(args, samples_per_epoch=args.samples_per_epoch + 3))
        _, sampler, _ = ex.make_loader_parts(wider, 1, 0)

    cache = {}

    def at(epoch):
        if epoch not in cache:
            cache[epoch] = compute(epoch)
        return cache[epoch]

    def compute(epoch):
        sampler.set_epoch(epoch)
        items = [tuple(int(i) for i in batch) if batched else int(batch) for batch in sampler]
        if args.sampler == "distributed":  # and the CLI's order, the same function's oracle
            assert items == exactly_once.epoch_order(cli, args.size, args.seed, args.order,
                                                     epoch)[:len(items)], "CLI order differs"
        length = {"distributed": args.size, "blended": args.samples_per_epoch,
                  "weighted": args.samples_per_epoch, "bucketed": len(items)}[args.sampler]
        if args.sampler != "weighted":
            assert len(items) == length
        return length, (lambda p: items[p] if args.sampler == "weighted" else items[p % length])
    return at


def _argv(args, **override):
    values = dict(vars(args), **override)
    argv = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def planned_steps(length, world, epoch, consumed, drop_last, per_batch):
    """Steps a run of `world` ranks started at (epoch, consumed) takes to the end."""
    steps = 0
    for e in range(epoch, EPOCHS):
        left = max(length - (consumed if e == epoch else 0), 0)
        share = left // world if drop_last else -(-left // world)
        steps += share if per_batch else -(-share // BATCH)
    return steps


def kill_and_resume(kind, cli, package_dir, rng, work, loader):
    """One job of three runs on world sizes 1, 2, 3 in a random order; the first two SIGKILL a
    random rank at a random step. Returns a one-line summary."""
    ex = example()
    size = {"distributed": rng.randint(120, 260), "blended": rng.randint(60, 150),
            "weighted": rng.randint(40, 120), "bucketed": rng.randint(150, 300)}[kind]
    per_epoch = rng.randint(120, 240)
    drop_last, persistent = rng.random() < 0.5, rng.random() < 0.5
    order = rng.choice(["torch", "feistel"])
    ckpt = os.path.join(work, "ckpt.pt")
    args = ex.parse_args([
        "--loader", loader, "--sampler", kind, "--size", str(size), "--samples-per-epoch", str(per_epoch),
        "--seed", str(rng.randint(0, 999)), "--order", order, "--batch-size", str(BATCH),
        "--num-workers", str(WORKERS), "--prefetch-factor", str(PREFETCH),
        "--epochs", str(EPOCHS), "--checkpoint-every", str(rng.randint(1, 3)),
        "--checkpoint", ckpt, "--log-dir", work]
        + (["--drop-last"] if drop_last else []) + (["--persistent-workers"] if persistent else []))
    at = reference(args, cli)
    length = at(0)[0]
    per_batch = kind == "bucketed"
    worlds = rng.sample([1, 2, 3], 3)
    print(f"  {kind}: size {size} per_epoch {per_epoch if kind in ('blended', 'weighted') else '-'}"
          f" seed {args.seed} order {order if kind == 'distributed' else '-'} drop_last "
          f"{drop_last} persistent_workers {persistent} checkpoint_every {args.checkpoint_every} "
          f"worlds {worlds}", flush=True)
    kills = 0
    for k, world in enumerate(worlds):
        epoch, consumed = read_position(ckpt) if os.path.exists(ckpt) else (0, 0)
        steps = planned_steps(length, world, epoch, consumed, drop_last, per_batch)
        argv = _argv(args, attempt=str(k))
        where = f"    run {k}: {world} ranks from epoch {epoch} consumed {consumed}, "
        killed = k + 1 < len(worlds)
        if killed:
            assert steps >= 2, f"run {k} has {steps} steps left: too few to kill at one"
            # The first kill in the first half leaves steps for the second, which leaves some
            # for the last run.
            last = max(1, steps // 2 if k == 0 else 2 * steps // 3)
            kill_rank, kill_step = rng.randrange(world), rng.randint(1, last)
            argv += ["--kill-rank", str(kill_rank), "--kill-step", str(kill_step)]
            print(where + f"rank {kill_rank} killed at step {kill_step} of {steps}", flush=True)
        else:
            print(where + f"to the end ({steps} steps)", flush=True)
        with tempfile.TemporaryDirectory() as logs:
            r = torchrun(EXAMPLE, world, argv, package_dir, logs, timeout=150)
        if killed:
            assert r.returncode != 0, f"run {k} was not killed:\n{r.stdout}{r.stderr}"
            assert "Signal 9 (SIGKILL)" in r.stdout + r.stderr, r.stdout + r.stderr
            kills += 1
        else:
            assert r.returncode == 0, f"run {k} failed:\n{r.stdout}{r.stderr}"
    check_args = (work, len(worlds), EPOCHS, at, per_batch, drop_last,
                  None if kind in ("blended", "weighted") else size)
    problems, stats = exactly_once.check_positions(*check_args)
    assert not problems, "\n".join(problems[:40] + [f"... {len(problems)} problems in all"])
    assert_detects_broken_logs(work, len(worlds), check_args)
    ends = ", ".join(f"epoch {e}: {stats[f'epoch{e}'][0]} positions of {stats[f'epoch{e}'][1]}"
                     for e in range(EPOCHS))
    return (f"  {kind}: exactly once over {ends}; {kills} kills, {stats['kept']} batches kept, "
            f"{stats['rolled_back']} read after the last checkpoint and rolled back")


def assert_detects_broken_logs(work, runs, check_args):
    """The check must be able to fail: a batch of the last run (whose reads all count) logged
    twice, one left out, the last one left out, and one index changed are each reported.
    Restores the log afterwards."""
    logs = [os.path.join(work, name) for name in os.listdir(work)
            if name.startswith(f"run{runs - 1}.rank")]
    last = max(logs, key=os.path.getsize)
    with open(last) as f:
        lines = f.readlines()
    assert lines, "the last run read nothing"
    v = len(lines) // 2
    fields = lines[v].split()
    fields[6] = str(int(fields[6]) + 1)
    changed = lines[:v] + [" ".join(fields) + "\n"] + lines[v + 1:]
    try:
        for name, broken in [("repeated", lines[:v + 1] + lines[v:]),
                             ("lost", lines[:v] + lines[v + 1:]), ("lost last", lines[:-1]),
                             ("changed index", changed)]:
            with open(last, "w") as f:
                f.writelines(broken)
            problems, _ = exactly_once.check_positions(*check_args)
            assert problems, f"a broken log ({name} batch) passed the check"
    finally:
        with open(last, "w") as f:
            f.writelines(lines)


def mismatch(package_dir, work):
    """Three ranks, one loading another checkpoint: every rank stops before the first batch with
    CheckpointMismatch naming the field, and exits non-zero. Twice: rank 1 a state of another
    epoch (DistributedSampler), rank 2 one of another position (BucketedBatchSampler)."""
    import torch
    from distsampler.data import DataLoader
    ex = example()
    for kind, odd_rank, (mine, theirs), field in [
            ("distributed", 1, ((0, 3), (1, 3)), "epoch = 0 on ranks 0, 2; 1 on rank 1"),
            ("bucketed", 2, ((0, 3), (0, 5)), "consumed = 3 on ranks 0, 1; 5 on rank 2")]:
        args = ex.parse_args(["--sampler", kind, "--size", "200", "--checkpoint",
                              os.path.join(work, "a.pt"), "--log-dir", work])
        paths = []
        for name, (epoch, batches) in (("a", mine), ("b", theirs)):
            # A checkpoint as the example writes it, made here on one replica: `batches`
            # batches of `epoch` received.
            dataset, sampler, batched = ex.make_loader_parts(args, 1, 0)
            loader = (DataLoader(dataset, batch_sampler=sampler) if batched
                      else DataLoader(dataset, batch_size=BATCH, sampler=sampler))
            sampler.set_epoch(epoch)
            it = iter(loader)
            for _ in range(batches):
                next(it)
            model = ex.make_model()
            path = os.path.join(work, f"{name}.pt")
            ex.save(path, loader, model, torch.optim.SGD(model.parameters(), lr=0.1,
                                                           momentum=0.9))
            paths.append(path)
        with open(paths[0], "rb") as f:
            before = f.read()
        argv = _argv(args, rank_checkpoint=f"{odd_rank}={paths[1]}")
        with tempfile.TemporaryDirectory() as logs:
            r = torchrun(EXAMPLE, 3, argv, package_dir, logs, timeout=150)
            assert r.returncode != 0, r.stdout + r.stderr
            stderr = rank_stderr(logs)
        assert sorted(stderr) == [0, 1, 2], stderr
        for rank in range(3):
            expected = (f"rank {rank}: error: the ranks loaded different checkpoints, refusing "
                        f"to resume: {field}")
            assert expected in stderr[rank], f"rank {rank} did not report it: {stderr[rank]!r}"
        assert every_rank_failed(r.stderr, 3), r.stderr
        assert not [n for n in os.listdir(work) if n.endswith(".log")], "a rank started training"
        with open(paths[0], "rb") as f:
            assert f.read() == before, "the checkpoint was overwritten"
        for name in os.listdir(work):
            os.remove(os.path.join(work, name))
        print(f"  mismatch ({kind}, rank {odd_rank}): every rank stopped: ... {field}",
              flush=True)
    return "  mismatch: every rank of 3 stopped, naming epoch, then consumed"


def run_workers(cli, package_dir, seed, kinds, loader):
    unknown = set(kinds) - set(KINDS + ["mismatch"])
    assert not unknown, f"--kinds: unknown {sorted(unknown)}"
    assert loader == "distsampler" or "mismatch" not in kinds, "mismatch: our loader only"
    sys.path.insert(0, package_dir)
    print(f"seed {seed} kinds {','.join(kinds)} loader {loader}", flush=True)
    rng = random.Random(seed)
    summary = []
    for kind in kinds:
        began = time.time()
        work = tempfile.mkdtemp()
        try:
            if kind == "mismatch":
                summary.append(mismatch(package_dir, work))
            else:
                summary.append(kill_and_resume(kind, cli, package_dir, rng, work, loader))
        except BaseException:
            print(f"  (logs kept in {work})", flush=True)
            raise
        shutil.rmtree(work)
        summary[-1] += f" ({time.time() - began:.0f} s)"
    print(f"torchrun kill-and-resume with DataLoader workers ({loader}):\n"
          + "\n".join(summary))


def main():
    p = argparse.ArgumentParser(description="Kill-and-resume under torchrun, exactly-once checked")
    p.add_argument("cli")
    p.add_argument("package_dir")
    p.add_argument("seed", type=int, nargs="?", default=DEFAULT_SEED,
                   help=f"the random choices' seed (default {DEFAULT_SEED})")
    p.add_argument("--workers", action="store_true",
                   help="through DataLoader with workers (examples/torch_checkpoint_workers.py) "
                        "instead of the sampler alone (examples/torch_checkpoint.py)")
    p.add_argument("--kinds", help="with --workers: the jobs (default: all)")
    p.add_argument("--loader", choices=["distsampler", "torchdata"],
                   help="with --workers, the example's --loader: ours (default), or torchdata's "
                        "StatefulDataLoader")
    args = p.parse_args()
    if not args.workers:
        if args.kinds or args.loader:
            p.error("--kinds and --loader go with --workers")
        run_sampler(args.cli, args.package_dir, args.seed)
        return
    kinds = (args.kinds or ",".join(KINDS + ["mismatch"])).split(",")
    run_workers(args.cli, args.package_dir, args.seed, kinds, args.loader or "distsampler")


if __name__ == "__main__":
    main()
