#!/usr/bin/env python3
"""The scale table of issue 41: the first batch of tokens a rank receives through
TokenStream.loader(), cold and warm, and its memory, at 10^8 documents over 100 and 1,000
sources; prints (or writes) the "Scale: the first batch through the loader" section of
docs/benchmarks.md.

    .venv/bin/python bench/tokens_scale.py --build build [--write docs/benchmarks.md]

Each figure is a fresh process, rank 0 of W = 8 (B = 512 sequences of L + 1 = 4097 tokens,
micro batches of 16, concat packing, planner "node": without a launcher, the rank's own feed
thread), timed from TokenStream(...) (the imports done) to the first batch in hand from
loader(num_workers=0). Cold: every .idx and .bin of the sources dropped from the page cache
first (posix_fadvise(POSIX_FADV_DONTNEED)). Memory after the first batch and after 20 steps:
peak RSS (getrusage), private (RssAnon: anonymous memory, which no other process can share),
mapped file pages (RssFile: the page cache's) and the plan feed's shared memory (its memfd
mapping, which the node's ranks share). The import of torch and distsampler is in every figure's
memory, measured alone as the "imports only" row.

The sources: bench/tokens_plan.py's (--data), 10^8 documents (lognormal lengths, median 300
tokens), .idx in Megatron's layout, sparse .bin files (their tokens are zeros: a cold read of a
.bin costs no disk read here, so the cold figures are the .idx's). 10^10 documents (--large, over
1,000 and 100 sources): a whole .idx would be 200 GB, so bench/tokens_data.py --lengths-only
writes the lengths alone (40 GB) and leaves the pointers a hole but for the pages the loader
reads in its first FILL_STEPS steps, which `fill` writes with Megatron's values after planning
them; each set is made, measured and removed (--keep keeps it) before the next.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import machine  # noqa: E402
from tokens import finish_section  # noqa: E402
import tokens_plan  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQ_LEN, GLOBAL_BATCH, W, MICRO, SEED = 4096, 512, 8, 16, 1
LARGE = 10**10  # documents of the largest rows
PLAN_STEPS = 100  # planned alone (bench/tokens_plan.py's child), after the loader's runs
FILL_STEPS = 48  # the steps whose pointer pages a lengths-only set needs: 20 + 16 ahead, and more
BEGIN = "<!-- bench/tokens_scale.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_scale.py: end -->"
HEADING = "## Scale: the first batch through the loader at 10^8 and 10^10 documents"


def memory():
    """Peak RSS; anonymous memory (RssAnon: no other process can share it, the private memory
    of issue 41); mapped file pages (RssFile: the page cache's, shared with every process that
    maps them); the plan feed's memory file (shared by the node's ranks)."""
    import resource
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":"):
                status[parts[0][:-1]] = parts[1]
    feed = 0
    with open("/proc/self/maps") as f:
        for line in f:
            if "distsampler-plan-feed" in line:
                lo, hi = line.split()[0].split("-")
                feed += int(hi, 16) - int(lo, 16)
    return {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "private_mb": int(status.get("RssAnon", 0)) / 1024,
            "file_mb": int(status.get("RssFile", 0)) / 1024, "feed_mb": feed / 2**20}


def make_stream(listing, sources, **kw):
    from distsampler.tokens import TokenStream
    prefixes = json.load(open(listing))["prefixes"][:sources]
    weights = [0.5 + (i * 37 % 100) / 66.0 for i in range(len(prefixes))]
    return TokenStream(list(zip(prefixes, weights)), seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH,
                       seed=SEED, rank=0, world_size=W, micro_batch=MICRO, **kw)


def fill(listing, sources):
    """The pointer pages of lengths-only sources (tokens_data.py --lengths-only) that the loader
    reads over FILL_STEPS steps (every rank's documents, and the plan's and the token reads'
    look ahead), written with the values Megatron's writer gives (tokens_data.fill_pointers).
    Which documents: planned by the planner itself, which reads lengths only."""
    import numpy as np
    import tokens_data
    core = make_stream(listing, sources, planner="inline")._plan
    wanted = {}
    for _ in range(FILL_STEPS):
        for _, spans in core.plan_step(1, 0):
            for source, document, *_ in spans:
                wanted.setdefault(source, set()).add(document)
    prefixes = json.load(open(listing))["prefixes"][:sources]
    pages = sum(tokens_data.fill_pointers(prefixes[s], np.array(sorted(d), dtype=np.int64))
                for s, d in wanted.items())
    print(json.dumps({"documents": sum(len(d) for d in wanted.values()), "pages": pages}))


def child(listing, sources, imports_only):
    import torch  # noqa: F401  (what a training process has imported)
    if imports_only:
        print(json.dumps({"first": 0.0, "at_first": memory(), "at_20": memory()}))
        return
    start = time.perf_counter()
    stream = make_stream(listing, sources)
    it = iter(stream.loader(num_workers=0))
    next(it)
    first = time.perf_counter() - start
    at_first = memory()
    for _ in range(20 * GLOBAL_BATCH // W // MICRO - 1):
        next(it)
    print(json.dumps({"first": first, "at_first": at_first, "at_20": memory()}))


def run(py, package, listing, sources, imports_only=False, what="child"):
    env = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1")
    out = subprocess.run([py, os.path.abspath(__file__), what, listing, str(sources),
                          "1" if imports_only else "0"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    parser.add_argument("--data", default=os.path.join("build", "tokens-plan-bench"))
    parser.add_argument("--write", help="replace (or append) the section in this file")
    parser.add_argument("--large", type=int, nargs="*", default=[1000, 100],
                        help="source counts of the 10^10-document rows (none: skip them)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the 10^10-document sources (40 GB each) instead of removing "
                             "them; kept ones are used again")
    args = parser.parse_args()
    started = time.perf_counter()
    py, package = args.python, os.path.abspath(os.path.join(args.build, "python"))
    os.makedirs(args.data, exist_ok=True)
    rows, skipped, filled = [], [], {}
    base = run(py, package, "", 0, imports_only=True)

    def measure(documents, sources, listing):
        colds, warms = [], []
        for _ in range(3):
            tokens_plan.drop_cache(listing, sources, (".idx", ".bin"))
            colds.append(run(py, package, listing, sources))
            warms.append(run(py, package, listing, sources))  # right after: warm
        planned = tokens_plan.run(py, package, listing, PLAN_STEPS, sources)["seconds"]
        rows.append((documents, sources, colds, warms, tokens_plan.rate(PLAN_STEPS, planned)))

    for sources in (100, 1000):
        measure("10^8", sources, tokens_plan.make_sources(py, args.data, sources))
    # 10^10 documents: lengths only (4 bytes each: 40 GB), one set at a time, removed after.
    for sources in args.large:
        need = LARGE * 4 + (1 << 30)
        free = shutil.disk_usage(args.data).free
        kept = os.path.join(args.data, f"1e10x{sources}.json")
        if need > free and not (os.path.exists(kept) and os.path.getsize(kept) > 0):
            skipped.append((sources, need, free))
            continue
        out = os.path.join(args.data, f"1e10x{sources}")
        listing = out + ".json"
        try:
            if not (os.path.exists(listing) and os.path.getsize(listing) > 0):  # kept: --keep
                with open(listing + ".tmp", "w") as f:
                    subprocess.run([py, os.path.join(HERE, "tokens_data.py"), "--documents",
                                    str(LARGE), "--sources", str(sources), "--out", out,
                                    "--lengths-only"], stdout=f, check=True,
                                   stderr=subprocess.DEVNULL)
                os.replace(listing + ".tmp", listing)
            filled[sources] = run(py, package, listing, sources, what="fill")
            measure("10^10", sources, listing)
        finally:
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
                for path in (listing, listing + ".tmp"):
                    if os.path.exists(path):
                        os.remove(path)
    elapsed = time.perf_counter() - started

    def med(runs, key, sub=None):
        return statistics.median(r[key] if sub is None else r[key][sub] for r in runs)

    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_scale.py` "
         f"(`{os.path.relpath(py, ROOT)} bench/tokens_scale.py --build {args.build} --write "
         f"docs/benchmarks.md`), in one run of {elapsed:.0f} s. {machine()}")
    emit("")
    emit(f"Rank 0 of W = {W}, B = {GLOBAL_BATCH} sequences of L + 1 = {SEQ_LEN + 1} tokens, "
         f"micro batches of {MICRO}, through `TokenStream.loader(num_workers=0)` with the default "
         "planner (the rank's feed thread, no launcher here), a fresh process each, the median of "
         "3. First batch: from `TokenStream(...)` to the first batch in hand. Cold: the sources' "
         ".idx and .bin files dropped from the page cache first; warm: the run right after. "
         "Sources: bench/tokens_plan.py's 10^8 documents, .idx in Megatron's layout, sparse .bin "
         "files (a cold .bin read costs no disk read here: the cold figures are the .idx's). "
         f"10^10 documents: bench/tokens_data.py --lengths-only, the same lognormal lengths, "
         f"40 GB of them, each .idx sparse but for its lengths and the pointer pages its first "
         f"{FILL_STEPS} steps read (written with Megatron's values after a plan of them; a pointer "
         "left a hole reads 0, which the reader refuses, so a page missed fails the run), made "
         "and removed one set at a time. "
         "Memory: peak RSS, private (anonymous memory, RssAnon: no other process can share it), "
         "mapped file pages (RssFile: the page cache's, shared) and the plan feed's shared memory "
         "(the node's, once), after the first batch and after 20 steps. Planning: "
         f"bench/tokens_plan.py's measure, a fresh process planning the first {PLAN_STEPS} "
         "global steps, right after the loader's runs (at 10^10 documents, the lengths of the "
         "steps past theirs are read cold: 40 GB of them do not fit this page cache); "
         "megatron-core's index build, on the sizes it builds here, is in \"Token streams\" "
         "above.")
    emit("")
    emit("| documents | sources | first batch, cold | first batch, warm | peak RSS | private | "
         "mapped files | plan feed (shared) | after 20 steps: peak RSS | private | mapped files "
         f"| planning {PLAN_STEPS} steps: global tokens/s |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|")
    emit(f"| imports only (torch, distsampler) | | | | {base['at_first']['peak_mb']:.0f} MB | "
         f"{base['at_first']['private_mb']:.0f} MB | {base['at_first']['file_mb']:.0f} MB | | | "
         "| | |")
    for documents, sources, colds, warms, plan_rate in rows:
        both = colds + warms
        emit(f"| {documents} | {sources:,} | {med(colds, 'first'):.3f} s | "
             f"{med(warms, 'first'):.3f} s | "
             f"{max(r['at_first']['peak_mb'] for r in both):.0f} MB | "
             f"{max(r['at_first']['private_mb'] for r in both):.0f} MB | "
             f"{max(r['at_first']['file_mb'] for r in both):.0f} MB | "
             f"{max(r['at_first']['feed_mb'] for r in both):.1f} MB | "
             f"{max(r['at_20']['peak_mb'] for r in both):.0f} MB | "
             f"{max(r['at_20']['private_mb'] for r in both):.0f} MB | "
             f"{max(r['at_20']['file_mb'] for r in both):.0f} MB | "
             f"{tokens_plan.fmt_rate(plan_rate)} |")
    emit("")
    for documents, sources, colds, warms, _ in rows:
        private = max(r["at_20"]["private_mb"] for r in colds + warms)
        more = private - base["at_first"]["private_mb"]
        feed = max(r["at_20"]["feed_mb"] for r in colds + warms)
        emit(f"- {documents} documents, {sources:,} sources: the first batch cold in "
             f"{med(colds, 'first'):.3f} s ({'under' if med(colds, 'first') < 1 else 'over'} 1 s); "
             f"private memory after 20 steps {private:.0f} MB, {more:.0f} MB more than the "
             f"imports' ({'under' if more < 64 else 'over'} 64 MB for the stream); the node's "
             f"shared memory (the plan feed) {feed:.1f} MB.")
    for sources, got in filled.items():
        emit(f"- 10^10 x {sources:,}: {got['documents']:,} documents' pointers written, on "
             f"{got['pages']:,} pages.")
    for sources, need, free in skipped:
        emit(f"- 10^10 documents over {sources:,} sources: not measured here, their lengths need "
             f"{need / 1e9:.0f} GB and this disk has {free / 1e9:.0f} GB free.")
    emit("")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
    elif len(sys.argv) == 5 and sys.argv[1] == "fill":
        fill(sys.argv[2], int(sys.argv[3]))
    else:
        main()
