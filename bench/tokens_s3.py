#!/usr/bin/env python3
"""Token sources in an object store: TokenStream.loader() over s3:// prefixes on a local S3 server
(SeaweedFS's weed mini, tests/dist/s3_server.py) against the same files read locally, and the
loop's wait per step behind 50 ms a request, with and without reading ahead, and the bytes
fetched under a bounded cache of blocks by eviction policy; prints (or writes) the "Sources in an
object store" section of docs/benchmarks.md.

    .venv/bin/python bench/tokens_s3.py --build build [--write docs/benchmarks.md]

The sources: the first SOURCES of bench/tokens.py's 100 sources (10^4 documents each, median 300
tokens, written by megatron-core's builder), uploaded with boto3 to a fresh server on 127.0.0.1;
the local files are in the page cache, the server's on this machine's disk (its own cache warm
after the first pass). Each figure comes from a fresh process (the object-store settings are read
once per process).
1. Tokens rank 0 of W = 8 receives per second through TokenStream.loader() with 0 and 2
   DataLoader workers (B = 512 sequences of L + 1 = 4097 tokens, micro batches of 16), local files
   against s3://, the median of 3, over the steps after the first; in the global shuffle, and
   in a locality order (TokenStream(locality=...): from the store, a block of the order a
   request, kept in the process's cache of blocks).
2. Bytes fetched over one epoch of every source in a locality order under caches of several
   budgets, evicting by next use (from the plan) and least recently used, against the minimum.
3. The loop's wait per step behind a relay that holds each request 50 ms (DelayProxy: a remote
   store's latency), with a model step of 200 ms simulated by sleeping after each step
   (B = 64 sequences of 1,025 tokens, rank 0 of W = 8: one batch of 8 a step), in three modes:
   one request at a time when the step is read (DISTSAMPLER_S3_REQUESTS=1, planner="inline":
   no read-ahead); the step's requests 16 at a time when it is read (planner="inline"); and the
   default, the next step read ahead on a thread while the model step runs, 16 at a time
   (planner="node").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "dist"))
from peers import machine  # noqa: E402
from tokens import make_sources, finish_section  # noqa: E402
from s3_server import DelayProxy, SeaweedS3  # noqa: E402

SOURCES = 10
W, SEED = 8, 1
RATE = dict(seq_len=4096, global_batch=512, micro_batch=16)
LOCALITY = (100, 16)  # blocks of 100 documents (about 60 KB), windows of 16 blocks
WAIT = dict(seq_len=1024, global_batch=64, micro_batch=8)
LATENCY, COMPUTE = 0.05, 0.2
EVICT_SHAPE = dict(seq_len=4096, global_batch=512, micro_batch=16)
BUDGETS_MB = (16, 32, 64, 128)  # a step reads about 160 blocks of about 120 KB: 20 MB
BEGIN = "<!-- bench/tokens_s3.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_s3.py: end -->"
HEADING = ("## Sources in an object store: tokens per second, bytes fetched under a bounded cache, "
           "and the loop's wait behind a slow store")


def child(prefixes_json, shape, planner, workers, steps, compute):
    """Prints {"rate": tokens/s after the first step, "wait": [s in next() per step]}."""
    from distsampler import _core
    from distsampler.tokens import TokenStream
    prefixes = json.loads(prefixes_json)
    shape = json.loads(shape)
    s = TokenStream(list(zip(prefixes, weights(len(prefixes)))), seed=SEED, rank=0, world_size=W,
                    planner=planner, **shape)
    per_step = shape["global_batch"] // W // shape["micro_batch"]
    it = iter(s.loader(num_workers=workers))
    for _ in range(per_step):  # step 0: the loader's start
        next(it)
    if compute:
        time.sleep(compute)
    waits, tokens, start = [], 0, time.perf_counter()
    for _ in range(steps):
        waited = 0.0
        for _ in range(per_step):
            t = time.perf_counter()
            batch = next(it)
            waited += time.perf_counter() - t
            tokens += batch["tokens"].numel()
        waits.append(waited)
        if compute:
            time.sleep(compute)
    seconds = time.perf_counter() - start
    print(json.dumps({"rate": tokens / seconds, "wait": waits,
                      "requests": _core.s3_counts()["requests"]}))


def fetched(prefixes_json, shape, steps):
    """Prints {"bytes": fetched from the store by `steps` steps after the sources opened,
    "blocks": blocks fetched, "digest": of the batches} (0 workers)."""
    import hashlib
    from distsampler import _core
    from distsampler.tokens import TokenStream
    prefixes = json.loads(prefixes_json)
    shape = json.loads(shape)
    s = TokenStream(list(zip(prefixes, weights(len(prefixes)))), seed=SEED, rank=0,
                    world_size=W, **shape)
    opened = _core.s3_counts()
    digest = hashlib.sha256()
    it = iter(s.loader(num_workers=0))
    for _ in range(steps * (shape["global_batch"] // W // shape["micro_batch"])):
        digest.update(next(it)["tokens"].numpy().tobytes())
    counts = _core.s3_counts()
    print(json.dumps({"bytes": counts["bytes"] - opened["bytes"],
                      "blocks": counts["block_fetches"] - opened["block_fetches"],
                      "digest": digest.hexdigest()}))


def epoch_steps(package, prefixes, shape):
    """The steps until rank 0's rows hold a document of every source's second epoch (each
    source read once over), and the bytes of rank 0's own tokens in them (uint16)."""
    sys.path.insert(0, package)
    from distsampler.tokens import TokenStream
    s = TokenStream(list(zip(prefixes, weights(len(prefixes)))), seed=SEED, rank=0,
                    world_size=W, **shape)
    done, steps, own = set(), 0, 0
    while len(done) < len(prefixes):
        steps += 1
        for _, spans in s._plan.plan_step(W, 0):
            for source, _, begin, end, epoch in spans:
                own += 2 * (end - begin)
                if epoch >= 1:
                    done.add(source)
    return steps, own


