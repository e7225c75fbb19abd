"""Raw text to token sources: ``python -m distsampler.prepare`` (``distsampler tokens prepare``).

Reads JSONL (one JSON object a line, the text in ``--field``), Parquet (the column ``--field``)
and plain text files (a file is one document), each also gzip- or zstd-compressed (``.jsonl.gz``,
``.jsonl.zst``); tokenizes each document with a Hugging Face ``tokenizers`` file
(``tokenizer.json``; never downloaded), appends the end-of-document token (``--eod``), and writes
Megatron's .bin/.idx shards: OUT/shard_00000.bin/.idx, ... in the dtype megatron-core chooses for
the vocabulary (uint16 below 65,500 ids, else int32), and OUT/prepare.json. docs/tokens.md,
"Preparing data", shows a run.

- The plan: each input is cut into pieces of about ``--shard-size`` bytes (256 MiB), at record
  boundaries (a JSONL file after a newline, a Parquet file between row groups; a compressed or
  text file is one piece), and each piece is one shard, numbered in the order of the inputs. The
  plan depends on the inputs' bytes and the shard size alone, so every shard's bytes are the same
  for any number of workers, machines or tasks.
- Streaming: a worker holds one block of input (1 MiB), one batch of documents (512 or 1 MiB of
  text, whichever comes first; a longer document whole) and its shard's index (16 bytes a
  document), whatever the file's size.
- Parallel over processes (``--workers``), or over SLURM array tasks or Ray tasks (``--task I
  --tasks N``: the shards i with i % N == I; then ``--finalize``, which checks every shard and
  writes prepare.json). Workers die with the main process (PR_SET_PDEATHSIG).
- Records: each shard's ``shard_NNNNN.json``, written last, names its configuration, its input,
  the input's size, the piece's range and the SHA-256 of its input bytes, its documents and
  tokens and the SHA-256 of its .bin, .idx and .dochash (each document's digest). A rerun
  keeps a shard only when its record matches the plan and the input's bytes in that range still
  hash the same; any other shard (a killed run's, an older tool's, an input edited in place) is
  made again. prepare.json gathers the records, and per input its size and SHA-256 (of its
  pieces' digests, in order).
- Bad input (a line that is not JSON, a missing or non-string field, bytes that are not UTF-8, an
  empty file) stops the run with one line naming the file and the line (or row); the shards
  already whole stay.
"""
import argparse
import ctypes
import gzip
import hashlib
import json
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .indexed import IndexedWriter, optimal_dtype

__all__ = ["prepare", "plan", "PrepareError", "DEFAULT_SHARD_SIZE"]

BATCH = 512  # documents per encode_batch call
# Or this much text, whichever comes first: the encodings of a batch (ids, offsets and the
# tokens' strings) take about 90 bytes a token: some 20 MB for 1 MiB of English or code.
BATCH_CHARS = 1 << 20
BLOCK = 1 << 20  # bytes read at a time
DEFAULT_SHARD_SIZE = 256 << 20
FORMAT = "distsampler.prepare/2"  # the records' and prepare.json's layout
# A shard's files besides its record: Megatron's two, and each document's BLAKE2b-128 digest of
# its UTF-8 text (16 bytes a document that has a sequence, in the reader's order): what a text
# is looked up by.
SHARD_FILES = ("bin", "idx", "dochash")

LINES = ("jsonl", "json", "ndjson")
TEXT = ("txt", "text", "md")
CODECS = {"gz": "gzip", "zst": "zstd"}


class PrepareError(ValueError):
    """Bad input or configuration: one line, naming the file and the line or the parameter."""


class Piece(NamedTuple):
    """One shard's part of one input: bytes [start, end) of a JSONL or text file, or row groups
    [start, end) of a Parquet file (then span: their bytes), or a whole compressed file."""
    shard: int
    input: int
    path: str
    kind: str  # "lines", "text" or "parquet"
    codec: str  # "", "gzip" or "zstd"
    start: int
    end: int
    span: Tuple[int, int]  # the file's bytes the piece hashes; the pieces of a file tile it
    first_row: int  # Parquet: the rows before the piece


