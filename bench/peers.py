#!/usr/bin/env python3
"""Runs the real peers side by side with ours and PyTorch in one process and prints (or writes)
the "Peers" section of docs/benchmarks.md: Grain's index_shuffle and IndexSampler, MosaicML
Streaming's shuffle algorithms (py1e, py1br, py1s), torchdata's StatefulDataLoader checkpoint,
PyTorch's DistributedSampler and torch.randperm. Run through `bash scripts/bench.sh` (its peers
stage), or directly with the peers' venv (scripts/deps.sh's ensure_peers_venv, .venv-peers):

    PYTHONPATH=build/python .venv-peers/bin/python bench/peers.py [--write docs/benchmarks.md]

--write replaces the file's "## Peers" section (up to the next "## " heading), or appends one.
The peers are installed from the package index into .venv-peers only (requirements/peers.txt);
no test imports them. Every time is the median of a few repeats, measured in this process.
"""
import argparse
import importlib
import importlib.metadata
import logging
import os
import platform
import re
import statistics
import sys
import time
import types
import warnings

import numpy as np

W, RANK, SEED = 8, 0, 1
SIZES = (10**6, 10**7)
REPEATS = 3
RANDOM_CALLS = 20_000  # positions per random-access measurement (one Python call each)
GRAIN_RECORDS = 20_000  # records of the rank's epoch read through Grain's IndexSampler
SHARD = 10**4  # Streaming's samples per shard
BATCH = 256


