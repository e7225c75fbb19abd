#!/usr/bin/env python3
"""How fast a rank plans the global token stream (issue 41), warm and cold, against the planner
before issue 41 (the baseline: built from --baseline, by default the commit before the rewrite),
in one run; prints (or writes) the "Planning the token stream" section of docs/benchmarks.md.

    .venv/bin/python bench/tokens_plan.py --build build [--baseline-build DIR] \
        [--write docs/benchmarks.md]

Every measurement is a fresh process (a rank starting) that opens the sources and plans `steps`
global steps of B = 512 sequences of L + 1 = 4097 tokens through `_core.TokenPlan.skip_step`
(W = 8, rank 0: each rank plans every sequence of a step; the plan does not depend on W), timed
from opening the sources to the last step. The rate is global tokens planned per second: the
rate a rank must keep up with. Warm: the sources' .idx files in the page cache (read whole just
before, and a run). Cold: dropped from it first (posix_fadvise(POSIX_FADV_DONTNEED) on every
.idx). Under a latency: every pread that misses the page cache made to wait
(tests/support/read_latency.cc, LD_PRELOAD; it asks the kernel first with preadv2(RWF_NOWAIT)),
as a parallel file system's round trip would; a page found in the page cache pays nothing, as
there.

The sources: bench/tokens_data.py's (lognormal lengths, median 300 tokens), 10^8 documents over
100 sources and over 1,000 (sparse .bin files: the planner reads lengths only), made in --data
when missing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import machine  # noqa: E402
from tokens import replace_between  # noqa: E402
import tokens_data  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASELINE = "c0688ff"  # main before issue 41's planner: one pread per length, a linear mixer
SEQ_LEN, GLOBAL_BATCH, W, SEED = 4096, 512, 8, 1
DOCUMENTS = 10**8
REPEATS = 5
COLD_STEPS = (100, 1000, 10000)
BEGIN = "<!-- bench/tokens_plan.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_plan.py: end -->"
HEADING = "## Planning the token stream: warm, cold, and behind a slow file system"

# The child: plans and prints {"seconds", "first"} (first: until step 0 was planned).
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from distsampler import _core
prefixes = json.load(open(sys.argv[2]))["prefixes"][:int(sys.argv[4])]
steps = int(sys.argv[3])
weights = [0.5 + (i * 37 % 100) / 66.0 for i in range(len(prefixes))]
start = time.perf_counter()
plan = _core.TokenPlan([[p] for p in prefixes], weights, SEQ_LEN, GLOBAL_BATCH, SEED, "concat", 1024)
plan.skip_step(W, 0)
first = time.perf_counter() - start
for _ in range(steps - 1):
    plan.skip_step(W, 0)
print(json.dumps({"seconds": time.perf_counter() - start, "first": first}))
""".replace("SEQ_LEN", str(SEQ_LEN)).replace("GLOBAL_BATCH", str(GLOBAL_BATCH)).replace(
    "SEED", str(SEED)).replace("W, 0", f"{W}, 0")


def make_sources(python, data, sources):
    out = os.path.join(data, f"1e8x{sources}")
    listing = out + ".json"
    if not os.path.exists(listing):
        with open(listing + ".tmp", "w") as f:
            subprocess.run([python, os.path.join(HERE, "tokens_data.py"), "--documents",
                            str(DOCUMENTS), "--sources", str(sources), "--out", out, "--fast"],
                           stdout=f, check=True, stderr=subprocess.DEVNULL)
        os.replace(listing + ".tmp", listing)
    return listing


