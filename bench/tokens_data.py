#!/usr/bin/env python3
"""Writes the token-stream benchmark's sources (bench/tokens.py) in Megatron's indexed format:
SOURCES sources, each a `.bin` + `.idx` pair, with document lengths from a seeded lognormal
(median 300 tokens, sigma 1.2, clipped to [1, 100000]), tokens uint16. Run with the interpreter
that has megatron-core (the torch 2 venv, .venv):

    .venv/bin/python bench/tokens_data.py --documents 1000000 --out DIR [--fast | --lengths-only]

Without --fast, megatron-core's own IndexedDatasetBuilder writes every source (tokens synthetic),
and this script checks that its own writer gives the same .idx bytes for the same lengths. With
--fast (the 10^8-document size, where the builder's Python loop and 10^11 bytes of tokens are out
of reach here), the .idx is written by that writer, byte for byte Megatron's layout (checked
against the builder first on a small case), and the .bin is a sparse file of the right size
(os.truncate): the planners read lengths only. With --lengths-only (10^10 documents, whose whole
.idx would be 200 GB), the .idx holds the lengths alone and its pointers are a hole until
fill_pointers() writes the pages a run reads (bench/tokens_scale.py), both checked against
Megatron's layout first on a small case. Prints one JSON line: the prefixes, the documents, the
tokens, the seconds.
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


def idx_header(n, dtype=DTYPE):
    """The 34 bytes before the lengths: header, version 1, dtype code, sequence count, document
    count + 1 (one sequence per document)."""
    from megatron.core.datasets.indexed_dataset import DType
    return b"".join((HEADER, struct.pack("<Q", 1), struct.pack("<B", DType.code_from_dtype(dtype)),
                     struct.pack("<Q", n), struct.pack("<Q", n + 1)))


def idx_sequences(path):
    """The sequence count in a .idx's header (bytes 18..26, after the magic, version and dtype)."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(34)[18:26], "little")


def idx_bytes(lengths, dtype=DTYPE):
    """The .idx that megatron-core's IndexedDatasetBuilder.finalize writes for one sequence per
    document (_IndexWriter): header, version 1, dtype code, sequence count, document count + 1,
    int32 lengths, int64 byte pointers, int64 document indices 0..n, no modes."""
    n = len(lengths)
    pointers = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize, out=pointers[1:])
    return b"".join((idx_header(n, dtype), lengths.astype(np.int32).tobytes(), pointers.tobytes(),
                     np.arange(n + 1, dtype=np.int64).tobytes()))


def write_fast(prefix, lengths):
    with open(prefix + ".idx", "wb") as f:
        f.write(idx_bytes(lengths))
    with open(prefix + ".bin", "wb") as f:
        f.truncate(int(lengths.sum(dtype=np.int64)) * np.dtype(DTYPE).itemsize)


def write_lengths_only(prefix, lengths, dtype=DTYPE):
    """A sparse .idx in Megatron's layout holding only what a plan reads and what opening checks:
    the header, every length, the last pointer and the last document index (the first is 0, as
    a hole reads). The other pointers (and document indices) are a hole until fill_pointers()
    writes the pages a loader reads: a pointer left a hole reads 0, which the reader refuses
    (a pointer must end where the next begins), so a page missed fails loudly. 10^10 documents
    need 40 GB this way, not the 200 GB of a whole .idx. The .bin: a sparse file of the right
    size. Writes the running token sums at every 512th document to prefix.sums.npy, for
    fill_pointers."""
    n = len(lengths)
    width = np.dtype(dtype).itemsize
    ends = np.cumsum(lengths, dtype=np.int64)
    total = int(ends[-1])
    np.save(prefix + ".sums.npy", np.concatenate(([0], ends[511::512])))
    del ends
    with open(prefix + ".idx", "wb") as f:
        f.write(idx_header(n, dtype))
        f.write(lengths.astype(np.int32).tobytes())
        f.seek(34 + 4 * n + 8 * (n - 1))
        f.write(struct.pack("<q", (total - int(lengths[-1])) * width))
        f.seek(34 + 12 * n + 8 * n)
        f.write(struct.pack("<q", n))
    with open(prefix + ".bin", "wb") as f:
        f.truncate(total * width)
    return total


