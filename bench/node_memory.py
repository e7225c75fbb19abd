#!/usr/bin/python3
"""Memory of one node's local ranks with the torch order: per-rank permutations against one
node-shared permutation (DistributedSampler(node_shared=True), node/node_order.h).

    PYTHONPATH=build/python /usr/bin/python3 bench/node_memory.py [--n N] [--ranks R] [--json]

Starts R processes that look like torchrun's local ranks of one node (LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RUN_ID; no process group: num_replicas and rank are
given). Each reads all of epoch 0 but its last index with the default prefetch=True, waits until
epoch 1's permutation is ready beside it (two permutations alive: the steady state of a training
loop), then reports; the parent then reads every rank's PSS from /proc/PID/smaps_rollup (shared
pages divided among the processes that map them, so the sum counts each page once) and its peak
RSS (VmHWM). One rank alone, per-rank build, is the reference. Prints a markdown table, or the
figures as JSON with --json (bench/compare.py).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

WORKER = r"""
import itertools, os, sys, time
n, rank, ranks, shared = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
from distsampler.torch import DistributedSampler
class Sized:
    def __len__(self):
        return n
sampler = DistributedSampler(Sized(), num_replicas=ranks, rank=rank, seed=0, node_shared=shared)
sampler.set_epoch(0)
iterator = iter(sampler)
for _ in itertools.islice(iterator, len(sampler) - 1):  # epoch 0 read, its view still alive
    pass
deadline = time.monotonic() + 120
while sampler.prefetching.live_orders < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
print("ready", sampler.prefetching.live_orders, flush=True)
sys.stdin.readline()  # the parent measures, then lets it go
"""


def kb(path, field):
    with open(path) as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(match.group(1)) if match else 0


def measure(n, ranks, shared, package_dir):
    """Sum of PSS and of peak RSS (MB) over `ranks` local ranks at the steady state."""
    run_id = f"node-memory-{os.getpid()}-{time.monotonic_ns()}"
    procs = []
    for r in range(ranks):
        env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1", LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(ranks), GROUP_RANK="0", TORCHELASTIC_RUN_ID=run_id)
        procs.append(subprocess.Popen(
            ["/usr/bin/python3", "-c", WORKER, str(n), str(r), str(ranks), "1" if shared else "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env))
    try:
        for p in procs:
            line = p.stdout.readline()
            if not line.startswith("ready 2"):
                raise RuntimeError(f"a rank did not get ready: {line!r} {p.stderr.read()[-2000:]}")
        pss = sum(kb(f"/proc/{p.pid}/smaps_rollup", "Pss") for p in procs) / 1024
        peak = sum(kb(f"/proc/{p.pid}/status", "VmHWM") for p in procs) / 1024
    finally:
        for p in procs:
            try:
                p.stdin.write("\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass
        for p in procs:
            p.wait(timeout=120)
    return {"pss_mb": pss, "peak_rss_mb": peak}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10**8)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    package_dir = os.environ.get("PYTHONPATH", "build/python")
    results = {
        "one rank": measure(args.n, 1, False, package_dir),
        "per-rank": measure(args.n, args.ranks, False, package_dir),
        "node-shared": measure(args.n, args.ranks, True, package_dir),
    }
    results = {"n": args.n, "ranks": args.ranks, **results}
    if args.json:
        print(json.dumps(results))
        return 0
    one = results["one rank"]["pss_mb"]
    print(f"| local ranks, torch order, n = {args.n} | PSS sum | peak RSS sum | vs one rank |")
    print("|---|---|---|---|")
    for key, label in (("one rank", "1 rank"), ("per-rank", f"{args.ranks} ranks, per-rank"),
                       ("node-shared", f"{args.ranks} ranks, `node_shared=True`")):
        r = results[key]
        print(f"| {label} | {r['pss_mb']:.0f} MB | {r['peak_rss_mb']:.0f} MB | "
              f"{r['pss_mb'] / one:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
