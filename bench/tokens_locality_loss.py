#!/usr/bin/env python3
"""What a locality order costs in training: the held-out loss of docs/tokens_run.md's model
(examples/tokens/train_gpt.py) trained on the same sources for the same steps in the global
shuffle and in locality orders for object stores, each source's documents in blocks of BLOCK
shuffled within windows of K blocks; prints (or writes) the "Locality orders: held-out loss"
section of docs/benchmarks.md.

    .venv/bin/python bench/tokens_locality_loss.py --build build [--write docs/benchmarks.md]

The corpus is examples/tokens/prepare_corpus.py's (byte tokens of Python's standard library,
Debian's copyright files and fortunes). Every run: TokenStream(split=SPLIT), so that each
document is in one split whatever the order; STEPS steps on W = 1 under torchrun with 2
DataLoader workers, the same seed, model and batches of 12 sequences of 64 tokens; then the mean
loss over every token of the validation split (one pass). The train loss is the mean of the last
LAST steps' losses. Each order is trained with several seeds: a difference between orders is to
be read against the range across seeds.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from peers import machine  # noqa: E402
from tokens import finish_section  # noqa: E402

STEPS, LAST = 600, 50
SPLIT = "90,10,0"
ORDERS = [("global shuffle", None), ("locality (8, 4)", "8:4"), ("locality (8, 1)", "8:1")]
SEEDS = (0, 1, 2)  # each sets the model's initial weights and the stream's order
BEGIN = "<!-- bench/tokens_locality_loss.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_locality_loss.py: end -->"
HEADING = "## Locality orders: held-out loss"


def train(py, package, corpus, out, locality, seed):
    """Runs train_gpt.py; returns (the mean of its last LAST losses, its held-out loss)."""
    env = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1")
    cmd = [py, "-m", "distsampler.torchrun", "--nproc_per_node=1", "--redirects", "2", "--tee",
           "2", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
           os.path.join(ROOT, "examples", "tokens", "train_gpt.py"),
           "--data", corpus, "--out", out, "--steps", str(STEPS), "--split", SPLIT,
           "--seed", str(seed)] + (["--locality", locality] if locality else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(done.stdout[-3000:] + done.stderr[-3000:])
    with open(os.path.join(out, "loss.csv")) as f:
        losses = [float(line.split(",")[3]) for line in f.read().splitlines()[1:]]
    with open(os.path.join(out, "held_out.json")) as f:
        held = json.load(f)
    return sum(losses[-LAST:]) / LAST, held["loss"], held["tokens"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                        help="the torch 2 venv's interpreter (megatron-core writes the corpus)")
    parser.add_argument("--work", default=os.path.join("build", "locality-loss"))
    parser.add_argument("--write", help="replace (or append) the section in this file")
    args = parser.parse_args()
    started = time.perf_counter()
    py, package = args.python, os.path.abspath(os.path.join(args.build, "python"))
    corpus = os.path.join(args.work, "corpus")
    if not os.path.exists(os.path.join(corpus, "corpus.json")):
        subprocess.run([py, os.path.join(ROOT, "examples", "tokens", "prepare_corpus.py"),
                        corpus], check=True, env=dict(os.environ, PYTHONPATH=package),
                       capture_output=True)
    results = {}  # label: [(train loss, held-out loss, held-out tokens) per seed]
    for label, locality in ORDERS:
        for seed in SEEDS:
            out = os.path.join(args.work, f"{locality or 'global'}-{seed}".replace(":", "x"))
            if os.path.exists(out):
                for name in os.listdir(out):
                    os.remove(os.path.join(out, name))
            results.setdefault(label, []).append(train(py, package, corpus, out, locality,
                                                       seed))
    elapsed = time.perf_counter() - started

    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_locality_loss.py` "
         f"(`{os.path.relpath(py, ROOT)} bench/tokens_locality_loss.py --build {args.build} "
         f"--write docs/benchmarks.md`), in one run of {elapsed:.0f} s. {machine()}")
    emit("")
    tokens = results[ORDERS[0][0]][0][2]
    emit(f"docs/tokens_run.md's model and corpus (`examples/tokens/train_gpt.py`, "
         f"`prepare_corpus.py`), {STEPS} steps of 12 sequences of 64 byte tokens on W = 1, "
         f"`split={SPLIT}`: trained on the train split, then the mean loss over every token of "
         f"the validation split ({tokens} tokens, one pass), for seeds "
         f"{', '.join(map(str, SEEDS))} (each sets the model's first weights and the stream's order). `locality (Q, K)`: every "
         "source's documents in blocks of Q shuffled within windows of K blocks "
         "(`--locality Q:K`, `TokenStream(locality=...)`). Train loss: the mean of the last "
         f"{LAST} steps, averaged over the seeds. Nats per byte token.")
    emit("")
    emit("| order | held-out loss per seed | mean | range | mean minus the global shuffle's "
         "| train loss |")
    emit("|---|---|---|---|---|---|")
    mean = {label: sum(r[1] for r in runs) / len(runs) for label, runs in results.items()}
    reference = mean[ORDERS[0][0]]
    for label, runs in results.items():
        held = [r[1] for r in runs]
        emit(f"| {label} | {', '.join(f'{h:.4f}' for h in held)} | {mean[label]:.4f} | "
             f"{max(held) - min(held):.4f} | {mean[label] - reference:+.4f} | "
             f"{sum(r[0] for r in runs) / len(runs):.4f} |")
    emit("")
    held = results[ORDERS[0][0]]
    spread = max(r[1] for r in held) - min(r[1] for r in held)
    gaps = [mean[label] - reference for label, _ in ORDERS[1:]]
    within = max(abs(g) for g in gaps) < spread
    emit(f"The locality orders' mean differences ({', '.join(f'{g:+.4f}' for g in gaps)}) are "
         f"{'smaller' if within else 'NOT smaller'} than the global shuffle's own range across "
         f"seeds ({spread:.4f})"
         + (": at this model, corpus and number of steps, no cost of the locality order shows "
            "above that noise." if within else "."))
    emit("")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    main()