def fill_pointers(prefix, documents, dtype=DTYPE):
    """Writes the pointer pages of a lengths-only .idx (write_lengths_only) that hold the pointers
    of `documents` and of the document after each, with the values Megatron's writer gives:
    the running sums of the lengths before, in bytes. Returns the pages written."""
    width = np.dtype(dtype).itemsize
    sums = np.load(prefix + ".sums.npy")
    n = idx_sequences(prefix + ".idx")
    with open(prefix + ".idx", "r+b") as f:
        lengths = np.memmap(f, dtype=np.int32, mode="r", offset=34, shape=(n,))
        base = 34 + 4 * n
        wanted = np.unique(np.concatenate((documents, np.minimum(documents + 1, n - 1))))
        pages = np.unique((base + 8 * wanted.astype(np.int64)) // 4096)
        for page in pages.tolist():
            first = max(0, -(-(page * 4096 - base) // 8))
            last = min(n, ((page + 1) * 4096 - base) // 8 + 1)  # pointers [first, last)
            block = first // 512
            before = int(sums[block]) + int(lengths[block * 512:first].sum(dtype=np.int64))
            values = np.empty(last - first, dtype=np.int64)
            values[0] = before
            np.cumsum(lengths[first:last - 1], dtype=np.int64, out=values[1:])
            values[1:] += before
            os.pwrite(f.fileno(), (values * width).tobytes(), base + 8 * first)
        del lengths
    return len(pages)


def check_lengths_only_writer():
    """write_lengths_only + fill_pointers against idx_bytes on a small case: with every pointer
    page filled, the same header, lengths and pointers, byte for byte, and the same last
    document index; with only some filled, those pages' pointers the same and the rest zeros."""
    lengths = lengths_of(0, 5000)
    whole = idx_bytes(lengths)
    n = len(lengths)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "sparse")
        write_lengths_only(prefix, lengths)
        fill_pointers(prefix, np.arange(n))
        with open(prefix + ".idx", "rb") as f:
            got = f.read()
        if len(got) != len(whole) or got[:34 + 12 * n] != whole[:34 + 12 * n] or \
                got[-8:] != whole[-8:]:
            raise RuntimeError("the lengths-only .idx differs from IndexedDatasetBuilder's layout")
        write_lengths_only(prefix, lengths)
        fill_pointers(prefix, np.array([1234]))
        with open(prefix + ".idx", "rb") as f:
            got = f.read()
        at = 34 + 4 * n + 8 * 1234
        if got[at:at + 16] != whole[at:at + 16] or got[34 + 4 * n:34 + 4 * n + 8] != bytes(8) \
                or whole[34 + 4 * n + 8:34 + 4 * n + 16] == got[34 + 4 * n + 8:34 + 4 * n + 16]:
            raise RuntimeError("fill_pointers wrote other pages than the wanted ones")


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
    parser.add_argument("--lengths-only", action="store_true",
                        help="a sparse .idx of the lengths alone (write_lengths_only: its pointer "
                             "pages written later by fill_pointers) and a sparse .bin")
    args = parser.parse_args()
    per_source = args.documents // args.sources
    if per_source * args.sources != args.documents:
        raise SystemExit("--documents must be a multiple of --sources")
    os.makedirs(args.out, exist_ok=True)
    started = time.perf_counter()
    check_fast_writer()
    if args.lengths_only:
        check_lengths_only_writer()
    tokens = None if args.fast else \
        np.random.default_rng(SEED).integers(0, 50_000, MAX_LEN * 2, dtype=DTYPE)
    prefixes, total = [], 0
    for source in range(args.sources):
        prefix = os.path.join(args.out, f"source{source:03d}")
        lengths = lengths_of(source, per_source)
        if args.lengths_only:
            total += write_lengths_only(prefix, lengths)
            prefixes.append(prefix)
            continue
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
                      "writer": "lengths only" if args.lengths_only else
                      "fast" if args.fast else "IndexedDatasetBuilder",
                      "seconds": time.perf_counter() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
