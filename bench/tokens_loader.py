#!/usr/bin/env python3
"""Tokens delivered through TokenStream.loader() with the plan feed (node/plan_feed.h) against
each process planning for itself (planner="inline", the behaviour before it), in one run; prints
(or writes) the "Tokens through the loader" section of docs/benchmarks.md.

    .venv/bin/python bench/tokens_loader.py --build build [--write docs/benchmarks.md]

Three measurements, each in fresh processes, the sources warm (in the page cache):
1. Tokens a rank receives per second through TokenStream.loader() with 0 to 3 DataLoader workers:
   W = 8, rank 0, B = 512 sequences of L + 1 = 4097 tokens, micro batches of 16 (4 per step),
   timed over the batches after the first.
2. The loop's wait per step: the same loop with a model step simulated by sleeping (a GPU-bound
   step leaves the CPU free); the time spent in next() for a step's batches, per step.
3. One planner per node: 1, 2 and 4 local ranks under torchrun (gloo, one barrier per step as a
   training loop's all-reduce), ranks 0 .. local - 1 of W = 8, each advancing its stream's plan a
   step at a time as its loader does, reading no tokens; each rank's CPU seconds over the loop
   (getrusage: the process and its threads, the feed's planner included) and the steps planned.
   These use the 10^8-document sources of bench/tokens_plan.py (--plan-data), whose plan costs
   more per step.

The sources: bench/tokens.py's 10^6 documents over 100 sources (bench/tokens_data.py: lognormal
lengths, median 300 tokens, written by megatron-core's builder; 1.2 GB, read once before the runs
so that they are in the page cache), made in --data when missing.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import machine  # noqa: E402
from tokens import make_sources, finish_section  # noqa: E402
import tokens_plan  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQ_LEN, GLOBAL_BATCH, W, MICRO, SEED = 4096, 512, 8, 16, 1
SOURCES = 100
BEGIN = "<!-- bench/tokens_loader.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_loader.py: end -->"
HEADING = "## Tokens through the loader: workers, the loop's wait, one planner per node"


def stream(prefixes, rank, world, planner):
    from distsampler.tokens import TokenStream
    weights = [0.5 + (i * 37 % 100) / 66.0 for i in range(len(prefixes))]
    return TokenStream(list(zip(prefixes, weights)), seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH,
                       seed=SEED, rank=rank, world_size=world, micro_batch=MICRO,
                       planner=planner)


def child_rate(listing, planner, workers, batches, compute):
    """Prints {"rate": tokens/s received, "wait": [seconds waited per step]}."""
    prefixes = json.load(open(listing))["prefixes"][:SOURCES]
    s = stream(prefixes, 0, W, planner)
    per_step = GLOBAL_BATCH // W // MICRO
    it = iter(s.loader(num_workers=workers))
    for _ in range(per_step):  # step 0: the loader's start
        next(it)
    waits, tokens, start = [], 0, time.perf_counter()
    for step in range(batches // per_step):
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
    print(json.dumps({"rate": tokens / seconds, "wait": waits}))


def child_node(listing, planner, steps, out):
    """A torchrun rank of W = 8 (the local ranks are ranks 0 .. local - 1): plans `steps` steps
    in step with the others, reading no tokens (TokenStream's plan, as its loader advances it);
    writes its CPU seconds over the loop."""
    import torch.distributed as dist
    from distsampler import _core
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    prefixes = json.load(open(listing))["prefixes"][:SOURCES]
    s = stream(prefixes, rank, W, planner)
    s._start_feed()  # what loader() does first (nothing for "inline")
    plan = s._plan
    dist.barrier()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        plan.skip_step(W, rank)
        dist.barrier()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    counts = _core.plan_feed_counts()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"cpu": cpu, "planned": counts["planned"], "read": counts["read"],
                   "fallback": counts["fallback"]}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_rate(py, package, listing, planner, workers, batches, compute=0.0):
    env = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1")
    out = subprocess.run([py, os.path.abspath(__file__), "rate", listing, planner, str(workers),
                          str(batches), str(compute)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_node(py, package, listing, planner, local, steps):
    env = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as out:
        cmd = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={local}",
               "--monitor_interval", "0.1", os.path.abspath(__file__), "node", listing, planner,
               str(steps), out]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stdout[-2000:] + done.stderr[-3000:])
        return [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(local)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                        help="the torch 2 venv's interpreter")
    parser.add_argument("--data", default=os.path.join("build", "tokens-bench"))
    parser.add_argument("--plan-data", default=os.path.join("build", "tokens-plan-bench"),
                        help="bench/tokens_plan.py's --data: its 10^8 documents over 100 sources")
    parser.add_argument("--write", help="replace (or append) the section in this file")
    args = parser.parse_args()
    started = time.perf_counter()
    py, package = args.python, os.path.abspath(os.path.join(args.build, "python"))
    os.makedirs(args.data, exist_ok=True)
    make_sources(py, args.data, 10**6)
    listing = os.path.join(args.data, "documents-1000000", "made.json")
    for prefix in json.load(open(listing))["prefixes"]:  # into the page cache
        for ext in (".idx", ".bin"):
            with open(prefix + ext, "rb") as f:
                while f.read(1 << 24):
                    pass
    batches = 240

    rates = {}  # (planner, workers) -> median tokens/s of 3 runs
    for workers in (0, 1, 2, 3):
        got = {"inline": [], "node": []}
        for _ in range(3):  # interleaved: the load moves both alike
            for planner in ("inline", "node"):
                got[planner].append(run_rate(py, package, listing, planner, workers,
                                             batches)["rate"])
        for planner in got:
            rates[planner, workers] = statistics.median(got[planner])

    # The loop's wait: a model step of `compute` seconds after each step's batches.
    waits = {}
    compute = 0.05
    for workers in (0, 2):
        for planner in ("inline", "node"):
            w = run_rate(py, package, listing, planner, workers, 160, compute)["wait"]
            waits[planner, workers] = (statistics.mean(w), sorted(w)[int(0.95 * (len(w) - 1))])

    node = {}
    node_steps = 300
    plan_listing = tokens_plan.make_sources(py, args.plan_data, SOURCES)
    run_node(py, package, plan_listing, "inline", 1, node_steps)  # warms the lengths
    for local in (1, 2, 4):
        for planner in ("inline", "node"):
            node[planner, local] = run_node(py, package, plan_listing, planner, local, node_steps)
    elapsed = time.perf_counter() - started

    step_tokens = GLOBAL_BATCH * (SEQ_LEN + 1)
    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_loader.py` "
         f"(`{os.path.relpath(py, ROOT)} bench/tokens_loader.py --build {args.build} --write "
         f"docs/benchmarks.md`), in one run of {elapsed:.0f} s. {machine()}")
    emit("")
    emit(f"The sources: bench/tokens.py's {SOURCES} sources of 10^6 documents in all (median 300 "
         f"tokens, written by megatron-core's builder), in the page cache. A step is "
         f"B = {GLOBAL_BATCH} sequences of L + 1 = {SEQ_LEN + 1} tokens; W = {W}, so rank 0 "
         f"receives {GLOBAL_BATCH // W} sequences a step in micro batches of {MICRO}. "
         "`inline`: every process (the rank and each DataLoader worker) plans the whole global "
         "stream itself, as before the plan feed; `node`: the default, one thread plans ahead "
         "and the processes read the steps' spans from shared memory.")
    emit("")
    emit(f"Tokens rank 0 receives per second through `TokenStream.loader()` (the median of 3 "
         f"fresh processes, {batches} batches after the first step):")
    emit("")
    emit("| DataLoader workers | inline | node (plan feed) | node / inline |")
    emit("|---|---|---|---|")
    for workers in (0, 1, 2, 3):
        a, b = rates["inline", workers], rates["node", workers]
        emit(f"| {workers} | {a / 1e6:.1f} M | {b / 1e6:.1f} M | {b / a:.2f}x |")
    emit("")
    emit(f"The loop's wait per step: the time spent in `next()` for a step's "
         f"{GLOBAL_BATCH // W // MICRO} batches while a model step of {compute * 1e3:.0f} ms "
         "(a sleep: the CPU stays free, as under a GPU step) follows each step; mean and 95th "
         "percentile over 40 steps:")
    emit("")
    emit("| DataLoader workers | inline: mean | inline: p95 | node: mean | node: p95 |")
    emit("|---|---|---|---|---|")
    for workers in (0, 2):
        (am, ap), (bm, bp) = waits["inline", workers], waits["node", workers]
        emit(f"| {workers} | {am * 1e3:.1f} ms | {ap * 1e3:.1f} ms | {bm * 1e3:.1f} ms | "
             f"{bp * 1e3:.1f} ms |")
    emit("")
    emit(f"One planner per node: local ranks 0 .. n - 1 of W = {W} under torchrun "
         f"(`--standalone`, gloo), on bench/tokens_plan.py's 10^8 documents over {SOURCES} sources "
         f"(warm), each advancing its stream's plan {node_steps} steps as its loader does "
         "(reading no tokens: this is the planning alone), with a barrier after each step. CPU "
         "seconds over the loop (getrusage; the feed's planning thread counts in local rank 0's), "
         "and the steps the node planned (feed threads, plus readers' own for steps the feed did "
         "not hold):")
    emit("")
    emit("| local ranks | inline: CPU s, all ranks | inline: steps planned | node: CPU s, local "
         "rank 0 | node: CPU s, the others | node: steps planned | node CPU / inline CPU |")
    emit("|---|---|---|---|---|---|---|")
    for local in (1, 2, 4):
        inline, fed = node["inline", local], node["node", local]
        inline_cpu = sum(r["cpu"] for r in inline)
        others = sum(r["cpu"] for r in fed[1:])
        planned = sum(r["planned"] + r["fallback"] for r in fed)
        fed_cpu = fed[0]["cpu"] + others
        emit(f"| {local} | {inline_cpu:.2f} | {local * node_steps} | {fed[0]['cpu']:.2f} | "
             f"{others:.2f} | {planned} | {fed_cpu / inline_cpu:.2f} |")
    emit("")
    emit(f"A step is {step_tokens / 1e6:.1f} M global tokens to plan, whatever W: inline, every "
         "rank of a node plans each; with the feed, one thread of the node does (a little past "
         f"the loop: {node_steps} steps and the ring's 16 ahead), and the others read each step's "
         "state from shared memory.")
    emit("")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rate":
        child_rate(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                   float(sys.argv[6]))
    elif len(sys.argv) > 1 and sys.argv[1] == "node":
        child_node(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