def _format(path: str) -> Tuple[str, str]:
    """(kind, codec) of a file by its name; PrepareError for one of no known format."""
    parts = os.path.basename(path).lower().split(".")[1:]
    codec = CODECS.get(parts[-1], "") if parts else ""
    if codec:
        parts = parts[:-1]
    suffix = parts[-1] if parts else ""
    if suffix in LINES:
        return "lines", codec
    if suffix in TEXT:
        return "text", codec
    if suffix == "parquet" and not codec:
        return "parquet", ""
    name = ".".join(os.path.basename(path).split(".")[1:])
    raise PrepareError(f"{path}: the format of '.{name}' files is unknown; allowed: .jsonl "
                       "(.json, .ndjson), .parquet, .txt (.text, .md), and .gz or .zst of all "
                       "but .parquet")


def plan(inputs: Sequence[str], shard_size: int = DEFAULT_SHARD_SIZE) -> List[Piece]:
    """The shards of `inputs`, in order (module docstring): a function of the files' bytes and
    the shard size alone."""
    pieces: List[Piece] = []
    for n, path in enumerate(inputs):
        kind, codec = _format(path)
        size = os.path.getsize(path)
        if kind == "lines" and not codec:
            cuts = _line_cuts(path, size, shard_size)
            for a, b in zip(cuts, cuts[1:]):
                pieces.append(Piece(len(pieces), n, path, kind, "", a, b, (a, b), 0))
        elif kind == "parquet":
            for a, b, span, first in _row_group_cuts(path, size, shard_size):
                pieces.append(Piece(len(pieces), n, path, kind, "", a, b, span, first))
        else:
            pieces.append(Piece(len(pieces), n, path, kind, codec, 0, size, (0, size), 0))
    return pieces


