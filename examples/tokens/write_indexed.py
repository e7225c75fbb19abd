"""Writes token documents in Megatron's indexed format (.bin/.idx): the bytes megatron-core's
IndexedDatasetBuilder writes with add_item + end_document per document
(tests/python/test_tokens.py checks them equal, byte for byte, on the PyTorch 2 stack where
megatron-core is installed), with numpy alone.

As a program it writes a small demo corpus of random documents, for the commands of
docs/tokens.md ("Edits"):

    /usr/bin/python3 examples/tokens/write_indexed.py OUT_DIR [--sources N] [--documents D]
        [--seed S]

OUT_DIR/s<i>.bin/.idx per source i (D documents of 0 to 300 tokens each) and OUT_DIR/extra.bin/
.idx (D / 4 more, to append).
"""
import argparse
import os
import random
import struct

import numpy as np

DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.uint16: 8}


def write_indexed(prefix, documents, dtype=np.uint16):
    """prefix.bin and prefix.idx holding `documents` (sequences of token ids) in order."""
    size = np.dtype(dtype).itemsize
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            f.write(np.asarray(doc, dtype=dtype).tobytes())
    lengths = [len(d) for d in documents]
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64) * size]) \
        if lengths else np.zeros(0, np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(lengths) + 1))
        f.write(np.asarray(lengths, np.int32).tobytes())
        f.write(np.asarray(pointers, np.int64).tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--sources", type=int, default=2)
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out_dir, exist_ok=True)

    def documents(count):
        return [[rng.randrange(50000) for _ in range(rng.randint(0, 300))] for _ in range(count)]
    for i in range(args.sources):
        write_indexed(os.path.join(args.out_dir, f"s{i}"), documents(args.documents))
    write_indexed(os.path.join(args.out_dir, "extra"), documents(max(1, args.documents // 4)))


if __name__ == "__main__":
    main()
