"""Megatron's indexed format (.bin/.idx) written from Python, with numpy alone: the bytes
megatron-core's ``IndexedDatasetBuilder`` writes with ``add_item`` + ``end_document`` per document
(tests/python/test_tokens.py checks them equal, byte for byte, where megatron-core is installed).
The reader is the C++ core's (``loader/indexed.h``); token streams read these files.
"""
import array
import hashlib
import os
import struct
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["IndexedWriter", "write_indexed", "optimal_dtype"]

# The .idx header's dtype codes (megatron-core's DType).
DTYPE_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3,
               np.dtype(np.int32): 4, np.dtype(np.int64): 5, np.dtype(np.uint16): 8}


def optimal_dtype(vocab_size: int) -> Any:
    """megatron-core's choice for token ids below `vocab_size` (DType.optimal_dtype): uint16 below
    65,500, else int32."""
    return np.uint16 if vocab_size < 65500 else np.int32


class IndexedWriter:
    """prefix.bin and prefix.idx, a document at a time; the .idx is written by ``finish()``.
    Holds 16 bytes a document (the .idx in the making), not the tokens; ``digests`` are the
    files' SHA-256 (hex) once finished."""

    def __init__(self, prefix: "str | os.PathLike[str]", dtype: Any = np.uint16) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"dtype = {self.dtype}; allowed: "
                             f"{', '.join(sorted(str(d) for d in DTYPE_CODES))}")
        self.prefix = os.fspath(prefix)
        self.lengths = array.array("q")
        self.document_indices = array.array("q", [0])  # the sequence after each document
        self._bin = open(self.prefix + ".bin", "wb")
        self._bin_sha256 = hashlib.sha256()
        self.digests: "dict[str, str]" = {}

    def add_document(self, tokens: Sequence[int]) -> None:
        data = np.asarray(tokens, dtype=self.dtype).tobytes()
        self._bin.write(data)
        self._bin_sha256.update(data)
        self.lengths.append(len(tokens))
        self.document_indices.append(len(self.lengths))

    def add_empty_document(self) -> None:
        """A document of no sequence, as Megatron-LM's tools/preprocess_data.py writes an empty
        text (its builder's add_document with no lengths): document_indices repeats its last
        entry, and readers that count sequences (ours, megatron-core's GPT datasets) never see
        it. add_document([]) instead writes a sequence of 0 tokens."""
        self.document_indices.append(len(self.lengths))

    def finish(self) -> None:
        self._bin.close()
        lengths = np.frombuffer(self.lengths, np.int64) if self.lengths else np.zeros(0, np.int64)
        pointers = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1] * self.dtype.itemsize, out=pointers[1:])
        idx = hashlib.sha256()
        with open(self.prefix + ".idx", "wb") as f:
            for part in (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) +
                         struct.pack("<B", DTYPE_CODES[self.dtype]),
                         struct.pack("<Q", len(lengths)) +
                         struct.pack("<Q", len(self.document_indices)),
                         lengths.astype(np.int32).tobytes(), pointers.tobytes(),
                         np.frombuffer(self.document_indices, np.int64).tobytes()):
                f.write(part)
                idx.update(part)
        self.digests = {"bin": self._bin_sha256.hexdigest(), "idx": idx.hexdigest()}

    def close(self) -> None:
        """Closes the .bin without writing the .idx (a writer given up)."""
        self._bin.close()


def write_indexed(prefix: "str | os.PathLike[str]", documents: Iterable[Sequence[int]],
                  dtype: Any = np.uint16) -> None:
    """prefix.bin and prefix.idx holding `documents` (sequences of token ids) in order."""
    writer = IndexedWriter(prefix, dtype)
    try:
        for doc in documents:
            writer.add_document(doc)
    except BaseException:
        writer.close()
        raise
    writer.finish()
