#!/usr/bin/env python3
"""The quality of a locality order for object stores: rho, the fraction of the pairs of a global
batch's documents that share an I/O block, for the block order of policies/shards.h
(BlockShardOrder: documents in blocks of Q contiguous ones, the blocks in a keyed order, the
documents shuffled within windows of K blocks) at two window sizes, against the global shuffle
(our Feistel order) and MosaicML Streaming's py1e and py1br on the same blocks as shards; prints
(or writes) the "Locality orders" section of docs/benchmarks.md.

    .venv-peers/bin/python bench/tokens_locality.py --build build [--write docs/benchmarks.md]

(.venv-peers: requirements/peers.txt, which has mosaicml-streaming; build/python's extension is
built for the same Python.) One source of N documents, read in its order: a global batch is B
consecutive positions (a token stream of one source takes documents in its order; with several
sources each source's run of a batch is such a stretch, shorter). Per order, over one epoch:
rho's mean, its worst batch, its mean in each tenth of the epoch (a tail collapse, as
mosaicml/streaming#796 reports of py1br, shows as a rising last tenth), and the blocks a batch
touches (a cache of that many blocks serves it). Beside them the two exact references: under a
uniform shuffle E[rho] = (Q - 1) / (N - 1); and any order whose batches each come from at most C
blocks has rho >= (B / C - 1) / (B - 1) (the pairs are fewest when the B documents spread evenly
over the C blocks), stated for C = 2K, the blocks a batch of the block order can touch (two
windows at most, when B <= K Q).
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from peers import machine, streaming_shuffle  # noqa: E402
from tokens import finish_section  # noqa: E402

N, Q, B = 10**6, 1000, 512
WINDOWS = (4, 32)
SEED, EPOCH = 7, 0
CANONICAL_NODES = 8  # Streaming's num_canonical_nodes, as bench/peers_quality.py
BEGIN = "<!-- bench/tokens_locality.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_locality.py: end -->"
HEADING = "## Locality orders: rho, the same-block pair rate of a global batch"


def batch_stats(order):
    """Per batch of B consecutive positions: rho and the blocks touched."""
    batches = len(order) // B
    blocks = (order[:batches * B] // Q).reshape(batches, B)
    blocks = np.sort(blocks, axis=1)
    starts = np.ones_like(blocks, dtype=bool)
    starts[:, 1:] = blocks[:, 1:] != blocks[:, :-1]
    rho = np.empty(batches)
    touched = starts.sum(axis=1)
    for i in range(batches):
        counts = np.diff(np.append(np.flatnonzero(starts[i]), B))
        rho[i] = (counts * (counts - 1)).sum() / (B * (B - 1))
    return rho, touched


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--write", help="replace (or append) the section in this file")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(os.path.join(args.build, "python")))
    from distsampler import _core
    started = time.perf_counter()
    orders = {}
    for k in WINDOWS:
        orders[f"block order, K = {k} blocks"] = _core.block_shard_order(N, Q, k, SEED, EPOCH, 0, N)
    orders["global shuffle (our Feistel order)"] = np.asarray(
        _core.make_epoch_order(N, SEED, True, "feistel", _core.RandpermVariant.current,
                               EPOCH).array())
    shuffle = streaming_shuffle()
    sizes = np.array([Q] * (N // Q), dtype=np.int64)
    for algo in ("py1e", "py1br"):
        orders[f"Streaming {algo} (its default block size)"] = np.asarray(
            shuffle.get_shuffle(algo, sizes, CANONICAL_NODES, SEED, EPOCH), dtype=np.int64)
    rows = []
    for name, order in orders.items():
        order = np.asarray(order, dtype=np.int64)
        assert np.array_equal(np.sort(order), np.arange(N)), f"{name} is not a permutation"
        rho, touched = batch_stats(order)
        tenths = [float(t.mean()) for t in np.array_split(rho, 10)]
        rows.append((name, float(rho.mean()), float(rho.max()), tenths, float(touched.mean()),
                     int(touched.max())))
    elapsed = time.perf_counter() - started

    uniform = (Q - 1) / (N - 1)
    lines = [BEGIN, ""]
    emit = lines.append
    emit(f"Measured on {time.strftime('%Y-%m-%d')} by `bench/tokens_locality.py` "
         f"(`.venv-peers/bin/python bench/tokens_locality.py --build {args.build} --write "
         f"docs/benchmarks.md`), in one run of {elapsed:.0f} s. {machine()}")
    emit("")
    emit(f"One source of N = {N:,} documents in blocks of Q = {Q:,} contiguous documents "
         f"({N // Q:,} blocks; Streaming's shards: the same blocks), read in its epoch-{EPOCH} "
         f"order (seed {SEED}); a global batch is B = {B} consecutive positions "
         f"({N // B:,} batches). rho: the fraction of a batch's pairs of documents in the same "
         "block. Under a uniform shuffle E[rho] = (Q - 1) / (N - 1) = "
         f"{uniform:.2e}; a batch served from at most C blocks has rho >= (B / C - 1) / (B - 1). "
         "This is the order alone, computed, not tokens read from a store.")
    emit("")
    emit("| order | rho: mean | rho: worst batch | rho by tenth of the epoch (first .. last) | "
         "blocks a batch touches: mean | max | the bound at the mean blocks | the bound for "
         "C = 2K |")
    emit("|---|---|---|---|---|---|---|---|")
    for name, mean, worst, tenths, touched, most in rows:
        bound = ""
        for k in WINDOWS:
            if name.startswith(f"block order, K = {k} "):
                c = 2 * k
                bound = f"{(B / c - 1) / (B - 1):.4f} (C = {c})"
        at_mean = (B / touched - 1) / (B - 1)
        emit(f"| {name} | {mean:.4f} | {worst:.4f} | "
             f"{' '.join(f'{t:.4f}' for t in tenths)} | {touched:.1f} | {most} | {at_mean:.4f} | "
             f"{bound} |")
    emit("")
    above = [mean / ((B / touched - 1) / (B - 1)) for name, mean, _, _, touched, _ in rows
             if name.startswith("block order")]
    rest = (N // Q) % max(WINDOWS)
    emit(f"The block order's mean rho is {min(above):.2f} to {max(above):.2f} times the least any "
         "order can have with as few blocks a batch (the bound at the mean blocks touched), and "
         "flat over the epoch but for the last window: an epoch's blocks fill windows of K, and "
         f"the last holds the rest ({rest} blocks at K = {max(WINDOWS)}), so its batches come "
         f"from those few blocks (rho about 1 / {rest}: the worst batch and the last tenth "
         "above).")
    for name, _, worst, _, _, _ in rows:
        if worst > 0.999:
            emit(f"{name}: a batch wholly from one shard (rho {worst:.3f}).")
    emit("")
    finish_section(lines, args.write, BEGIN, END, HEADING)


if __name__ == "__main__":
    main()
