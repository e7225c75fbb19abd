"""What the framework tests check: what each rank read in each epoch, against PyTorch.

A framework run records, per (epoch, rank), the dataset indices the training step received, in
order. `check_torch_shares` compares each with `torch.utils.data.DistributedSampler`'s share for
the same seed, epoch and rank (PyTorch's own sampler, imported from the torch under test), and
`check_exactly_once` the epoch's union with PyTorch's padding rule: every index of range(n) read,
ceil(n / W) * W reads in all, so the only repeats are the padding's ceil(n / W) * W - n.
"""
import collections
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

import torch.utils.data


def torch_share(n, world, rank, seed, epoch, shuffle=True, drop_last=False):
    """PyTorch's DistributedSampler share of range(n) for (rank, seed, epoch)."""
    sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=rank,
                                                  shuffle=shuffle, seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def check_exactly_once(n, world, epochs, read, total=None):
    """Problems (strings) with read {(epoch, rank): [index, ...]}: each epoch's union must hold
    every index of range(n), with `total` reads in all (default ceil(n / W) * W: PyTorch's
    padding)."""
    problems = []
    total = math.ceil(n / world) * world if total is None else total
    for epoch in range(epochs):
        reads = [i for rank in range(world) for i in read.get((epoch, rank), [])]
        counts = collections.Counter(reads)
        missing = sorted(set(range(n)) - set(counts))
        foreign = sorted(set(counts) - set(range(n)))
        if missing or foreign or len(reads) != total:
            problems.append(f"epoch {epoch}: {len(reads)} reads (want {total}), missing "
                            f"{missing[:10]}, out of range {foreign[:10]}, repeated "
                            f"{sorted(i for i, c in counts.items() if c > 1)[:10]}")
    return problems


def check_torch_shares(n, world, seed, epochs, read):
    """Problems with read: each (epoch, rank) must be PyTorch's share, in PyTorch's order."""
    problems = []
    for epoch in range(epochs):
        for rank in range(world):
            want = torch_share(n, world, rank, seed, epoch)
            got = read.get((epoch, rank), [])
            if got != want:
                problems.append(f"epoch {epoch} rank {rank}: read {got}, PyTorch's "
                                f"DistributedSampler gives {want}")
    return problems


def load(out, name, world):
    """The records ranks wrote to OUT/NAME_rank{r}.jsonl, one JSON object a line: those with
    "indices" (a step: "epoch", "step", "indices") as {(epoch, rank): [(step, indices)]}, and
    the others, each with its "rank"."""
    steps, others = {}, []
    for rank in range(world):
        with open(os.path.join(out, f"{name}_rank{rank}.jsonl")) as f:
            for line in f:
                entry = dict(json.loads(line), rank=rank)
                if "indices" in entry:
                    steps.setdefault((entry["epoch"], rank), []).append(
                        (entry["step"], entry["indices"]))
                else:
                    others.append(entry)
    return steps, others


def joined(first, second=None, checkpoint_step=None):
    """({(epoch, rank): indices}, problems): run 1's steps before checkpoint_step then run 2's
    (or run 1's alone without a second run); a problem where the steps run 1 read after the
    checkpoint are not the ones run 2 read first."""
    read, problems = {}, []
    for key in sorted(set(first) | set(second or {})):
        if second is None:
            read[key] = [i for _, batch in first[key] for i in batch]
            continue
        before = [batch for step, batch in first.get(key, []) if step < checkpoint_step]
        beyond = [batch for step, batch in first.get(key, []) if step >= checkpoint_step]
        after = [batch for _, batch in second.get(key, [])]
        if beyond != after[:len(beyond)]:
            problems.append(f"epoch {key[0]} rank {key[1]}: run 1 read {beyond} after the "
                            f"checkpoint, run 2 resumed with {after[:len(beyond)]}")
        read[key] = [i for batch in before + after for i in batch]
    return read, problems


def run_session(command, env, timeout=300):
    """Runs one framework run, `command`, in a session of its own: (exit status, output). Past
    `timeout` seconds every process of the session is killed, the framework's other ranks and
    the loaders' workers too (subprocess.run kills the first process only, which left a hung
    rank and its worker behind), and the status is None."""
    process = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        try:  # a process that left the session may hold the output open: wait a bounded time
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            output = ""
        return None, f"(killed after {timeout} s)\n{output}"


def driver_main(label, check, cases=(None,)):
    """A driver's `DRIVER [PYTHON]`: check(PYTHON, OUT[, case]) (problems) for each case, OUT a
    fresh folder; prints each verdict, its time and problems; the exit status."""
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    status = 0
    for case in cases:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="distsampler_framework.") as out:
            problems = check(python, out) if case is None else check(python, out, case)
        name = label if case is None else f"{label} {case}"
        print(f"{name}: {'FAILED' if problems else 'ok'} in {time.monotonic() - start:.1f} s")
        for problem in problems:
            print("  " + problem)
        status |= bool(problems)
    return status