def weights(n):
    return [0.5 + (i * 37 % 100) / 66.0 for i in range(n)]


def eviction_runs(py, package, local, remote, env):
    """Bytes fetched over one epoch of every source in the locality order, under each cache
    budget and policy, and with an unbounded cache (each block once): a fresh process each."""
    shape = dict(EVICT_SHAPE, locality=[LOCALITY] * SOURCES)
    steps, own = epoch_steps(package, local, shape)
    out = {"steps": steps, "own": own, "runs": {}}
    cases = [("minimum", None, {"DISTSAMPLER_S3_CACHE_MB": "100000"})]
    for mb in BUDGETS_MB:
        cases += [("lru", mb, {"DISTSAMPLER_S3_CACHE_MB": str(mb), "DISTSAMPLER_S3_EVICT": "lru"}),
                  ("next-use", mb, {"DISTSAMPLER_S3_CACHE_MB": str(mb)})]
    for policy, mb, extra in cases:
        out["runs"][policy, mb] = run(py, package, remote, shape, "fetched", 0, steps,
                                      env=dict(env, **extra))
    return out


def run(py, package, prefixes, shape, planner, workers, steps, compute=0.0, env=None):
    environment = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1", **(env or {}))
    out = subprocess.run([py, os.path.abspath(__file__), "child", json.dumps(prefixes),
                          json.dumps(shape), planner, str(workers), str(steps), str(compute)],
                         env=environment, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                        help="the torch 2 venv's interpreter")
    parser.add_argument("--s3-python", default=os.path.join(ROOT, ".venv-s3", "bin", "python"),
                        help=".venv-s3's interpreter (boto3; weed beside it)")
    parser.add_argument("--data", default=os.path.join("build", "tokens-bench"))
    parser.add_argument("--write", help="replace (or append) the section in this file")
    args = parser.parse_args()
    started = time.perf_counter()
    py, package = args.python, os.path.abspath(os.path.join(args.build, "python"))
    s3_python = os.path.abspath(args.s3_python)
    os.makedirs(args.data, exist_ok=True)
    make_sources(py, args.data, 10**6)
    listing = os.path.join(args.data, "documents-1000000", "made.json")
    local = [os.path.abspath(p) for p in json.load(open(listing))["prefixes"][:SOURCES]]
    for prefix in local:  # into the page cache
        for ext in (".idx", ".bin"):
            with open(prefix + ext, "rb") as f:
                while f.read(1 << 24):
                    pass
    remote = [f"s3://corpus/{os.path.basename(p)}" for p in local]
    rates, waits = {}, {}
    with tempfile.TemporaryDirectory() as root:
        server = SeaweedS3(os.path.join(os.path.dirname(s3_python), "weed"),
                           os.path.join(root, "server"))
        with server:
            files = {f"{os.path.basename(p)}{ext}": p + ext for p in local
                     for ext in (".bin", ".idx")}
            server.upload(s3_python, "corpus", files, timeout=600)
            uploaded = sum(os.path.getsize(p) for p in files.values())
            env = dict(server.env(), DISTSAMPLER_S3_CACHE=os.path.join(root, "cache"))
            run(py, package, remote, RATE, "node", 0, 2, env=env)  # the server's cache warm
            steps = 10
            blocked = dict(RATE, locality=[LOCALITY] * SOURCES)
            for workers in (0, 2):
                for where, prefixes, shape in (("local", local, RATE), ("s3", remote, RATE),
                                               ("local, locality", local, blocked),
                                               ("s3, locality", remote, blocked)):
                    got = [run(py, package, prefixes, shape, "node", workers, steps, env=env)
                           for _ in range(3)]
                    rates[where, workers] = statistics.median(g["rate"] for g in got)
            evictions = eviction_runs(py, package, local, remote, env)
            with DelayProxy(server.ports["s3"], LATENCY) as slow:
                slow_env = dict(env, AWS_ENDPOINT_URL=slow.endpoint)
                modes = [("one request at a time", "inline", {"DISTSAMPLER_S3_REQUESTS": "1"}),
                         ("16 at a time", "inline", {}),
                         ("16 at a time, the next step read ahead", "node", {})]
                for label, planner, extra in modes:
                    got = run(py, package, remote, WAIT, planner, 0, 12, COMPUTE,
                              env=dict(slow_env, **extra))
                    w = got["wait"]
                    waits[label] = (statistics.mean(w), sorted(w)[int(0.95 * (len(w) - 1))],
                                    got["requests"])
                local_wait = run(py, package, local, WAIT, "node", 0, 12, COMPUTE)["wait"]
    elapsed = time.perf_counter() - started

    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_s3.py` "
         f"(`{os.path.relpath(py, ROOT)} bench/tokens_s3.py --build {args.build} --write "
         f"docs/benchmarks.md`), in one run of {elapsed:.0f} s. {machine()}")
    emit("")
    emit(f"The sources: the first {SOURCES} of bench/tokens.py's sources (10^4 documents each, "
         f"median 300 tokens; {uploaded / 1e6:.0f} MB of .bin and .idx), uploaded with boto3 to "
         "SeaweedFS (`weed mini`, requirements/s3.txt) on 127.0.0.1, and the same files read "
         "locally (in the page cache). Tokens delivered, not a plan: every token of rank 0's rows "
         "is read, locally from the mapped .bin, from the store one ranged GET per document "
         "span.")
    emit("")
    emit(f"Tokens rank 0 of W = {W} receives per second through `TokenStream.loader()` "
         f"(B = {RATE['global_batch']} sequences of L + 1 = {RATE['seq_len'] + 1} tokens, micro "
         f"batches of {RATE['micro_batch']}; the median of 3 fresh processes, {steps} steps after "
         "the first):")
    emit("")
    emit("| order | DataLoader workers | local files | s3:// (local server) | s3 / local |")
    emit("|---|---|---|---|---|")
    for order, suffix in (("global shuffle", ""), (f"locality {LOCALITY}", ", locality")):
        for workers in (0, 2):
            a, b = rates["local" + suffix, workers], rates["s3" + suffix, workers]
            emit(f"| {order} | {workers} | {a / 1e6:.1f} M | {b / 1e6:.1f} M | {b / a:.2f}x |")
    emit("")
    emit(f"Locality {LOCALITY}: `TokenStream(locality=[{LOCALITY}] * {SOURCES})`, each source's "
         f"documents in blocks of {LOCALITY[0]} shuffled within windows of {LOCALITY[1]} blocks; "
         "from the store a document's read fetches its block whole into the process's cache of "
         "blocks (256 MB), where its neighbours are then found. The global shuffle reads each "
         "document with its own request.")
    emit("")
    emit(f"The loop's wait per step behind a store {LATENCY * 1e3:.0f} ms away (a relay holds each "
         f"request {LATENCY * 1e3:.0f} ms), 0 workers, with a model step of "
         f"{COMPUTE * 1e3:.0f} ms (a sleep) after each step; B = {WAIT['global_batch']} sequences "
         f"of {WAIT['seq_len'] + 1} tokens, rank 0 of W = {W}, 12 steps after the first; mean and "
         "95th percentile, and the requests the process made:")
    emit("")
    emit("| reads | wait: mean | wait: p95 | requests |")
    emit("|---|---|---|---|")
    for label, (mean, p95, requests) in waits.items():
        emit(f"| {label} | {mean * 1e3:.0f} ms | {p95 * 1e3:.0f} ms | {requests} |")
    emit(f"| local files (for scale) | {statistics.mean(local_wait) * 1e3:.1f} ms | "
         f"{sorted(local_wait)[int(0.95 * (len(local_wait) - 1))] * 1e3:.1f} ms | 0 |")
    emit("")
    runs, least = evictions["runs"], evictions["runs"]["minimum", None]
    same = len({r["digest"] for r in runs.values()}) == 1
    emit(f"Bytes fetched from the store over one epoch of every source in the locality order "
         f"{LOCALITY} (rank 0 of W = {W}, 0 workers, B = {EVICT_SHAPE['global_batch']} "
         f"sequences of {EVICT_SHAPE['seq_len'] + 1} tokens: the {evictions['steps']} steps until "
         "rank 0's rows reach every source's second epoch), under a cache of blocks of each "
         "budget, evicting the block whose next use is furthest (the default, from the plan's "
         "coming steps: `DISTSAMPLER_S3_LOOKAHEAD`) or the least recently used "
         "(`DISTSAMPLER_S3_EVICT=lru`); the minimum is each block once (an unbounded cache). "
         "A fresh process each; the batches were " + ("the same in every run" if same else
                                                     "NOT the same in every run") + ":")
    emit("")
    emit("| cache | next use: MB fetched | LRU: MB fetched | next use / minimum | "
         "LRU / minimum | LRU / next use |")
    emit("|---|---|---|---|---|---|")
    for mb in BUDGETS_MB:
        a, b = runs["next-use", mb]["bytes"], runs["lru", mb]["bytes"]
        emit(f"| {mb} MB | {a / 1e6:.0f} | {b / 1e6:.0f} | {a / least['bytes']:.2f}x | "
             f"{b / least['bytes']:.2f}x | {b / a:.2f}x |")
    emit(f"| unbounded (the minimum) | {least['bytes'] / 1e6:.0f} | | 1.00x | 1.00x | |")
    emit("")
    emit(f"The minimum, {least['blocks']} blocks, is every source's .bin once. Rank 0's own "
         f"tokens in those steps are {evictions['own'] / 1e6:.0f} MB: each of the {W} ranks "
         "fetches whole blocks of which it reads about 1/W (the cache is per process; one cache "
         "per node would fetch each block once per node).")
    emit("")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child" and sys.argv[4] == "fetched":
        fetched(sys.argv[2], sys.argv[3], int(sys.argv[6]))
    elif len(sys.argv) > 1 and sys.argv[1] == "child":
        child(*sys.argv[2:5], int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]))
    else:
        main()
