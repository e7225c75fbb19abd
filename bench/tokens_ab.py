#!/usr/bin/env python3
"""The token stream's planning rate and the tokens delivered through TokenStream.loader(), this
build (the candidate) against a baseline build (by default of the commit before a change) in the
same run, interleaved; prints a markdown table of the rates and their ratios (candidate /
baseline): the "no slowdown" check of a change to the planner or the stream's runtime.

    .venv/bin/python bench/tokens_ab.py --build build --baseline-build DIR \
        [--data DIR] [--repeats 5] [--seconds 2.5] [--rows plan-100,loader-node-0,...]

It reuses the measurements of bench/tokens_plan.py and bench/tokens_loader.py (their children,
imported, not copied); every figure is the median of --repeats fresh processes per build, run
baseline, candidate, baseline, candidate, ... so that the load of the machine moves both alike.
Both builds' packages are copied first (into --data) and run from the copies, so a rebuild
during the run does not change what is measured.

1. Planning, warm (tokens_plan.run): a fresh process opens the sources and plans N global steps
   of B = 512 sequences of L + 1 = 4097 tokens through `_core.TokenPlan.skip_step` (W = 8,
   rank 0); the rate is global tokens planned per second. The sources: bench/tokens.py's
   make_sources at 10^7 documents over 100 sources (bench/tokens_data.py, lognormal lengths,
   median 300 tokens; the checked fast .idx writer and sparse .bin files), the first 10 and all
   100 of them, their .idx files read whole just before (tokens_plan.warm_cache). 10^7 rather
   than tokens_plan.py's 10^8 documents, so that it runs in minutes on a small machine.
2. Tokens delivered (tokens_loader.run_rate): tokens rank 0 of W = 8 receives per second through
   `TokenStream.loader()`, micro batches of 16, timed over the batches after the first step,
   planner "node" (the plan feed) and "inline", 0 and 2 DataLoader workers, on bench/tokens.py's
   10^6 documents over 100 sources (1.2 GB, read whole into the page cache first).

N (steps, batches) is chosen per row from a first run of each build so that the faster build's
timed run takes about --seconds; both builds run the same N.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import machine  # noqa: E402
from tokens import make_sources  # noqa: E402
import tokens_loader  # noqa: E402
import tokens_plan  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PLAN_DOCUMENTS, LOADER_DOCUMENTS = 10**7, 10**6
PLAN_SOURCES = (10, 100)
LOADER_CASES = (("node", 0), ("node", 2), ("inline", 0), ("inline", 2))
STEP_TOKENS = tokens_plan.GLOBAL_BATCH * (tokens_plan.SEQ_LEN + 1)  # global tokens a step
BATCH_TOKENS = tokens_loader.MICRO * (tokens_loader.SEQ_LEN + 1)  # tokens a micro batch
PER_STEP = tokens_loader.GLOBAL_BATCH // tokens_loader.W // tokens_loader.MICRO  # rank 0's


def snapshot(build, into, name):
    """build/python's distsampler package copied to into/name; returns (its python folder, the
    sha256 of its _core extension)."""
    source = os.path.join(os.path.abspath(build), "python", "distsampler")
    target = os.path.join(into, name, "distsampler")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    digest = hashlib.sha256()
    for entry in sorted(os.listdir(target)):
        if entry.startswith("_core") and entry.endswith(".so"):
            with open(os.path.join(target, entry), "rb") as f:
                digest.update(f.read())
    return os.path.dirname(target), digest.hexdigest()[:12]


def warm_files(listing, extensions):
    """Every source's files read whole (16 MiB reads): in the page cache, as tokens_loader.py
    leaves its sources before its runs."""
    for prefix in json.load(open(listing))["prefixes"]:
        for ext in extensions:
            with open(prefix + ext, "rb") as f:
                while f.read(1 << 24):
                    pass


def interleaved(measure, builds, repeats):
    """measure(build) -> rate, `repeats` times per build, baseline then candidate each round."""
    got = {name: [] for name in builds}
    for _ in range(repeats):
        for name in builds:
            got[name].append(measure(builds[name]))
    return got


def fmt(rate):
    return f"{tokens_plan.fmt_rate(rate)} tokens/s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="the candidate's build folder")
    parser.add_argument("--baseline-build", required=True,
                        help="the baseline's build folder (its python/distsampler built)")
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                        help="the torch 2 venv's interpreter (numpy, torch, megatron-core)")
    parser.add_argument("--data", default=os.path.join("build", "tokens-ab-bench"))
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per build and row")
    parser.add_argument("--seconds", type=float, default=2.5,
                        help="the faster build's timed run, about (sets N per row)")
    parser.add_argument("--rows", help="comma-separated rows to run (plan-10, plan-100, "
                                       "loader-node-0, loader-node-2, loader-inline-0, "
                                       "loader-inline-2); all by default")
    args = parser.parse_args()
    started = time.perf_counter()
    os.environ.pop("PYTHONPATH", None)  # each child gets its build's package, nothing else
    py = args.python
    os.makedirs(args.data, exist_ok=True)
    wanted = set(args.rows.split(",")) if args.rows else None

    def chosen(row):
        return wanted is None or row in wanted

    packages = tempfile.mkdtemp(prefix="packages-", dir=args.data)
    try:
        old, old_sha = snapshot(args.baseline_build, packages, "baseline")
        new, new_sha = snapshot(args.build, packages, "candidate")
        builds = {"baseline": old, "candidate": new}
        header = machine()
        rows = []  # (measurement, N, {build: [rates]})

        plan_listing = os.path.join(args.data, f"documents-{PLAN_DOCUMENTS}", "made.json")
        if any(chosen(f"plan-{s}") for s in PLAN_SOURCES):
            make_sources(py, args.data, PLAN_DOCUMENTS)
        for sources in PLAN_SOURCES:
            if not chosen(f"plan-{sources}"):
                continue
            tokens_plan.warm_cache(plan_listing, sources)
            probe = 200
            fastest = max(tokens_plan.rate(probe, tokens_plan.run(py, b, plan_listing, probe,
                                                                  sources)["seconds"])
                          for b in builds.values())
            steps = max(100, int(math.ceil(args.seconds * fastest / STEP_TOKENS / 100)) * 100)
            got = interleaved(lambda b: tokens_plan.rate(steps, tokens_plan.run(
                py, b, plan_listing, steps, sources)["seconds"]), builds, args.repeats)
            rows.append((f"plan-{sources}: global tokens planned/s, {sources} sources, "
                         f"{steps:,} steps", got))

        loader_listing = os.path.join(args.data, f"documents-{LOADER_DOCUMENTS}", "made.json")
        if any(chosen(f"loader-{p}-{w}") for p, w in LOADER_CASES):
            make_sources(py, args.data, LOADER_DOCUMENTS)
            warm_files(loader_listing, (".idx", ".bin"))
        for planner, workers in LOADER_CASES:
            if not chosen(f"loader-{planner}-{workers}"):
                continue
            probe = 240
            fastest = max(tokens_loader.run_rate(py, b, loader_listing, planner, workers,
                                                 probe)["rate"] for b in builds.values())
            batches = max(probe, int(math.ceil(args.seconds * fastest / BATCH_TOKENS / PER_STEP))
                          * PER_STEP)
            got = interleaved(lambda b: tokens_loader.run_rate(
                py, b, loader_listing, planner, workers, batches)["rate"], builds, args.repeats)
            rows.append((f"loader-{planner}-{workers}: tokens delivered/s to rank 0, planner "
                         f"{planner}, {workers} workers, {batches:,} batches", got))
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(packages, ignore_errors=True)

    print(f"Measured on {time.strftime('%Y-%m-%d %H:%M')} by `bench/tokens_ab.py` "
          f"(`{' '.join([os.path.relpath(py, ROOT), 'bench/tokens_ab.py'] + sys.argv[1:])}`), "
          f"in one run of {elapsed:.0f} s. {header}")
    print()
    print(f"Baseline: {os.path.abspath(args.baseline_build)} (_core {old_sha}); candidate: "
          f"{os.path.abspath(args.build)} (_core {new_sha}); both from copies taken at the "
          f"start, run interleaved (baseline, candidate, ...), each figure the median of "
          f"{args.repeats} fresh processes. Warm page cache throughout. plan-S: "
          f"tokens_plan.py's child, global tokens planned per second through "
          f"_core.TokenPlan.skip_step (B = {tokens_plan.GLOBAL_BATCH}, L + 1 = "
          f"{tokens_plan.SEQ_LEN + 1}, W = {tokens_plan.W}, rank 0) on the first S of 100 "
          f"sources of 10^{round(math.log10(PLAN_DOCUMENTS))} documents (sparse .bin), timed "
          f"from opening the sources to the last step. loader-P-K: tokens_loader.py's "
          f"run_rate, tokens rank 0 receives per second through TokenStream.loader() "
          f"(planner P, K DataLoader workers, micro batches of {tokens_loader.MICRO}), on 100 "
          f"sources of 10^{round(math.log10(LOADER_DOCUMENTS))} documents (1.2 GB), timed over the "
          f"batches after the first step.")
    print()
    print("| measurement | baseline | candidate | candidate / baseline |")
    print("|---|---|---|---|")
    for what, got in rows:
        base, cand = statistics.median(got["baseline"]), statistics.median(got["candidate"])
        print(f"| {what} | {fmt(base)} | {fmt(cand)} | {cand / base:.3f} |")
    print()
    print("Every run (tokens/s, in order):")
    print()
    for what, got in rows:
        print(f"- {what.split(':')[0]}: baseline "
              f"{', '.join(tokens_plan.fmt_rate(r) for r in got['baseline'])}; candidate "
              f"{', '.join(tokens_plan.fmt_rate(r) for r in got['candidate'])}")


if __name__ == "__main__":
    main()