def drop_cache(listing, count, extensions=(".idx",)):
    """The first `count` sources' files out of the page cache (posix_fadvise DONTNEED)."""
    for prefix in json.load(open(listing))["prefixes"][:count]:
        for ext in extensions:
            fd = os.open(prefix + ext, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run(python, build_python, listing, steps, sources, cold=False, latency_us=0, shim=None):
    if cold:
        drop_cache(listing, sources)
    env = dict(os.environ)
    if latency_us:
        env["LD_PRELOAD"] = shim
        env["READ_LATENCY_US"] = str(latency_us)
    out = subprocess.run([python, "-c", CHILD, build_python, listing, str(steps), str(sources)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm_cache(listing, count):
    """The first `count` sources' .idx files read whole, in 1 MiB reads: all of their pages in the
    page cache, as a node's earlier run or a copy leaves them (what "warm" means here; pages left
    by a plan's random reads are as present, in smaller pieces that map more slowly)."""
    for prefix in json.load(open(listing))["prefixes"][:count]:
        with open(prefix + ".idx", "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


def raw_read_seconds(listing, count, threads=16):
    """The sources' lengths blocks read cold in 1 MiB reads, `threads` at a time (the planner
    reads up to 16 at once): what the disk gives, the floor of a cold plan that needs most of
    their pages."""
    from concurrent.futures import ThreadPoolExecutor
    drop_cache(listing, count)
    reads = []
    for prefix in json.load(open(listing))["prefixes"][:count]:
        n = tokens_data.idx_sequences(prefix + ".idx")
        reads += [(prefix + ".idx", at, min(1 << 20, 34 + 4 * n - at))
                  for at in range(0, 34 + 4 * n, 1 << 20)]

    def read(job):
        path, at, size = job
        fd = os.open(path, os.O_RDONLY)
        try:
            return len(os.pread(fd, size, at))
        finally:
            os.close(fd)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(read, reads))
    return time.perf_counter() - start, total


def rate(steps, seconds):
    return steps * GLOBAL_BATCH * (SEQ_LEN + 1) / seconds


def fmt_rate(r):
    for unit, scale in (("G", 1e9), ("M", 1e6)):
        if r >= scale:
            return f"{r / scale:.2f} {unit}"
    return f"{r / 1e3:.1f} k"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--baseline-build", help="a build of --baseline (made when not given)")
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                        help="the torch 2 venv's interpreter (numpy, megatron-core)")
    parser.add_argument("--data", default=os.path.join("build", "tokens-plan-bench"))
    parser.add_argument("--write", help="replace (or append) the section in this file")
    args = parser.parse_args()
    started = time.perf_counter()
    shim = os.path.abspath(os.path.join(args.build, "tests", "libread_latency.so"))
    if not os.path.exists(shim):
        sys.exit(f"{shim} is missing: build the tests (make read_latency)")
    new = os.path.abspath(os.path.join(args.build, "python"))
    baseline_build = args.baseline_build
    if baseline_build is None:
        baseline_build = os.path.join(args.data, "baseline")
        if not os.path.exists(os.path.join(baseline_build, "build", "python")):
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "-f", baseline_build,
                            args.baseline], check=True)
            pybind = subprocess.run([args.python, "-m", "pybind11", "--cmakedir"],
                                    capture_output=True, text=True, check=True).stdout.strip()
            subprocess.run(["cmake", "-S", baseline_build, "-B",
                            os.path.join(baseline_build, "build"), "-DCMAKE_BUILD_TYPE=Release",
                            "-DDISTSAMPLER_BUILD_TESTS=OFF", "-DDISTSAMPLER_BUILD_EXAMPLES=OFF",
                            "-DDISTSAMPLER_WITH_LIBTORCH=OFF", "-DDISTSAMPLER_BUILD_MPI=OFF",
                            f"-Dpybind11_DIR={pybind}"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["make", "-C", os.path.join(baseline_build, "build"), "-j2",
                            "distsampler_python"], check=True, stdout=subprocess.DEVNULL)
        baseline_build = os.path.join(baseline_build, "build")
    old = os.path.abspath(os.path.join(baseline_build, "python"))
    os.makedirs(args.data, exist_ok=True)
    sets = {s: make_sources(args.python, args.data, s) for s in (100, 1000)}
    py = args.python

    def median_of(build, listing, steps, sources, **kw):
        return statistics.median(run(py, build, listing, steps, sources, **kw)["seconds"]
                                 for _ in range(REPEATS))

    rows = []  # (what, sources, steps, baseline seconds or None, ours seconds)
    for sources, steps in ((10, 100), (100, 100), (100, 1000), (1000, 100)):
        listing = sets[100 if sources <= 100 else 1000]
        warm_cache(listing, sources)
        run(py, new, listing, steps, sources)  # the imports' files too
        base, ours = [], []
        for _ in range(REPEATS):  # interleaved: the load moves both alike
            base.append(run(py, old, listing, steps, sources)["seconds"])
            ours.append(run(py, new, listing, steps, sources)["seconds"])
        rows.append(("warm", sources, steps, statistics.median(base), statistics.median(ours)))
    cold = []  # (what, steps, seconds, first step)
    listing = sets[100]
    for steps in COLD_STEPS:
        warm_cache(listing, 100)
        warm_first = run(py, new, listing, steps, 100)
        for what, kw in (("cold", {"cold": True}),
                         ("cold, 1 ms a read", {"cold": True, "latency_us": 1000, "shim": shim})):
            got = [run(py, new, listing, steps, 100, **kw) for _ in range(REPEATS)]
            seconds = statistics.median(g["seconds"] for g in got)
            first = statistics.median(g["first"] for g in got)
            cold.append((what, steps, seconds, first, warm_first))
    base_cold = run(py, old, listing, 5, 100, cold=True)
    base_slow = run(py, old, listing, 1, 100, cold=True, latency_us=1000, shim=shim)
    raw_seconds, raw_bytes = raw_read_seconds(listing, 100)
    warm_by = {(s, n): ours for _, s, n, _, ours in rows}
    elapsed = time.perf_counter() - started

    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_plan.py` "
         f"(`{os.path.relpath(py, ROOT)} bench/tokens_plan.py --build {args.build} --write "
         f"docs/benchmarks.md`), in one run of "
         f"{elapsed:.0f} s. {machine()}")
    emit("")
    emit(f"Each figure: a fresh process opens the sources and plans the first N global steps "
         f"(B = {GLOBAL_BATCH} sequences of L + 1 = {SEQ_LEN + 1} tokens, concat packing; W = {W}, "
         f"rank 0, which plans every sequence of a step as every rank does), timed from opening "
         f"to the last step; the rate is global tokens planned per second, the median of "
         f"{REPEATS} runs. Sources: bench/tokens_data.py's, 10^8 documents in all (lognormal "
         f"lengths, median 300 tokens), over 100 sources (10^6 documents each; 10 sources: the "
         f"first 10 of them) and over 1,000 (10^5 each), .idx written in Megatron's layout, "
         f"sparse .bin files. The baseline: the planner before issue 41 (commit "
         f"{args.baseline}: a length read with one pread per document, a mixer that scans every "
         f"source per piece), built from that commit with the same compiler and flags, run "
         f"interleaved with ours in the same run.")
    emit("")
    emit("### Warm: the .idx files in the page cache (read whole just before)")
    emit("")
    emit("| sources | steps | global tokens | baseline | ours | baseline tokens/s | ours tokens/s "
         "| ratio |")
    emit("|---|---|---|---|---|---|---|---|")
    for _, sources, steps, base, ours in rows:
        emit(f"| {sources:,} | {steps:,} | {steps * GLOBAL_BATCH * (SEQ_LEN + 1):,} | "
             f"{base:.3f} s | {ours:.3f} s | {fmt_rate(rate(steps, base))} | "
             f"{fmt_rate(rate(steps, ours))} | {base / ours:.1f}x |")
    emit("")
    emit("### Cold: the .idx pages dropped from the page cache first")
    emit("")
    emit("100 sources. First step: until step 0 was planned (its sequences' lengths read); the "
         "warm one beside it from a run just before, the .idx files read whole first. A cold "
         "plan reads the lengths once (a one-time cost, the disk's floor below), then runs at the "
         "warm rate: the longer the run, the nearer its rate to the warm one.")
    emit("")
    emit("| what | steps | seconds | tokens/s | against warm | first step | warm first step |")
    emit("|---|---|---|---|---|---|---|")
    for what, steps, seconds, first, warm_first in cold:
        warm = warm_first["seconds"]
        emit(f"| {what} | {steps:,} | {seconds:.3f} s | {fmt_rate(rate(steps, seconds))} | "
             f"{seconds / warm:.1f}x the time | {first * 1e3:.0f} ms | "
             f"{warm_first['first'] * 1e3:.0f} ms |")
    emit(f"| baseline, cold | 5 | {base_cold['seconds']:.3f} s | "
         f"{fmt_rate(rate(5, base_cold['seconds']))} | | {base_cold['first'] * 1e3:.0f} ms | |")
    emit(f"| baseline, cold, 1 ms a read | 1 | {base_slow['seconds']:.3f} s | "
         f"{fmt_rate(rate(1, base_slow['seconds']))} | | {base_slow['first'] * 1e3:.0f} ms | |")
    emit("")
    meta = json.load(open(listing))
    mean_length = meta["tokens"] / meta["documents"]
    per_source = meta["documents"] // 100
    pages = -(-4 * per_source // 4096)
    drawn = 100 * GLOBAL_BATCH * (SEQ_LEN + 1) / mean_length / 100  # 100 steps, per source
    touched = 1 - (1 - 1 / pages) ** drawn
    floor = raw_seconds * touched
    warm100 = warm_by[(100, 100)]
    verdict = ("so at 100 steps it cannot be within 2x of the warm plan on this disk"
               if floor > warm100 else "which is less than the warm plan of 100 steps")
    emit(f"The disk's floor: the 100 sources' lengths blocks ({raw_bytes / 1e6:.0f} MB) read "
         f"cold, 1 MiB a read, 16 reads at a time, take {raw_seconds:.3f} s "
         f"({raw_bytes / raw_seconds / 1e6:.0f} MB/s). A plan of 100 steps draws about "
         f"{drawn:,.0f} documents from each source "
         f"(mean length {mean_length:.0f} tokens), whose lengths lie on about {touched:.0%} of "
         f"its {pages:,} pages: a cold plan must read {floor:.3f} s of them at least, {verdict} "
         f"({warm100:.3f} s). The baseline read one length at a time, a random read each.")
    emit("")
    # The global token rates of two of the largest jobs (issue 41): GPUs x achieved FLOP/s /
    # (6 x active parameters).
    jobs = (("an 8B dense model on 16,384 GPUs at 4 x 10^14 FLOP/s", 16384 * 4e14 / (6 * 8e9)),
            ("a mixture of experts with 1B active parameters on 4,096 GPUs at 4 x 10^14 FLOP/s",
             4096 * 4e14 / (6 * 1e9)))
    ours_warm = rate(1000, warm_by[(100, 1000)])
    ours_cold = rate(1000, next(c[2] for c in cold if c[0] == "cold" and c[1] == 1000))
    emit("Against the global token rate of the largest jobs (GPUs x achieved FLOP/s / (6 x active "
         "parameters)), one core planning 100 sources over 1,000 steps:")
    emit("")
    for name, need in jobs:
        emit(f"- {name}: {fmt_rate(need)} tokens/s; ours {ours_warm / need:.1f}x that warm, "
             f"{ours_cold / need:.1f}x cold (the baseline {rate(1000, next(r[3] for r in rows if r[1] == 100 and r[2] == 1000)) / need:.2f}x).")
    emit("")
    emit(END)
    section = "\n".join(lines)
    print(section)
    if args.write:
        replace_between(args.write, section, BEGIN, END, HEADING)


if __name__ == "__main__":
    main()
