#!/usr/bin/env python3
"""Writes the token-stream benchmark's sources (bench/tokens.py) in Megatron's indexed format:
SOURCES sources, each a `.bin` + `.idx` pair, with document lengths from a seeded lognormal
(median 300 tokens, sigma 1.2, clipped to [1, 100000]), tokens uint16. Run with the interpreter
that has megatron-core (the torch 2 venv, .venv):

    .venv/bin/python bench/tokens_data.py --documents 1000000 --out DIR [--fast]

Without --fast, megatron-core's own IndexedDatasetBuilder writes every source (tokens synthetic),
and this script checks that its own writer gives the same .idx bytes for the same lengths. With
--fast (the 10^8-document size, where the builder's Python loop and 10^11 bytes of tokens are out
of reach here), the .idx is written by that writer, byte for byte Megatron's layout (checked
against the builder first on a small case), and the .bin is a sparse file of the right size
(os.truncate): the planners read lengths only. Prints one JSON line: the prefixes, the documents,
the tokens, the seconds.
"""
import argparse
import json
import os
import struct
import sys
import tempfile
import time

import numpy as np

SOURCES = 100
MEDIAN, SIGMA, MAX_LEN = 300, 1.2, 100_000
SEED = 1
DTYPE = np.uint16  # Megatron's DType code 8, what a vocabulary under 65,536 tokens gets
HEADER = b"MMIDIDX\x00\x00"  # megatron.core.datasets.indexed_dataset._INDEX_HEADER


def lengths_of(source, documents, seed=SEED):
    """Source `source`'s document lengths: lognormal, median MEDIAN, clipped to [1, MAX_LEN]."""
    rng = np.random.default_rng([seed, source])
    raw = rng.lognormal(np.log(MEDIAN), SIGMA, documents)
    return np.clip(np.rint(raw), 1, MAX_LEN).astype(np.int32)


def idx_bytes(lengths, dtype=DTYPE):
    """The .idx that megatron-core's IndexedDatasetBuilder.finalize writes for one sequence per
    document (_IndexWriter): header, version 1, dtype code, sequence count, document count + 1,
    int32 lengths, int64 byte pointers, int64 document indices 0..n, no modes."""
    from megatron.core.datasets.indexed_dataset import DType
    n = len(lengths)
    pointers = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize, out=pointers[1:])
    return b"".join((HEADER, struct.pack("<Q", 1), struct.pack("<B", DType.code_from_dtype(dtype)),
                     struct.pack("<Q", n), struct.pack("<Q", n + 1),
                     lengths.astype(np.int32).tobytes(), pointers.tobytes(),
                     np.arange(n + 1, dtype=np.int64).tobytes()))


def write_fast(prefix, lengths):
    with open(prefix + ".idx", "wb") as f:
        f.write(idx_bytes(lengths))
    with open(prefix + ".bin", "wb") as f:
        f.truncate(int(lengths.sum(dtype=np.int64)) * np.dtype(DTYPE).itemsize)


def write_builder(prefix, lengths, tokens):
    """megatron-core's IndexedDatasetBuilder, one add_document per document."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DTYPE)
    start = 0
    for length in lengths.tolist():
        if start + length > len(tokens):
            start = 0
        builder.add_document(tokens[start:start + length], [length])
        start += length
    builder.finalize(prefix + ".idx")


def check_fast_writer():
    """The fast writer against the builder on a small case: same .idx bytes, same .bin size."""
    lengths = lengths_of(SOURCES + 1, 5000)
    tokens = np.random.default_rng(SEED).integers(0, 50_000, MAX_LEN * 2, dtype=DTYPE)
    with tempfile.TemporaryDirectory() as tmp:
        write_builder(os.path.join(tmp, "builder"), lengths, tokens)
        write_fast(os.path.join(tmp, "fast"), lengths)
        with open(os.path.join(tmp, "builder.idx"), "rb") as a, \
                open(os.path.join(tmp, "fast.idx"), "rb") as b:
            if a.read() != b.read():
                raise RuntimeError("the fast .idx writer differs from IndexedDatasetBuilder's")
        if os.path.getsize(os.path.join(tmp, "builder.bin")) != \
                os.path.getsize(os.path.join(tmp, "fast.bin")):
            raise RuntimeError("the sparse .bin differs in size from IndexedDatasetBuilder's")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, required=True, help="in all, over the sources")
    parser.add_argument("--sources", type=int, default=SOURCES)
    parser.add_argument("--out", required=True, help="directory of the sources")
    parser.add_argument("--fast", action="store_true",
                        help="the checked fast .idx writer and a sparse .bin")
    args = parser.parse_args()
    per_source = args.documents // args.sources
    if per_source * args.sources != args.documents:
        raise SystemExit("--documents must be a multiple of --sources")
    os.makedirs(args.out, exist_ok=True)
    started = time.perf_counter()
    check_fast_writer()
    tokens = None if args.fast else \
        np.random.default_rng(SEED).integers(0, 50_000, MAX_LEN * 2, dtype=DTYPE)
    prefixes, total = [], 0
    for source in range(args.sources):
        prefix = os.path.join(args.out, f"source{source:03d}")
        lengths = lengths_of(source, per_source)
        if args.fast:
            write_fast(prefix, lengths)
        else:
            write_builder(prefix, lengths, tokens)
            with open(prefix + ".idx", "rb") as f:
                if f.read() != idx_bytes(lengths):
                    raise RuntimeError(f"{prefix}.idx: the builder's bytes differ from ours")
        prefixes.append(prefix)
        total += int(lengths.sum(dtype=np.int64))
    print(json.dumps({"prefixes": prefixes, "documents": args.documents,
                      "sources": args.sources, "tokens": total,
                      "writer": "fast" if args.fast else "IndexedDatasetBuilder",
                      "seconds": time.perf_counter() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
