#!/usr/bin/env python3
"""Where a document was seen, at scale (issue 53): `TokenStream.where` with a plan index against
the brute-force scan of the plan, the index's build against planning the run, its size, and
`explain`; prints (or writes) the "Where a document was seen" section of docs/benchmarks.md.

    .venv/bin/python bench/tokens_where.py --build build [--steps N] [--write docs/benchmarks.md]

The sources: bench/tokens_data.py --lengths-only, 10^9 documents over 100 sources (lognormal
lengths, median 300 tokens: 4 GB of lengths, each .idx sparse but for them; the plan reads
lengths only), made once in --data and kept. The run: B = 512 sequences of L + 1 = 4097 tokens,
concat packing, W = 8, weights 1 each, seed 1; the lengths warm in the page cache (a first plan
reads them).

Measured, each in this process through the Python API (all C++ below it):
- planning the run: the plan of steps [0, N) without spans (`index(N, every=N)`: two states),
  and the index build (`index(N, every=K)`), alternated, the median of 3 each, wall and CPU
  time (this process's; the overhead is the CPU time's, which other jobs on the machine move
  less);
- the index's states and bytes (in memory and on disk);
- `explain(step)` at steps N / 4 and N - 1, from step 0 and from the index (its last state
  before the step, and its ledger);
- `where(source, document, index=...)` for documents drawn from those steps' rows (documents
  seen in the run, each query a replay between the index's states), the median and the
  slowest, and `where` without an index, until N (the brute force: a scan of the plan);
- the CLI: `distsampler tokens where --index FILE --doc S:D`, a fresh process each (opening the
  sources, loading the index and checking its fingerprint, the query).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from peers import machine  # noqa: E402
from tokens import finish_section  # noqa: E402

SEQ_LEN, GLOBAL_BATCH, W, SEED = 4096, 512, 8, 1
DOCUMENTS, SOURCES = 10**9, 100
BEGIN = "<!-- bench/tokens_where.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_where.py: end -->"
HEADING = "## Where a document was seen: the plan index at 10^9 documents"


def timed(call):
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--data", default="/work/wb",
                        help="where the 10^9-document sources are made and kept")
    parser.add_argument("--steps", type=int, default=20000, help="N, the steps indexed")
    parser.add_argument("--every", type=int, default=64, help="K, steps between states")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--full", type=int, default=0,
                        help="also index steps [0, FULL) once (10^6: the largest runs) and query "
                             "it (0: not)")
    parser.add_argument("--documents", type=int, default=DOCUMENTS,
                        help="in all (10^9; fewer to try the script)")
    parser.add_argument("--write", help="replace (or append) the section in this file")
    args = parser.parse_args()
    started = time.perf_counter()
    sys.path.insert(0, os.path.abspath(os.path.join(args.build, "python")))
    name = "1e9x100" if args.documents == DOCUMENTS else f"{args.documents}x100"
    listing = os.path.join(args.data, name + ".json")
    if not os.path.exists(listing):
        os.makedirs(args.data, exist_ok=True)
        with open(listing + ".tmp", "w") as f:
            subprocess.run([sys.executable, os.path.join(HERE, "tokens_data.py"), "--documents",
                            str(args.documents), "--sources", str(SOURCES), "--out",
                            os.path.join(args.data, name), "--lengths-only"], stdout=f,
                           check=True)
        os.replace(listing + ".tmp", listing)
    with open(listing) as f:
        data = json.loads(f.read().strip().splitlines()[-1])
    prefixes = data["prefixes"]
    from distsampler.tokens import TokenStream
    stream = TokenStream([(p, 1.0) for p in prefixes], seq_len=SEQ_LEN,
                         global_batch=GLOBAL_BATCH, seed=SEED, world_size=W, rank=0,
                         planner="inline")
    n, k = args.steps, args.every
    tokens = n * GLOBAL_BATCH * (SEQ_LEN + 1)
    stream.index(min(n, 200), every=n)  # the lengths of the first steps read once
    plans, builds = [], []  # (wall, CPU) seconds: CPU time is this process's alone
    for _ in range(3):
        cpu = time.process_time()
        wall = timed(lambda: stream.index(n, every=n))[0]
        plans.append((wall, time.process_time() - cpu))
        cpu = time.process_time()
        wall, built = timed(lambda: stream.index(n, every=k))
        builds.append((wall, time.process_time() - cpu))
    path = os.path.join(args.data, "run.index")
    built.save(path)
    plan_s, build_s = (statistics.median(w for w, _ in plans),
                       statistics.median(w for w, _ in builds))
    plan_cpu, build_cpu = (statistics.median(c for _, c in plans),
                           statistics.median(c for _, c in builds))
    explained = {}
    for step in (n // 4, n - 1):
        explained[step] = timed(lambda: stream.explain(step))
    index = stream._index(path)
    explained_indexed = {}
    for step in (n // 4, n - 1):
        explained_indexed[step] = timed(lambda: stream.explain(step, index=index))
        assert explained_indexed[step][1] == explained[step][1]
    rng = random.Random(53)
    spans = [x for _, e in explained.values() for r in e["rows"] for x in r["spans"]]
    chosen = sorted({(x["source"], x["document"]) for x in rng.sample(spans, args.queries)})
    queries, pieces = [], 0
    for source, document in chosen:
        seconds, seen = timed(lambda: stream.where(source, document, index=index))
        queries.append(seconds)
        pieces += len(seen)
        assert seen, (source, document)  # drawn from the rows: seen in the run
    brute_s, brute = timed(lambda: stream.where(*chosen[0], until=n))
    assert brute == stream.where(*chosen[0], index=index)
    cli = os.path.join(args.build, "bin", "distsampler")
    flags = ["--seq-len", str(SEQ_LEN), "--global-batch", str(GLOBAL_BATCH), "--seed", str(SEED)]
    for p in prefixes:
        flags += ["--source", f"{p}:1"]
    clis = []
    for source, document in chosen[:5]:
        seconds, out = timed(lambda: subprocess.run(
            [cli, "tokens", "where", *flags, "--index", path, "--doc", f"{source}:{document}",
             "--world-size", str(W), "--format", "json"], capture_output=True, text=True,
            check=True))
        got = json.loads(out.stdout)["documents"][0]["sightings"]
        assert got == stream.where(source, document, index=index)
        clis.append(seconds)
    full = None
    if args.full:  # an index of the long run, built once, and the queries on it
        f = args.full
        full_s, full_index = timed(lambda: stream.index(f, every=k))
        full_path = os.path.join(args.data, "full.index")
        full_index.save(full_path)
        full_index = stream._index(full_path)
        late = {step: timed(lambda: stream.explain(step, index=full_index))
                for step in (f // 2, f - 1)}
        spans = [x for _, e in late.values() for r in e["rows"] for x in r["spans"]]
        drawn = sorted({(x["source"], x["document"]) for x in rng.sample(spans, args.queries)})
        times, found, epochs = [], 0, 0
        for source, document in drawn:
            seconds, seen = timed(lambda: stream.where(source, document, index=full_index))
            assert seen
            times.append(seconds)
            found += len(seen)
            epochs = max(epochs, max(x["source_epoch"] for x in seen))
        full = (f, full_s, full_index, late, drawn, times, found, epochs)
    elapsed = time.perf_counter() - started

    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_where.py` "
         f"(`{os.path.relpath(sys.executable, ROOT)} bench/tokens_where.py --build {args.build} "
         f"--steps {n}{f' --full {args.full}' if args.full else ''} --write docs/benchmarks.md`), "
         f"in one run of {elapsed:.0f} s. {machine()}")
    emit("")
    emit(f"A plan, not tokens delivered: {args.documents:,} documents over {SOURCES} sources "
         f"(bench/tokens_data.py --lengths-only: lognormal lengths, median 300 tokens, "
         f"{data['tokens']:,} tokens; the lengths warm in the page cache), B = {GLOBAL_BATCH} "
         f"sequences of L + 1 = {SEQ_LEN + 1} tokens, concat packing, W = {W}, weights 1 each. "
         f"The run indexed: steps 0 to {n - 1} ({tokens:,} tokens), a state every {k} steps. "
         "Planning: the steps' sequences without spans; index build: the same with the states "
         "kept; the median of 3 each, alternated.")
    emit("")
    emit("| measured | value |")
    emit("|---|---|")
    emit(f"| planning steps 0..{n - 1} | {plan_s:.2f} s wall ({tokens / plan_s / 1e9:.2f} G "
         f"tokens/s), {plan_cpu:.2f} s CPU |")
    emit(f"| index build, a state every {k} steps | {build_s:.2f} s wall, {build_cpu:.2f} s CPU "
         f"({(build_cpu / plan_cpu - 1) * 100:+.2f}% CPU over planning) |")
    emit(f"| index size | {built.states:,} states, {built.bytes:,} bytes "
         f"({os.path.getsize(path):,} on disk with its header); "
         f"{built.bytes / built.states / SOURCES:.0f} bytes a source a state |")
    for step, (seconds, _) in explained.items():
        emit(f"| `explain({step})`: from step 0; from the index | {seconds:.2f} s; "
             f"{explained_indexed[step][0] * 1000:.0f} ms (the same answer) |")
    emit(f"| `where` with the index, {len(chosen)} documents seen in the run ({pieces} pieces) "
         f"| median {statistics.median(queries) * 1000:.1f} ms, slowest "
         f"{max(queries) * 1000:.1f} ms |")
    emit(f"| `where` without an index (the scan of steps 0..{n - 1}), one document | "
         f"{brute_s:.2f} s ({brute_s / statistics.median(queries):,.0f}x the indexed median) |")
    emit(f"| `distsampler tokens where --index`, a fresh process, {len(clis)} documents | "
         f"median {statistics.median(clis):.2f} s (sources opened, index loaded and checked, "
         f"query) |")
    emit("")
    scan_run = 10**6 / n * brute_s
    emit(f"- A query replays, per source epoch the document is read in, from the last state "
         f"before its first piece (found by binary search) to the step of its last: under K = "
         f"{k} steps plus the document's own steps. Its cost does not grow with the run's "
         "length but as log(steps / K): at 10^6 steps the same documents replay the same "
         "steps (a source read in more passes has more epochs to replay). The scan grows with "
         "the steps: at this run's rate, "
         f"steps 0 to 10^6 - 1 would take {scan_run:,.0f} s (extrapolated from the scan "
         f"measured above, not measured).")
    if full:
        f, full_s, full_index, late, drawn, times, found, epochs = full
        emit(f"- The long run, steps 0 to {f - 1:,} ({f * GLOBAL_BATCH * (SEQ_LEN + 1):,} "
             f"tokens), indexed once (`--full {f}`): the build took {full_s:,.0f} s "
             f"({f * GLOBAL_BATCH * (SEQ_LEN + 1) / full_s / 1e9:.2f} G tokens/s), "
             f"{full_index.states:,} states, {full_index.bytes:,} bytes. `explain` from it at "
             + ", ".join(f"step {st:,}: {sec * 1000:.0f} ms" for st, (sec, _) in late.items())
             + f". `where` on it, {len(drawn)} documents drawn from those steps' rows ({found} "
             f"pieces, source epochs up to {epochs}): median "
             f"{statistics.median(times) * 1000:.0f} ms, slowest {max(times) * 1000:.0f} ms.")
    emit(f"- The index: O(sources x steps / K), {built.bytes / built.states / SOURCES:.0f} bytes "
         f"a source a state (the checkpoint's position words: each source's cursor and mixer "
         f"target); at 10^6 steps, K = {k}: {10**6 // k + 2:,} states, "
         f"{(10**6 // k + 2) * built.bytes / built.states / 1e6:.0f} MB (computed from the "
         "measured size a state).")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    main()
