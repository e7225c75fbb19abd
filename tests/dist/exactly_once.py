"""Checks what real processes consumed across kills and resumes (docs/design.md, "exactly once").

Runs 0, 1, ..., R of one job write <log_dir>/run<k>.rank<r>.log (lines "epoch consumed_after
world_size index", consumed_after = the job's global positions consumed once that step is done)
and <log_dir>/run<k>.start ("epoch consumed world_size": the checkpoint run k resumed from).
A killed run's model rolls back to the checkpoint the next run starts from, so its reads after
that checkpoint never happened; everything else counts. The order of an epoch is read from the
CLI with one rank (`distsampler indices --world-size 1`), which the elastic rule makes the
global order.

The checkpoint file itself is parsed here from the format's description (60 bytes,
little-endian, CRC-32 as zlib computes it), independently of the C++ decoder.
"""

import os
import struct
import subprocess
import zlib


def read_state(path):
    """(epoch, consumed) of a version-1 state file; raises ValueError when it is not one."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != 60 or data[:8] != b"DSSTATE\0":
        raise ValueError(f"{path}: not a 60-byte distsampler state")
    version, length = struct.unpack_from("<HH", data, 8)
    (crc,) = struct.unpack_from("<I", data, 56)
    if (version, length) != (1, 60) or crc != zlib.crc32(data[:56]):
        raise ValueError(f"{path}: bad version or checksum")
    return struct.unpack_from("<QQ", data, 40)


def load_runs(log_dir, runs):
    """Per run: its start (epoch, consumed, world) and its reads [(epoch, consumed, world, index)]."""
    out = []
    for k in range(runs):
        with open(os.path.join(log_dir, f"run{k}.start")) as f:
            epoch, consumed, world = map(int, f.read().split())
        reads = []
        for r in range(world):
            path = os.path.join(log_dir, f"run{k}.rank{r}.log")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) == 4:  # a line cut by the kill is incomplete: not consumed
                        reads.append(tuple(int(x) for x in fields))
        out.append(((epoch, consumed, world), reads))
    return out


def epoch_order(cli, size, seed, order, epoch):
    args = [cli, "indices", "--size", str(size), "--world-size", "1", "--rank", "0",
            "--seed", str(seed), "--order", order, "--epoch", str(epoch)]
    return [int(x) for x in subprocess.run(args, check=True, capture_output=True,
                                           text=True).stdout.split()]


def check(log_dir, runs, cli, size, seed, order, drop_last, epochs):
    """Returns a list of problems (empty when exactly-once holds in every epoch)."""
    loaded = load_runs(log_dir, runs)
    kept = []  # (epoch, run, consumed, world, index)
    for k, (_, reads) in enumerate(loaded):
        limit = loaded[k + 1][0][:2] if k + 1 < len(loaded) else None
        for epoch, consumed, world, index in reads:
            if limit is None or (epoch, consumed) <= limit:
                kept.append((epoch, k, consumed, world, index))
    problems = []
    for e in range(epochs):
        reads = [r for r in kept if r[0] == e]
        o = epoch_order(cli, size, seed, order, e)
        assert sorted(o) == list(range(size)), "the CLI's order is not a permutation"
        count = [0] * size
        for r in reads:
            count[r[4]] += 1
        worlds = [w for (_, w, _), _ in loaded]
        if reads:
            final = max((r[1], r[2]) for r in reads)
            final_world = next(r[3] for r in reads if (r[1], r[2]) == final)
        else:
            final, final_world = None, worlds[-1]
        seen = [0] * size
        for r in sorted(reads, key=lambda r: (r[1], r[2])):
            seen[r[4]] += 1
            if seen[r[4]] > 1 and (drop_last or (r[1], r[2]) != final):
                problems.append(f"epoch {e}: index {r[4]} read again (run {r[1]}, consumed "
                                f"{r[2]}) before the final step")
        unread = [i for i in range(size) if count[i] == 0]
        if drop_last:
            last_world = next((w for (ep, _, w), _ in reversed(loaded) if ep <= e), worlds[-1])
            if unread and len(unread) >= last_world:
                problems.append(f"epoch {e}: {len(unread)} unread, not fewer than {last_world}")
            if sorted(unread) != sorted(o[size - len(unread):]):
                problems.append(f"epoch {e}: the unread indices are not the order's tail")
            continue
        if unread:
            problems.append(f"epoch {e}: {len(unread)} indices never read, e.g. {unread[0]}")
            continue
        padding = len(reads) - size
        if padding and padding >= final_world:
            problems.append(f"epoch {e}: {padding} padding reads, not fewer than {final_world}")
        expected = [1] * size
        for j in range(padding):
            expected[o[j % size]] += 1
        if count != expected:
            problems.append(f"epoch {e}: the padding is not the order's first {padding}")
    return problems


def planned_steps(size, world, batch, epochs, epoch, consumed, drop_last):
    """Steps a run of `world` ranks started at (epoch, consumed) takes if nothing stops it:
    ceil(share / batch) per epoch left."""
    steps = 0
    for e in range(epoch, epochs):
        left = max(size - (consumed if e == epoch else 0), 0)
        share = left // world if drop_last else -(-left // world)
        steps += -(-share // batch)
    return steps


def assert_detects_broken_logs(log_dir, runs, *check_args):
    """The check must be able to fail: replaying one sample of the last run (an overlap) or
    losing one (a gap) is reported. Restores the log afterwards.

    The sample broken is one neither the padding nor the dropped tail can explain (not among its
    epoch order's first or last 64 positions, more than any world size here): the check counts
    reads per index, so a lost read of index o[j], j < the padding, is indistinguishable from
    the padding read of it, and a lost read just before the dropped tail from a longer tail."""
    cli, size, seed, order = check_args[:4]
    last = os.path.join(log_dir, f"run{runs - 1}.rank0.log")
    with open(last) as f:
        lines = f.readlines()
    orders = {}
    victim = None
    for j, line in enumerate(lines):
        fields = line.split()
        if len(fields) != 4:
            continue
        epoch, index = int(fields[0]), int(fields[3])
        if epoch not in orders:
            o = epoch_order(cli, size, seed, order, epoch)
            orders[epoch] = set(o[:64]) | set(o[-64:])
        if index not in orders[epoch]:
            victim = j
            break
    if victim is None:  # the last run read only such samples: nothing here to break
        print("  (broken-log self-test skipped: the last run read only padding/tail positions)")
        return
    try:
        for broken in (lines[:victim + 1] + lines[victim:], lines[:victim] + lines[victim + 1:]):
            with open(last, "w") as f:
                f.writelines(broken)
            assert check(log_dir, runs, *check_args), "a broken log passed the check"
    finally:
        with open(last, "w") as f:
            f.writelines(lines)


def kill_and_resume(launch, read_checkpoint, rng, work, worlds, size, seed, order, drop_last,
                    cli, killed_marker):
    """One job over `worlds` (one run per world size, each resumed from the last checkpoint):
    every run but the last SIGKILLs a random rank at a random step; then checks exactly-once
    across the kills. launch(world, extra_args) runs the job's program and returns a
    CompletedProcess; read_checkpoint(ckpt) gives (epoch, consumed); the program takes
    --size/--seed/--order/--batch/--epochs/--checkpoint/--log-dir/--checkpoint-every/--drop-last,
    --attempt and --kill-rank/--kill-step (mpi_checkpoint.cc, torch_checkpoint.py)."""
    batch, epochs = rng.randint(1, 4), 2
    ckpt = os.path.join(work, "ckpt")
    common = ["--size", str(size), "--seed", str(seed), "--order", order, "--batch", str(batch),
              "--epochs", str(epochs), "--checkpoint", ckpt, "--log-dir", work,
              "--checkpoint-every", str(rng.randint(1, 6))] + (["--drop-last"] if drop_last else [])
    print(f"  size {size} seed {seed} order {order} drop_last {drop_last} batch {batch} "
          f"worlds {worlds}", flush=True)
    runs = 0
    for k, world in enumerate(worlds):
        args = common + ["--attempt", str(k)]
        epoch, consumed = read_checkpoint(ckpt) if os.path.exists(ckpt) else (0, 0)
        steps = planned_steps(size, world, batch, epochs, epoch, consumed, drop_last)
        killed = k + 1 < len(worlds) and steps >= 2
        where = f"  run {k}: {world} ranks from epoch {epoch} consumed {consumed}, "
        if killed:
            kill_rank, kill_step = rng.randrange(world), rng.randint(1, steps - 1)
            args += ["--kill-rank", str(kill_rank), "--kill-step", str(kill_step)]
            print(where + f"rank {kill_rank} killed at step {kill_step} of {steps}", flush=True)
        else:
            print(where + "to the end", flush=True)
        r = launch(world, args)
        runs += 1
        if killed:
            assert r.returncode != 0, f"run {k} was not killed:\n{r.stdout}{r.stderr}"
            assert killed_marker in r.stdout + r.stderr, r.stdout + r.stderr
        else:
            assert r.returncode == 0, f"run {k} failed:\n{r.stdout}{r.stderr}"
            break
    problems = check(work, runs, cli, size, seed, order, drop_last, epochs)
    assert not problems, "\n".join(problems)
    assert_detects_broken_logs(work, runs, cli, size, seed, order, drop_last, epochs)


# ---- Position by position: loaders with workers (examples/torch_checkpoint_workers.py) ----------
#
# Each rank logs one line per batch the training loop received: "epoch start world rank b
# consumed i_1 ... i_k" (the pass's epoch and start position C, the world size W, the rank r, the
# batch's number in the pass, the loader's consumed position after it, the indices). The j-th
# item of rank r's pass is global position C + r + j * W (items: samples, or whole batches for a
# batch sampler), so every read is placed at its position and compared with the epoch's global
# order computed by the sampler itself on one replica, instead of counting reads per index.


def load_batch_runs(log_dir, runs):
    """Per run: its start (epoch, consumed, world) and {rank: [(epoch, start, world, rank, b,
    consumed, (indices...)), ...]} in the order each rank logged them."""
    out = []
    for k in range(runs):
        with open(os.path.join(log_dir, f"run{k}.start")) as f:
            start = tuple(map(int, f.read().split()))
        logs = {}
        for r in range(start[2]):
            path = os.path.join(log_dir, f"run{k}.rank{r}.log")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                lines = f.read().split("\n")
            # A line without its newline was cut by the kill: not received.
            logs[r] = [tuple(int(x) for x in line.split()[:6]) + (
                tuple(int(x) for x in line.split()[6:]),) for line in lines[:-1]]
        out.append((start, logs))
    return out


def check_positions(log_dir, runs, epochs, reference, per_batch, drop_last, size=None):
    """Returns (problems, stats). reference(epoch) -> (length, item) where length is the number of
    global positions of the epoch (samples, stream positions, draws or batches) and item(p) is
    what position p holds for any p < length + W - 1 (p >= length: the padding the sampler reads
    there); per_batch: a position is a whole batch (a batch sampler) rather than one sample.

    Checked: every line's consumed equals C + W * (what the rank received in the pass so far),
    i.e. the loader's checkpoint counts what the loop received; each kept read's index equals the
    order's at its position; per epoch the kept positions are [0, end) exactly once, with end
    what the epoch's last pass (start C, W ranks) reaches: C + W * ceil((length - C) / W), or
    floor with drop_last. A run's first pass counts from the start it recorded, also when it
    read nothing (with drop_last, resuming near the end of an epoch on more ranks can leave no
    full share, and the remainder is dropped). A killed run's reads after the checkpoint the next run resumed from
    are not kept (that run rolled them back). With `size`, the samples at the non-padding
    positions are distinct, and without drop_last they are each of [0, size) once."""
    loaded = load_batch_runs(log_dir, runs)
    problems = []
    stats = {"kept": 0, "rolled_back": 0}
    got = {}     # epoch -> {position: (run, rank, item)}
    passes = {}  # epoch -> {run: (start, world)}
    for k, ((first_epoch, first_start, world), logs) in enumerate(loaded):
        limit = loaded[k + 1][0][:2] if k + 1 < len(loaded) else None
        if first_epoch < epochs:
            passes.setdefault(first_epoch, {})[k] = (first_start, world)
        for r, lines in sorted(logs.items()):
            where = f"run {k} rank {r}"
            current, received, batches = None, 0, 0
            for epoch, start, w, rank, b, consumed, indices in lines:
                if (w, rank) != (world, r):
                    problems.append(f"{where}: a line says world {w} rank {rank}")
                    continue
                if current != (epoch, start):
                    current, received, batches = (epoch, start), 0, 0
                if b != batches:
                    problems.append(f"{where} epoch {epoch}: batch {b} logged as the pass's "
                                    f"batch {batches}: a batch is missing or repeated")
                batches += 1
                received += 1 if per_batch else len(indices)
                if consumed != start + world * received:
                    problems.append(f"{where} epoch {epoch} batch {b}: consumed {consumed} after "
                                    f"receiving {received} from start {start} with {world} ranks; "
                                    f"expected {start + world * received}")
                if limit is not None and (epoch, consumed) > limit:
                    stats["rolled_back"] += 1
                    continue
                stats["kept"] += 1
                passes.setdefault(epoch, {})[k] = (start, world)
                items = [indices] if per_batch else [(i,) for i in indices]
                first = received - len(items)
                for j, item in enumerate(items, first):
                    p = start + r + j * world
                    seen = got.setdefault(epoch, {})
                    if p in seen:
                        problems.append(f"epoch {epoch}: position {p} read again by {where} "
                                        f"(first by run {seen[p][0]} rank {seen[p][1]})")
                        continue
                    seen[p] = (k, r, item if per_batch else item[0])
    for e in range(epochs):
        length, item = reference(e)
        reads = got.get(e, {})
        if not passes.get(e):
            problems.append(f"epoch {e}: never read")
            continue
        last_start, last_world = passes[e][max(passes[e])]
        left = max(length - last_start, 0)
        share = left // last_world if drop_last else -(-left // last_world)
        end = last_start + share * last_world
        missing = [p for p in range(end) if p not in reads]
        extra = sorted(p for p in reads if p >= end)
        if missing:
            problems.append(f"epoch {e}: {len(missing)} of {end} positions never read, e.g. "
                            f"{missing[:5]}")
        if extra:
            problems.append(f"epoch {e}: positions read past the end {end}: {extra[:5]}")
        wrong = [(p, run, rank, value, item(p)) for p, (run, rank, value) in sorted(reads.items())
                 if p < end and value != item(p)]
        for p, run, rank, value, expected in wrong[:5]:
            problems.append(f"epoch {e}: position {p} (run {run} rank {rank}) read {value}, the "
                            f"order has {expected}")
        if len(wrong) > 5:
            problems.append(f"epoch {e}: {len(wrong)} positions read the wrong index in all")
        if size is not None:
            samples = []
            for p in range(min(end, length)):
                if p in reads:
                    value = reads[p][2]
                    samples.extend(value if per_batch else [value])
            if len(set(samples)) != len(samples):
                problems.append(f"epoch {e}: a sample was read twice at non-padding positions")
            elif not drop_last and sorted(samples) != list(range(size)):
                problems.append(f"epoch {e}: the samples read are not each of [0, {size}) once")
        stats[f"epoch{e}"] = (end, length, last_start, last_world)
    return problems, stats