def _line_cuts(path: str, size: int, shard_size: int) -> List[int]:
    """[0, ..., size]: a file of `size` bytes in ceil(size / shard_size) near-equal pieces, each
    cut moved on to just after the next newline."""
    count = max(1, -(-size // shard_size))
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, count):
            at = max(k * size // count - 1, cuts[-1])
            f.seek(at)
            while True:
                block = f.read(BLOCK)
                if not block:
                    at = size
                    break
                newline = block.find(b"\n")
                if newline >= 0:
                    at += newline + 1
                    break
                at += len(block)
            if cuts[-1] < at < size:
                cuts.append(at)
    return cuts + [size]


def _parquet(path: str) -> Any:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise PrepareError(f"{path}: reading Parquet needs pyarrow") from None
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow's errors name no type of their own
        raise PrepareError(f"{path}: not a Parquet file ({e})") from None


def _row_group_cuts(path: str, size: int,
                    shard_size: int) -> List[Tuple[int, int, Tuple[int, int], int]]:
    """Row groups [a, b) per piece, with the bytes each piece hashes and its first row."""
    meta = _parquet(path).metadata
    starts, rows = [], []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        offsets = []
        for c in range(group.num_columns):
            column = group.column(c)
            has_dictionary = column.has_dictionary_page and column.dictionary_page_offset
            offsets.append(column.dictionary_page_offset if has_dictionary
                           else column.data_page_offset)
        starts.append(min(offsets) if offsets else 0)
        rows.append(group.num_rows)
    if not starts:
        return [(0, 0, (0, size), 0)]
    count = max(1, -(-size // shard_size))
    firsts = [0]
    for k in range(1, count):
        g = next((g for g in range(firsts[-1] + 1, len(starts)) if starts[g] >= k * size // count),
                 len(starts))
        if g < len(starts) and g > firsts[-1]:
            firsts.append(g)
    bounds = firsts + [len(starts)]
    spans = [0] + [starts[g] for g in firsts[1:]] + [size]
    return [(a, b, (spans[k], spans[k + 1]), sum(rows[:a]))
            for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]


class _Hashing:
    """A binary file's read(), hashing every byte read (under a decompressor)."""

    def __init__(self, f: Any, digest: Any) -> None:
        self.f, self.digest = f, digest

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.f.read(n)
        self.digest.update(data)
        return data

    def drain(self) -> None:
        while self.read(BLOCK):
            pass


def _blocks(piece: Piece, digest: Any) -> Iterator[bytes]:
    """The piece's decoded bytes, a block at a time, every file byte of its span hashed."""
    with open(piece.path, "rb") as f:
        if piece.codec:
            raw = _Hashing(f, digest)
            stream = _decompressor(piece, raw)
            try:
                while True:
                    block = stream.read(BLOCK)
                    if not block:
                        break
                    yield block
            except (OSError, EOFError, ValueError) as e:
                raise PrepareError(f"{piece.path}: not a {piece.codec} file ({e})") from None
            except Exception as e:  # zstandard.ZstdError
                if type(e).__name__ != "ZstdError":
                    raise
                raise PrepareError(f"{piece.path}: not a {piece.codec} file ({e})") from None
            raw.drain()
            return
        f.seek(piece.start)
        left = piece.end - piece.start
        while left > 0:
            block = f.read(min(BLOCK, left))
            if not block:
                raise PrepareError(f"{piece.path}: shorter than when the run began (changed "
                                   "during the run?)")
            left -= len(block)
            digest.update(block)
            yield block


def _decompressor(piece: Piece, raw: Any) -> Any:
    if piece.codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    try:
        import zstandard  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise PrepareError(f"{piece.path}: reading .zst needs the zstandard package") from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


def _lines(piece: Piece, digest: Any) -> Iterator[Tuple[int, bytes]]:
    """(line number within the piece, from 1; the line without its newline)."""
    carry: List[bytes] = []
    n = 0
    for block in _blocks(piece, digest):
        if b"\n" not in block:
            carry.append(block)
            continue
        if carry:
            carry.append(block)
            block, carry = b"".join(carry), []
        lines = block.split(b"\n")
        last = lines.pop()
        carry = [last] if last else []
        for line in lines:
            n += 1
            yield n, line
    if carry:
        yield n + 1, b"".join(carry)


def _line_base(piece: Piece) -> int:
    """The lines of the file before the piece (for an error's line number)."""
    count = 0
    with open(piece.path, "rb") as f:
        left = piece.start
        while left > 0:
            block = f.read(min(BLOCK, left))
            if not block:
                break
            left -= len(block)
            count += block.count(b"\n")
    return count


def _texts(piece: Piece, field: str, digest: Any) -> Iterator[str]:
    """Each document's text in the piece; PrepareError naming the file and line (or row)."""
    if piece.kind == "parquet":
        yield from _parquet_texts(piece, field, digest)
        return
    if piece.kind == "text":
        data = b"".join(_blocks(piece, digest))
        if not data.strip():
            raise PrepareError(f"{piece.path}: an empty file (no documents)")
        yield _utf8(data, piece, 1)
        return
    count = 0
    for n, raw in _lines(piece, digest):
        if not raw.strip():
            continue
        line = _utf8(raw, piece, n)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PrepareError(f"{_where(piece, n)}: not JSON ({e.msg} at column "
                               f"{e.colno})") from None
        if not isinstance(record, dict) or field not in record:
            keys = ", ".join(sorted(record)) if isinstance(record, dict) else "none"
            raise PrepareError(f"{_where(piece, n)}: no field '{field}' (fields: {keys})")
        if not isinstance(record[field], str):
            raise PrepareError(f"{_where(piece, n)}: field '{field}' is "
                               f"{type(record[field]).__name__}, not a string")
        _check_text(record[field], piece, n, field)
        count += 1
        yield record[field]
    if count == 0:
        whole = piece.start == 0 and piece.end == os.path.getsize(piece.path)
        raise PrepareError(f"{piece.path}: an empty file (no documents)" if whole else
                           f"{piece.path}: bytes {piece.start}-{piece.end} hold no documents")


def _where(piece: Piece, line: int) -> str:
    return f"{piece.path}:{_line_base(piece) + line}"


def _check_text(text: str, piece: Piece, line: int, field: str) -> None:
    """PrepareError for a string no UTF-8 can hold (a lone surrogate, which JSON's \\uD800
    escapes can spell)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PrepareError(f"{_where(piece, line)}: field '{field}' holds a lone surrogate "
                           f"(U+{ord(text[e.start]):04X} at character {e.start + 1}); not "
                           "text") from None


def _utf8(raw: bytes, piece: Piece, line: int) -> str:
    """raw, which begins the piece's line `line`, decoded; PrepareError naming the file, line
    and column of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        at = line + raw.count(b"\n", 0, e.start)
        column = e.start - raw.rfind(b"\n", 0, e.start)
        raise PrepareError(f"{_where(piece, at)}: not UTF-8 (byte 0x{raw[e.start]:02x} at column "
                           f"{column})") from None


def _parquet_texts(piece: Piece, field: str, digest: Any) -> Iterator[str]:
    table = _parquet(piece.path)
    if field not in table.schema_arrow.names:
        raise PrepareError(f"{piece.path}: no column '{field}' (columns: "
                           f"{', '.join(table.schema_arrow.names)})")
    _hash_span(piece, digest)  # the piece's bytes, hashed as a JSONL piece's are
    row = piece.first_row
    if piece.end > piece.start:
        for batch in table.iter_batches(batch_size=BATCH, columns=[field],
                                        row_groups=range(piece.start, piece.end)):
            for value in batch.column(0).to_pylist():
                row += 1
                if not isinstance(value, str):
                    raise PrepareError(f"{piece.path}: row {row}: column '{field}' is "
                                       f"{type(value).__name__}, not a string")
                yield value
    if row == 0:
        raise PrepareError(f"{piece.path}: an empty file (no rows)")


def _shard(out: str, i: int) -> str:
    return os.path.join(out, f"shard_{i:05d}")


# Tokenizers loaded in this process (a worker's, or the main one's), by path.
_TOKENIZERS: Dict[str, Any] = {}


def _load_tokenizer(path: str) -> Any:
    if path not in _TOKENIZERS:
        from tokenizers import Tokenizer
        _TOKENIZERS[path] = Tokenizer.from_file(path)
    return _TOKENIZERS[path]


def _expected(piece: Piece, config_sha256: str) -> Dict[str, Any]:
    """What a shard's record must say of its piece to be kept."""
    return {"format": FORMAT, "config_sha256": config_sha256, "input": os.path.abspath(piece.path),
            "input_size": os.path.getsize(piece.path),
            "range": [piece.start, piece.end], "unit": "row_groups" if piece.kind == "parquet"
            else "bytes", "span": list(piece.span)}


def _read_record(out: str, i: int) -> Optional[Dict[str, Any]]:
    try:
        with open(_shard(out, i) + ".json", encoding="utf-8") as f:
            record = json.load(f)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def _kept(piece: Piece, out: str, config_sha256: str) -> Optional[Dict[str, Any]]:
    """The shard's record, when it is of this piece and the piece's bytes still hash the same."""
    record = _read_record(out, piece.shard)
    if record is None or any(record.get(k) != v for k, v in
                             _expected(piece, config_sha256).items()):
        return None
    for ext in SHARD_FILES:
        try:
            if os.path.getsize(_shard(out, piece.shard) + "." + ext) != record.get(ext + "_bytes"):
                return None
        except OSError:
            return None
    digest = hashlib.sha256()  # the span's bytes, as making the shard hashed them
    _hash_span(piece, digest)
    return record if digest.hexdigest() == record.get("input_sha256") else None


def _hash_span(piece: Piece, digest: Any) -> None:
    """Hashes the file's bytes of the piece's span: what _blocks hashes as it reads (a
    compressed file's every byte, a JSONL or text piece's range), and a Parquet piece's bytes."""
    with open(piece.path, "rb") as f:
        f.seek(piece.span[0])
        left = piece.span[1] - piece.span[0]
        while left > 0:
            block = f.read(min(BLOCK, left))
            if not block:
                break
            left -= len(block)
            digest.update(block)


def _make_shard(piece: Piece, out: str, config: Dict[str, Any],
                config_sha256: str) -> Tuple[Dict[str, Any], bool]:
    """Shard piece.shard, kept or made: (its record, whether it was made now)."""
    kept = _kept(piece, out, config_sha256)
    if kept is not None:
        return kept, False
    _remove_partials(out, [piece.shard])  # a killed run's, of this shard
    tokenizer = _load_tokenizer(config["tokenizer"])
    eod = config["eod_id"]
    partial = os.path.join(out, f".partial-shard_{piece.shard:05d}-{os.getpid()}")
    writer = IndexedWriter(partial, config["dtype"])
    digest, dochash_sha256 = hashlib.sha256(), hashlib.sha256()
    dochash = open(partial + ".dochash", "wb")
    documents = tokens = empty = 0
    try:
        batch: List[str] = []
        chars = 0

        def flush() -> None:
            nonlocal documents, tokens, empty
            encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
            for text, encoding in zip(batch, encodings):
                if not encoding.ids:  # no sequence and no EOD: preprocess_data.py's rule
                    writer.add_empty_document()
                    empty += 1
                    continue
                ids = encoding.ids + ([eod] if eod is not None else [])
                writer.add_document(ids)
                documents += 1
                tokens += len(ids)
                hashed = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
                dochash.write(hashed)
                dochash_sha256.update(hashed)
            batch.clear()

        for text in _texts(piece, config["field"], digest):
            batch.append(text)
            chars += len(text)
            if len(batch) == BATCH or chars >= BATCH_CHARS:
                flush()
                chars = 0
        flush()
        writer.finish()
        dochash.close()
    except BaseException:
        writer.close()
        dochash.close()
        _remove(partial)
        raise
    digests = dict(writer.digests, dochash=dochash_sha256.hexdigest())
    record = dict(_expected(piece, config_sha256), input_sha256=digest.hexdigest(),
                  documents=documents, empty_documents=empty, tokens=tokens)
    for ext in SHARD_FILES:
        record[ext + "_sha256"] = digests[ext]
        record[ext + "_bytes"] = os.path.getsize(partial + "." + ext)
    prefix = _shard(out, piece.shard)
    _remove_file(prefix + ".json")  # an older record must not vouch for the new files
    for ext in SHARD_FILES:  # the .idx after the .bin, as Megatron's readers open them
        os.replace(partial + "." + ext, prefix + "." + ext)
    _write_json(prefix + ".json", record)  # last: the shard is whole
    return record, True


def _worker(piece: Piece, out: str, config: Dict[str, Any],
            config_sha256: str) -> Tuple[int, Optional[Dict[str, Any]], bool, Optional[str]]:
    """_make_shard in a worker: (index, record, made, error line)."""
    try:
        record, made = _make_shard(piece, out, config, config_sha256)
        return piece.shard, record, made, None
    except PrepareError as e:
        return piece.shard, None, False, str(e)


def _die_with_parent(parent: int) -> None:
    """A worker's initializer: SIGKILL when the main process dies (Linux), so that a killed
    run leaves no worker finishing a shard no one waits for."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)
    # The workers are the parallelism: a thread each. In one process (--workers 1), the
    # tokenizer's encode_batch uses its own thread pool, unless TOKENIZERS_PARALLELISM says no.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the main process's to handle


def _remove(prefix: str) -> None:
    for ext in SHARD_FILES:
        _remove_file(prefix + "." + ext)


def _remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _remove_partials(output: str, indices: Optional[Sequence[int]] = None) -> None:
    """A killed run's shards in the making: all, or those of the shards `indices`."""
    wanted = None if indices is None else set(indices)
    for name in os.listdir(output):
        match = re.fullmatch(r"\.partial-shard_(\d+)-\d+\.(bin|idx|dochash)", name)
        if match and (wanted is None or int(match.group(1)) in wanted):
            _remove_file(os.path.join(output, name))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
            else hashlib.sha256(f.read()).hexdigest()


def _eod_id(tokenizer: Any, eod: Optional[str]) -> Optional[int]:
    """--eod as an id: digits are an id (below the vocabulary's size), anything else a token of
    the vocabulary (a token spelled in digits is named by its id)."""
    if eod is None:
        return None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if eod.isascii() and eod.isdigit():
        if int(eod) < size:
            return int(eod)
        raise PrepareError(f"--eod {eod}: an id, below the vocabulary's size {size}")
    found = tokenizer.token_to_id(eod)
    if found is not None:
        return int(found)
    raise PrepareError(f"--eod {eod}: neither a token of the tokenizer's vocabulary nor an id "
                       f"below its size {tokenizer.get_vocab_size(with_added_tokens=True)}")


class _Progress:
    """One line on stderr: rewritten in place on a terminal, a line per shard elsewhere."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.tokens, self.quiet = total, 0, 0, quiet
        self.start, self.tty = time.monotonic(), sys.stderr.isatty()

    def shard(self, tokens: int) -> None:
        self.done, self.tokens = self.done + 1, self.tokens + tokens
        if self.quiet:
            return
        rate = self.tokens / max(time.monotonic() - self.start, 1e-9)
        bar = "#" * (20 * self.done // max(self.total, 1))
        line = (f"[{bar:<20}] {self.done}/{self.total} shards, {self.tokens:,} tokens, "
                f"{rate:,.0f} tokens/s")
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        if self.tty and self.done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _run(pieces: List[Piece], out: str, config: Dict[str, Any], config_sha256: str,
         workers: int, progress: _Progress) -> Dict[int, Dict[str, Any]]:
    """Every piece's shard, kept or made, by `workers` processes: index -> record."""
    records: Dict[int, Dict[str, Any]] = {}
    if workers == 1 or len(pieces) <= 1:
        for piece in pieces:
            _, record, _, error = _worker(piece, out, config, config_sha256)
            if error:
                raise PrepareError(error)
            assert record is not None
            records[piece.shard] = record
            progress.shard(record["tokens"])
        return records
    executor = ProcessPoolExecutor(min(workers, len(pieces)),
                                   mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_die_with_parent, initargs=(os.getpid(),))
    error, whole = None, False
    try:
        pending = {executor.submit(_worker, p, out, config, config_sha256): p for p in pieces}
        while pending and error is None:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                piece = pending.pop(future)
                try:
                    _, record, _, failed = future.result()
                except BrokenProcessPool:
                    error = (f"a worker died (killed?) making shard {piece.shard} of "
                             f"{piece.path}; rerun to go on")
                    break
                if failed:
                    error = failed
                    break
                assert record is not None
                records[piece.shard] = record
                progress.shard(record["tokens"])
        whole = error is None
    finally:
        if not whole:  # an error or an interrupt: the others' shards in the making are given up
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                process.kill()
                process.join()
        executor.shutdown(wait=True, cancel_futures=True)
        if not whole:
            _remove_partials(out, [p.shard for p in pieces])
    if error is not None:
        raise PrepareError(error)
    return records


def _configure(inputs: Sequence[str], output: str, tokenizer: str, field: str, eod: Optional[str],
               shard_size: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the run's configuration, with the tokenizer's path; the part prepare.json compares)."""
    if not inputs:
        raise PrepareError("inputs: none given; name at least one .jsonl, .parquet or .txt file")
    if shard_size < 1:
        raise PrepareError(f"--shard-size {shard_size}: must be at least 1 byte")
    for path in inputs:
        if not os.path.isfile(path):
            raise PrepareError(f"{path}: no such file")
        _format(path)
    if not os.path.isfile(tokenizer):
        raise PrepareError(f"--tokenizer {tokenizer}: no such file")
    try:
        loaded = _load_tokenizer(os.path.abspath(tokenizer))
    except Exception as e:  # tokenizers raises its own Exception type
        raise PrepareError(f"--tokenizer {tokenizer}: not a tokenizers file ({e})") from None
    vocab = loaded.get_vocab_size(with_added_tokens=True)
    same = {"format": FORMAT, "tokenizer_sha256": _sha256(tokenizer), "vocab_size": vocab,
            "dtype": optimal_dtype(vocab).__name__, "field": field, "eod": eod,
            "eod_id": _eod_id(loaded, eod), "shard_size": shard_size}
    return dict(same, tokenizer=os.path.abspath(tokenizer)), same


def _open_output(output: str, same: Dict[str, Any]) -> None:
    """Makes `output`, checks it writable, and refuses a prepare.json of another configuration."""
    manifest_path = os.path.join(output, "prepare.json")
    try:
        os.makedirs(output, exist_ok=True)
        # Writable: found before any work, not after the first shard (a name of its own, as
        # tasks on other machines probe the same folder).
        descriptor, probe = tempfile.mkstemp(prefix=".probe-", dir=output)
        os.close(descriptor)
        os.remove(probe)
    except OSError as e:
        raise PrepareError(f"--output {output}: {e.strerror or e}") from None
    if not os.path.exists(manifest_path):
        return
    try:
        with open(manifest_path, encoding="utf-8") as f:
            before = json.load(f)
        if not isinstance(before, dict) or not isinstance(before.get("config", {}), dict):
            raise ValueError("not a dict with a 'config' dict")
    except (OSError, ValueError) as e:
        raise PrepareError(f"{manifest_path}: not a prepare.json ({e}); move it away or use "
                           "another output folder") from None
    diff = [k for k in same if before.get("config", {}).get(k) != same[k]]
    if diff:
        raise PrepareError(f"{output}: prepared with another configuration ({', '.join(diff)} "
                           "differ); use another output folder")


def _config_sha256(same: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(same, sort_keys=True).encode()).hexdigest()


def prepare(inputs: Sequence[str], output: str, tokenizer: str, *, field: str = "text",
            eod: Optional[str] = None, workers: int = 1, quiet: bool = False,
            shard_size: int = DEFAULT_SHARD_SIZE, task: Optional[int] = None,
            tasks: Optional[int] = None, finalize: bool = False) -> Dict[str, Any]:
    """Tokenizes `inputs` into shards in `output` (module docstring); returns prepare.json's
    content. With `tasks`, makes only the shards i with i % tasks == task and returns their
    records ({"config", "task", "shards"}); `finalize` then checks every shard and writes
    prepare.json. Raises PrepareError for bad input or configuration."""
    if workers < 1:
        raise PrepareError(f"--workers {workers}: must be at least 1")
    if (task is None) != (tasks is None):
        raise PrepareError("--task and --tasks: give both or neither")
    if tasks is not None and (tasks < 1 or not 0 <= task < tasks):  # type: ignore[operator]
        raise PrepareError(f"--task {task} --tasks {tasks}: allowed: 0 <= task < tasks")
    if finalize and tasks is not None:
        raise PrepareError("--finalize: runs after the tasks, without --task and --tasks")
    config, same = _configure(inputs, output, tokenizer, field, eod, shard_size)
    _open_output(output, same)
    config_sha256 = _config_sha256(same)
    pieces = plan(inputs, shard_size)
    if finalize:
        return _finalize(inputs, pieces, output, same, config_sha256)
    mine = [p for p in pieces if tasks is None or p.shard % tasks == task]
    if tasks is None:
        _remove_partials(output)  # a killed run's shards in the making
    progress = _Progress(len(mine), quiet)
    records = _run(mine, output, config, config_sha256, workers, progress)
    if tasks is not None:
        return {"config": same, "task": [task, tasks],
                "shards": [records[p.shard] for p in mine]}
    return _finalize(inputs, pieces, output, same, config_sha256)


def _finalize(inputs: Sequence[str], pieces: List[Piece], output: str, same: Dict[str, Any],
              config_sha256: str) -> Dict[str, Any]:
    """Checks every shard of the plan against its record and the reader (loader/indexed.h), and
    writes prepare.json; the shards of an older, longer plan go."""
    missing, bad = [], []
    shards = []
    digests: List[Any] = [hashlib.sha256() for _ in inputs]
    for piece in pieces:
        record = _read_record(output, piece.shard)
        expected = _expected(piece, config_sha256)
        if record is None or any(record.get(k) != v for k, v in expected.items()):
            missing.append(piece.shard)
            continue
        prefix = _shard(output, piece.shard)
        try:
            same_files = all(_sha256(prefix + "." + ext) == record[ext + "_sha256"]
                             for ext in SHARD_FILES)
            documents, tokens = _count(prefix)
        except (OSError, RuntimeError, ValueError):
            same_files = False
        if not same_files or (documents, tokens) != (record["documents"], record["tokens"]):
            bad.append(piece.shard)
            continue
        digests[piece.input].update(bytes.fromhex(record["input_sha256"]))
        shards.append({"prefix": os.path.basename(prefix), "input": record["input"],
                       "range": record["range"], "unit": record["unit"],
                       "input_sha256": record["input_sha256"], "documents": documents,
                       "empty_documents": record["empty_documents"], "tokens": tokens,
                       **{ext + "_sha256": record[ext + "_sha256"] for ext in SHARD_FILES}})
    if missing or bad:
        def names(indices: List[int]) -> str:
            shown = ", ".join(str(i) for i in indices[:8])
            return shown + (f" and {len(indices) - 8} more" if len(indices) > 8 else "")
        what = ([f"shards {names(missing)} not made"] if missing else []) + \
            ([f"shards {names(bad)} not as their records say"] if bad else [])
        raise PrepareError(f"{output}: {'; '.join(what)} (of {len(pieces)}); run the tasks that "
                           "make them (shard i is task i % tasks's), then --finalize again")
    for name in os.listdir(output):  # an older plan's shards past this one's
        match = re.fullmatch(r"shard_(\d{5,})\.(bin|idx|dochash|json)", name)
        if match and int(match.group(1)) >= len(pieces):
            stale = _read_record(output, int(match.group(1)))
            if stale is not None and stale.get("format") == FORMAT:
                _remove_file(os.path.join(output, name))
    manifest = {"config": same,
                "inputs": [{"path": os.path.abspath(p), "size": os.path.getsize(p),
                            "sha256": digests[n].hexdigest()} for n, p in enumerate(inputs)],
                "shards": shards}
    _write_json(os.path.join(output, "prepare.json"), manifest)
    return manifest


def _count(prefix: str) -> Tuple[int, int]:
    """(documents, tokens) of a shard, as the reader the streams use sees it (loader/indexed.h):
    a shard it refuses is refused here."""
    from . import _core
    shard = _core.IndexedDataset(prefix)
    return int(shard.documents), int(shard.total_tokens)


def _write_json(path: str, value: Dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def _size(text: str) -> int:
    """--shard-size: bytes, or with K, M, G (powers of 1024)."""
    match = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: bytes, or a number with K, M or G")
    return int(match.group(1)) << (10 * " KMG".index(match.group(2).upper() or " "))


def main(argv: Optional[Sequence[str]] = None) -> int:
    prog = os.environ.get("DISTSAMPLER_PREPARE_PROG") or "python -m distsampler.prepare"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Tokenize JSONL, Parquet or text files into Megatron .bin/.idx shards "
                    "for distsampler.tokens.TokenStream. Also `distsampler tokens prepare` "
                    "and `python -m distsampler.prepare`.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help=".jsonl/.json/.ndjson, .parquet, or .txt/.text/.md (one document); "
                             "each but .parquet also as .gz or .zst")
    parser.add_argument("--output", "-o", required=True, help="the shards' folder")
    parser.add_argument("--tokenizer", required=True, help="a tokenizers file (tokenizer.json)")
    parser.add_argument("--field", default="text", help="JSONL field or Parquet column (text)")
    parser.add_argument("--eod", help="the end-of-document token appended to each document: a "
                        "token of the vocabulary (<|endoftext|>) or an id; none by default")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--shard-size", type=_size, default=DEFAULT_SHARD_SIZE,
                        help="input bytes a shard (256M); a file is cut at record boundaries")
    parser.add_argument("--task", type=int, help="make only the shards i with i %% TASKS == "
                        "TASK (a SLURM array task's $SLURM_ARRAY_TASK_ID, a Ray task's index)")
    parser.add_argument("--tasks", type=int, help="the number of tasks")
    parser.add_argument("--finalize", action="store_true", help="after the tasks: check every "
                        "shard and write prepare.json")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    args = parser.parse_args(argv)
    try:
        manifest = prepare(args.inputs, args.output, args.tokenizer, field=args.field,
                           eod=args.eod, workers=args.workers, quiet=args.quiet,
                           shard_size=args.shard_size, task=args.task, tasks=args.tasks,
                           finalize=args.finalize)
    except PrepareError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    documents = sum(s["documents"] for s in manifest["shards"])
    tokens = sum(s["tokens"] for s in manifest["shards"])
    task = (f"task {manifest['task'][0]} of {manifest['task'][1]}: " if "task" in manifest
            else "")
    print(f"{task}{len(manifest['shards'])} shards, {documents} documents, {tokens} tokens "
          f"({manifest['config']['dtype']}) in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