def median_seconds(fn, repeats=REPEATS):
    """Runs fn() `repeats` times; returns (median seconds, fn's last result)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def fmt_s(seconds):
    if seconds >= 0.01:
        return f"{seconds:.3f} s"
    if seconds >= 1e-5:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_n(n):
    exponent = len(str(n)) - 1
    return f"10^{exponent}" if n == 10**exponent else str(n)


def ratio(base_ns, ns):
    if ns <= 0:
        return "-"
    r = base_ns / ns
    return f"{r:.1f}x faster" if r >= 1 else f"{1 / r:.1f}x slower"


def streaming_shuffle():
    """streaming.base.shuffle without the package's __init__: `import streaming` imports its
    vision datasets, hence torchvision, whose index wheel is a CUDA build that does not load
    beside torch==2.13.0+cpu. The shuffle modules import numpy only."""
    spec = importlib.util.find_spec("streaming")
    if spec is None:
        raise ImportError("mosaicml-streaming is not installed (requirements/peers.txt)")
    root = os.path.dirname(spec.origin)
    for name, path in (("streaming", root), ("streaming.base", os.path.join(root, "base"))):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module
    return importlib.import_module("streaming.base.shuffle")


def machine():
    """The CPU, its count, whether it reports a hypervisor, and the load when the run started:
    the numbers vary with the load."""
    model, flags = "?", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    kind = ("a virtual machine (the CPU reports a hypervisor)" if "hypervisor" in flags
            else "no hypervisor reported")
    load = os.getloadavg()[0]
    return (f"{model}, {os.cpu_count()} CPUs, {kind}, load average {load:.1f} at the start "
            "(other jobs may run at the same time, so single numbers move between runs, the "
            "ratios less)")


class Items:
    """A map-style dataset whose item is its index (the loader's cost, not the data's)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def replace_section(path, heading, section):
    """Replaces the markdown section that starts with the line `heading` (up to the next "## "
    heading) in the file at `path` by `section`, or appends it when there is none."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    match = re.search(r"^" + re.escape(heading) + r"\n.*?(?=^## |\Z)", text, re.M | re.S)
    if match:
        text = text[:match.start()] + section + ("\n" if match.end() < len(text) else "") + \
            text[match.end():]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    with open(path, "w") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", help="replace (or append) the Peers section of this file")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="the n of every table (default 10^6 10^7)")
    args = parser.parse_args()
    sizes_n = args.sizes

    logging.getLogger("absl").setLevel(logging.ERROR)  # Grain's "no jax profiler" notice
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata's
    import torch
    from torch.utils.data import DistributedSampler as TorchSampler
    import grain.python as gp
    from grain.experimental import index_shuffle
    from torchdata.stateful_dataloader import StatefulDataLoader
    from distsampler import _core
    from distsampler.torch import DistributedSampler as Ours
    shuffle = streaming_shuffle()
    torch.set_num_threads(1)

    lines = []

    def emit(text=""):
        print(text, flush=True)
        lines.append(text)

    started = time.time()
    versions = {p: importlib.metadata.version(p) for p in
                ("grain", "mosaicml-streaming", "torchdata", "torch", "numpy")}
    emit("## Peers")
    emit()
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by the peers stage of `bash scripts/bench.sh` "
         "(alone: `PYTHONPATH=build/python .venv-peers/bin/python bench/peers.py`), in one "
         "process, every row of a table in the same run as its baseline (the median of 3 "
         "repeats): " +
         ", ".join(f"{p} {v}" for p, v in versions.items()) +
         f", Python {platform.python_version()} (the venv .venv-peers from "
         "requirements/peers.txt); ours from build/python. "
         f"Seed {SEED}; W = {W}, rank {RANK}. Machine: {machine()}.")
    emit()

    # (a) Random access: one position of a permutation of n, one Python call each.
    emit(f"### Random access: one position of a permutation of n ({RANDOM_CALLS:,} random "
         "positions, one Python call each)")
    emit()
    emit("torch.randperm(n) builds the whole permutation (its time divided by n: what a position "
         "costs when every position is wanted, and the only way torch gets one). Grain: "
         "`grain.experimental.index_shuffle(i, max_index=n-1, seed, rounds=4)` (what "
         "`MapDataset.shuffle` uses; 4 rounds is its setting there). Ours: the extension's "
         "`RankView.fill(i, out)` with a 1-element array (feistel, W = 1), and in bulk "
         "`DistributedSampler(order=\"feistel\", num_replicas=1).indices(0)` (every position, "
         "one call).")
    emit()
    emit("| n | what | ns per index | vs torch.randperm |")
    emit("|---|---|---|---|")
    rng = np.random.default_rng(SEED)
    for n in sizes_n:
        g = torch.Generator()
        g.manual_seed(SEED)
        seconds, _ = median_seconds(lambda: torch.randperm(n, generator=g))
        base = 1e9 * seconds / n
        positions = rng.integers(0, n, RANDOM_CALLS).tolist()

        def grain_calls():
            return [index_shuffle(i, n - 1, SEED, 4) for i in positions]
        grain_s, grain_out = median_seconds(grain_calls)
        if max(grain_out) >= n:
            raise RuntimeError("index_shuffle left [0, n)")
        core = _core.DistributedSampler(n, 1, 0, SEED, True, False, "feistel",
                                        _core.RandpermVariant.current)
        view = core.epoch(0, 0)
        one = np.empty(1, dtype=np.uint64)

        def ours_calls():
            out = []
            for i in positions:
                view.fill(i, one)
                out.append(int(one[0]))
            return out
        ours_s, ours_out = median_seconds(ours_calls)
        bulk = Ours(Items(n), num_replicas=1, rank=0, seed=SEED, order="feistel", prefetch=False)
        bulk_s, bulk_out = median_seconds(lambda: bulk.indices(0))
        if bulk_out[positions].tolist() != ours_out:
            raise RuntimeError("ours: RankView.fill and indices(0) disagree")
        for what, ns in (("torch.randperm(n), whole permutation / n", base),
                         ("Grain `index_shuffle`, one call", 1e9 * grain_s / RANDOM_CALLS),
                         ("ours, feistel, `RankView.fill(i, 1 element)`",
                          1e9 * ours_s / RANDOM_CALLS),
                         ("ours, feistel, `indices(0)` / n", 1e9 * bulk_s / n)):
            emit(f"| {fmt_n(n)} | {what} | {ns:.1f} | "
                 f"{ratio(base, ns) if what != 'torch.randperm(n), whole permutation / n' else '-'} |")
    emit()

    # (b) One rank's epoch.
    emit(f"### One rank's epoch, W = {W}, rank {RANK}")
    emit()
    emit("PyTorch: `DistributedSampler.set_epoch(0)` + `list(iter(sampler))`. Grain: "
         f"`IndexSampler(num_records=n, shard_options=ShardOptions(shard_index={RANK}, "
         f"shard_count={W}), shuffle=True, seed={SEED})` read as Grain's DataLoader reads it "
         f"(indices {RANK}, {RANK} + {W}, ...: `sampler[i].record_key`), timed on the first "
         f"{GRAIN_RECORDS:,} records of the rank's share and scaled to the share (marked ~); "
         "each `sampler[i]` also builds the record's Philox generator (`RecordMetadata.rng`). "
         "Ours: `DistributedSampler(order=...)`, `indices(0)` (one int64 array) and "
         "`set_epoch(0)` + `list(iter())`.")
    emit()
    emit("| n | sampler | rank's epoch | ns per index | vs PyTorch |")
    emit("|---|---|---|---|---|")
    for n in sizes_n:
        share = n // W

        def pytorch():
            s = TorchSampler(Items(n), num_replicas=W, rank=RANK, shuffle=True, seed=SEED)
            s.set_epoch(0)
            return list(iter(s))
        torch_s, torch_out = median_seconds(pytorch)
        base = 1e9 * torch_s / len(torch_out)
        rows = [("PyTorch `DistributedSampler`, list(iter())", torch_s, len(torch_out), "")]
        sampler = gp.IndexSampler(num_records=n, shard_options=gp.ShardOptions(
            shard_index=RANK, shard_count=W), shuffle=True, seed=SEED)
        count = min(GRAIN_RECORDS, share)

        def grain():
            return [sampler[i].record_key for i in range(RANK, count * W, W)]
        grain_s, keys = median_seconds(grain)
        if not all(0 <= k < n for k in keys):
            raise RuntimeError("Grain's IndexSampler returned a record key outside [0, n)")
        rows.append(("Grain `IndexSampler`, sampler[i].record_key", grain_s * share / count,
                     share, "~"))
        for order in ("torch", "feistel"):
            ours = Ours(Items(n), num_replicas=W, rank=RANK, seed=SEED, order=order,
                        prefetch=False)
            s, out = median_seconds(lambda: ours.indices(0))
            if order == "torch" and out.tolist() != torch_out:
                raise RuntimeError("ours, torch order, differs from PyTorch's sampler")
            rows.append((f"ours, {order} order, `indices(0)`", s, len(out), ""))

            def as_list():
                ours.set_epoch(0)
                return list(iter(ours))
            s, out = median_seconds(as_list)
            rows.append((f"ours, {order} order, list(iter())", s, len(out), ""))
        for row, (what, seconds, count_, mark) in enumerate(rows):
            ns = 1e9 * seconds / count_
            emit(f"| {fmt_n(n)} | {what} | {mark}{fmt_s(seconds)} | {mark}{ns:.1f} | "
                 f"{ratio(base, ns) if row else '-'} |")
    emit()

    # (c) Streaming's shuffles on sample counts.
    emit(f"### MosaicML Streaming's shuffles: the epoch's global order of n samples in shards of "
         f"{SHARD:,}")
    emit()
    emit("`streaming.base.shuffle.get_shuffle(algo, shard_sizes, num_canonical_nodes, seed, "
         f"epoch=0, block_size=1 << 18)` with n / {SHARD:,} shards of {SHARD:,} samples and "
         f"num_canonical_nodes = {W}: the order of every sample for all ranks, what a "
         "StreamingDataset computes at each epoch's start on every rank. The same work for "
         "torch: `torch.randperm(n)`; for ours: `indices(0)` with num_replicas = 1 (the global "
         "order; a rank computes only its share, n / W of it, as in the table above).")
    emit()
    emit("| n | algorithm | time | ns per index | vs torch.randperm |")
    emit("|---|---|---|---|---|")
    for n in sizes_n:
        g = torch.Generator()
        g.manual_seed(SEED)
        seconds, _ = median_seconds(lambda: torch.randperm(n, generator=g))
        base = 1e9 * seconds / n
        emit(f"| {fmt_n(n)} | torch.randperm(n) | {fmt_s(seconds)} | {base:.1f} | - |")
        sizes = np.full(n // SHARD, SHARD, dtype=np.int64)
        for algo in ("py1e", "py1br", "py1s"):
            s, order = median_seconds(lambda: shuffle.get_shuffle(algo, sizes, W, SEED, 0))
            if len(order) != n:
                raise RuntimeError(f"Streaming {algo} returned {len(order)} samples, not {n}")
            emit(f"| {fmt_n(n)} | Streaming {algo} | {fmt_s(s)} | {1e9 * s / n:.1f} | "
                 f"{ratio(base, 1e9 * s / n)} |")
        bulk = Ours(Items(n), num_replicas=1, rank=0, seed=SEED, order="feistel", prefetch=False)
        s, _ = median_seconds(lambda: bulk.indices(0))
        emit(f"| {fmt_n(n)} | ours, feistel, `indices(0)`, W = 1 | {fmt_s(s)} | "
             f"{1e9 * s / n:.1f} | {ratio(base, 1e9 * s / n)} |")
    emit()

    # (d) torchdata's StatefulDataLoader: checkpoint and resume cost.
    emit(f"### torchdata's StatefulDataLoader: checkpoint and resume mid-epoch (W = {W}, rank "
         f"{RANK}, batch {BATCH}, num_workers = 0)")
    emit()
    emit("`StatefulDataLoader(dataset, sampler=S, batch_size=256)` over a dataset whose item is "
         "its index, read up to half the rank's epoch; `state_dict()` is timed there, then a "
         "fresh loader's `load_state_dict(state)` + `next(iter(loader))` (the resume, up to the "
         "first batch after the cut, checked equal to the batch the uninterrupted loader read "
         "next). PyTorch's sampler is not `Stateful`: torchdata resumes it by drawing and "
         "dropping the indices already read; ours is, and resumes from its state (epoch and "
         "position).")
    emit()
    emit("| n | sampler | state_dict() | load_state_dict + first batch | vs PyTorch (resume) |")
    emit("|---|---|---|---|---|")
    saves = []
    for n in sizes_n:
        base = None
        for label, make in (
                ("PyTorch `DistributedSampler`",
                 lambda: TorchSampler(Items(n), num_replicas=W, rank=RANK, seed=SEED)),
                ("ours, torch order", lambda: Ours(Items(n), num_replicas=W, rank=RANK,
                                                   seed=SEED, order="torch", prefetch=False)),
                ("ours, feistel", lambda: Ours(Items(n), num_replicas=W, rank=RANK, seed=SEED,
                                               order="feistel", prefetch=False))):
            loader = StatefulDataLoader(Items(n), sampler=make(), batch_size=BATCH)
            iterator = iter(loader)
            for _ in range(len(loader) // 2):
                next(iterator)
            save_s, state = median_seconds(loader.state_dict, repeats=5)
            saves.append(save_s)
            expected = next(iterator)
            del iterator

            def resume():
                fresh = StatefulDataLoader(Items(n), sampler=make(), batch_size=BATCH)
                fresh.load_state_dict(state)
                return next(iter(fresh))
            load_s, first = median_seconds(resume)
            if not torch.equal(first, expected):
                raise RuntimeError(f"{label}: the resumed batch differs at n={n}")
            first_row = base is None
            if first_row:
                base = load_s
            emit(f"| {fmt_n(n)} | {label} | {fmt_s(save_s)} | {fmt_s(load_s)} | "
                 f"{'-' if first_row else ratio(base, load_s)} |")
    emit()
    emit("What differs between the peers, beyond speed:")
    emit()
    emit("- Grain's `IndexSampler` shards first, then shuffles: rank r reads a shuffled "
         "contiguous interval of the record keys (ShardOptions' split of [0, n)), not a share of "
         "one global permutation as PyTorch's and ours; each `sampler[i]` also makes the "
         "record's own `np.random.Generator(Philox)`, most of its time. `index_shuffle` runs "
         "the 4 rounds `MapDataset.shuffle` asks for; `IndexSampler` takes seeds below 2^32.")
    emit("- Streaming's shuffles are shard-aware, not permutations drawn uniformly from all n!: "
         "each canonical node keeps its shards; the shards' order is shuffled and samples move "
         "only within their shard (py1s), within blocks of random size (py1br), or within a "
         "window over neighbouring shards (py1e). They return the order of all ranks at once.")
    emit("- Random access through Python is one call per position on both sides: the call's "
         "overhead dominates; the bulk rows show what a position costs when many are asked at "
         "once (Grain's Python API has no bulk call).")
    emit("- torchdata keeps PyTorch's sampler's position as a count of the samples read and, on "
         "resume, draws and drops that many (`_BatchSamplerIterator.load_state_dict`: the "
         "permutation rebuilt plus one Python `next` per sample read); our samplers are "
         "`Stateful` (epoch, position and a configuration fingerprint): the torch order rebuilds "
         "only the permutation, the feistel order nothing. `state_dict()` costs at most "
         f"{fmt_s(max(saves))} in every row of the table.")
    emit()
    emit(f"Whole peers run: {time.time() - started:.0f} s.")

    if args.write:
        replace_section(args.write, "## Peers", "\n".join(lines) + "\n")
        print(f"wrote the Peers section of {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
