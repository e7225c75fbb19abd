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
.bin costs no disk read here, so the cold figures are the .idx's). 10^10 documents would need
the .idx bytes the script computes; it says whether this disk has them.
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
BEGIN = "<!-- bench/tokens_scale.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_scale.py: end -->"
HEADING = "## Scale: the first batch through the loader at 10^8 documents"


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


def child(listing, sources, imports_only):
    import torch  # noqa: F401  (what a training process has imported)
    from distsampler.tokens import TokenStream
    if imports_only:
        print(json.dumps({"first": 0.0, "at_first": memory(), "at_20": memory()}))
        return
    prefixes = json.load(open(listing))["prefixes"][:sources]
    weights = [0.5 + (i * 37 % 100) / 66.0 for i in range(len(prefixes))]
    start = time.perf_counter()
    stream = TokenStream(list(zip(prefixes, weights)), seq_len=SEQ_LEN,
                         global_batch=GLOBAL_BATCH, seed=SEED, rank=0, world_size=W,
                         micro_batch=MICRO)
    it = iter(stream.loader(num_workers=0))
    next(it)
    first = time.perf_counter() - start
    at_first = memory()
    for _ in range(20 * GLOBAL_BATCH // W // MICRO - 1):
        next(it)
    print(json.dumps({"first": first, "at_first": at_first, "at_20": memory()}))


def run(py, package, listing, sources, imports_only=False):
    env = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1")
    out = subprocess.run([py, os.path.abspath(__file__), "child", listing, str(sources),
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
    args = parser.parse_args()
    started = time.perf_counter()
    py, package = args.python, os.path.abspath(os.path.join(args.build, "python"))
    os.makedirs(args.data, exist_ok=True)
    rows = []
    base = run(py, package, "", 0, imports_only=True)
    for sources in (100, 1000):
        listing = tokens_plan.make_sources(py, args.data, sources)
        colds, warms = [], []
        for _ in range(3):
            tokens_plan.drop_cache(listing, sources, (".idx", ".bin"))
            colds.append(run(py, package, listing, sources))
            warms.append(run(py, package, listing, sources))  # right after: warm
        rows.append((sources, colds, warms))
    # 10^10 documents: the .idx alone (4 bytes of length, 8 of pointer, 8 of document index each).
    need = 10**10 * (4 + 8 + 8)
    free = shutil.disk_usage(args.data).free
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
         "Memory: peak RSS, private (anonymous memory, RssAnon: no other process can share it), "
         "mapped file pages (RssFile: the page cache's, shared) and the plan feed's shared memory "
         "(the node's, once), after the first batch and after 20 steps.")
    emit("")
    emit("| documents | sources | first batch, cold | first batch, warm | peak RSS | private | "
         "mapped files | plan feed (shared) | after 20 steps: peak RSS | private | mapped files |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|")
    emit(f"| imports only (torch, distsampler) | | | | {base['at_first']['peak_mb']:.0f} MB | "
         f"{base['at_first']['private_mb']:.0f} MB | {base['at_first']['file_mb']:.0f} MB | | | "
         "| |")
    for sources, colds, warms in rows:
        both = colds + warms
        emit(f"| 10^8 | {sources:,} | {med(colds, 'first'):.3f} s | {med(warms, 'first'):.3f} s | "
             f"{max(r['at_first']['peak_mb'] for r in both):.0f} MB | "
             f"{max(r['at_first']['private_mb'] for r in both):.0f} MB | "
             f"{max(r['at_first']['file_mb'] for r in both):.0f} MB | "
             f"{max(r['at_first']['feed_mb'] for r in both):.1f} MB | "
             f"{max(r['at_20']['peak_mb'] for r in both):.0f} MB | "
             f"{max(r['at_20']['private_mb'] for r in both):.0f} MB | "
             f"{max(r['at_20']['file_mb'] for r in both):.0f} MB |")
    emit("")
    for sources, colds, warms in rows:
        private = max(r["at_20"]["private_mb"] for r in colds + warms)
        more = private - base["at_first"]["private_mb"]
        emit(f"- {sources:,} sources: the first batch cold in {med(colds, 'first'):.3f} s "
             f"({'under' if med(colds, 'first') < 1 else 'over'} 1 s); private memory after 20 "
             f"steps {private:.0f} MB, {more:.0f} MB more than the imports' "
             f"({'under' if more < 64 else 'over'} 64 MB for the stream).")
    emit(f"- 10^10 documents: their .idx alone would be {need / 1e9:.0f} GB; this disk has "
         f"{free / 1e9:.0f} GB free, so that row is {'not ' if need > free else ''}measured here.")
    emit("")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
    else:
        main()
