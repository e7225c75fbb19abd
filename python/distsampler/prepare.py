"""Raw text to token sources: ``python -m distsampler.prepare``.

Reads JSONL (one JSON object a line, the text in ``--field``), Parquet (the column ``--field``)
and plain text files (a file is one document), tokenizes each document with a Hugging Face
``tokenizers`` file (``tokenizer.json``; never downloaded), appends the end-of-document token
(``--eod``), and writes Megatron's .bin/.idx shards, one per input file, in the order given:
OUT/shard_00000.bin/.idx, ... with the dtype megatron-core chooses for the vocabulary (uint16
below 65,500 ids, else int32), and OUT/prepare.json (the configuration, and per shard its input,
documents and tokens). docs/tokens.md, "Preparing data", shows a run.

- Parallel over processes (``--workers``), a shard per input file: every shard's bytes are the
  same for any worker count.
- Resumable: a shard is written under a temporary name and renamed when whole, .bin then .idx;
  a rerun into the same OUT with the same configuration keeps every shard whose .idx is there,
  untouched, and makes the others. A rerun with another configuration is refused.
- Bad input (a line that is not JSON, a missing or non-string field, bytes that are not UTF-8, an
  empty file) stops the run with one line naming the file and the line (or row); the shards
  already whole stay.
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .indexed import IndexedWriter, optimal_dtype

__all__ = ["prepare", "PrepareError"]

BATCH = 512  # documents per encode_batch call


class PrepareError(ValueError):
    """Bad input or configuration: one line, naming the file and the line or the parameter."""


def _texts(path: str, field: str) -> Iterator[Tuple[str, str]]:
    """(where, text) for each document of the file: where is "FILE:LINE" or "FILE: row N"."""
    suffix = path.lower().rsplit(".", 1)[-1] if "." in os.path.basename(path) else ""
    if suffix == "parquet":
        yield from _parquet_texts(path, field)
        return
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise PrepareError(f"{path}: an empty file (no documents)")
    if suffix in ("jsonl", "json", "ndjson"):
        count = 0
        for n, raw in enumerate(data.split(b"\n"), start=1):
            where = f"{path}:{n}"
            if not raw.strip():
                continue
            line = _utf8(raw, path, n)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise PrepareError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(record, dict) or field not in record:
                keys = ", ".join(sorted(record)) if isinstance(record, dict) else "none"
                raise PrepareError(f"{where}: no field '{field}' (fields: {keys})")
            if not isinstance(record[field], str):
                raise PrepareError(f"{where}: field '{field}' is {type(record[field]).__name__}, "
                                   "not a string")
            _check_text(record[field], where, field)
            count += 1
            yield where, record[field]
        if count == 0:
            raise PrepareError(f"{path}: an empty file (no documents)")
    elif suffix in ("txt", "text", "md"):
        yield f"{path}:1", _utf8(data, path, 1)
    else:
        raise PrepareError(f"{path}: the format of '.{suffix}' files is unknown; allowed: "
                           ".jsonl (.json, .ndjson), .parquet, .txt (.text, .md)")


def _check_text(text: str, where: str, field: str) -> None:
    """PrepareError for a string no UTF-8 can hold (a lone surrogate, which JSON's \\uD800
    escapes can spell)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PrepareError(f"{where}: field '{field}' holds a lone surrogate "
                           f"(U+{ord(text[e.start]):04X} at character {e.start + 1}); not "
                           "text") from None


def _utf8(raw: bytes, path: str, first_line: int) -> str:
    """raw decoded; PrepareError naming the file, line and column of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + raw.count(b"\n", 0, e.start)
        column = e.start - raw.rfind(b"\n", 0, e.start)
        raise PrepareError(f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x} at column "
                           f"{column})") from None


def _parquet_texts(path: str, field: str) -> Iterator[Tuple[str, str]]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise PrepareError(f"{path}: reading Parquet needs pyarrow") from None
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's errors name no type of their own
        raise PrepareError(f"{path}: not a Parquet file ({e})") from None
    if field not in table.schema_arrow.names:
        raise PrepareError(f"{path}: no column '{field}' (columns: "
                           f"{', '.join(table.schema_arrow.names)})")
    row = 0
    for batch in table.iter_batches(columns=[field]):
        for value in batch.column(0).to_pylist():
            row += 1
            if not isinstance(value, str):
                raise PrepareError(f"{path}: row {row}: column '{field}' is "
                                   f"{type(value).__name__}, not a string")
            yield f"{path}: row {row}", value
    if row == 0:
        raise PrepareError(f"{path}: an empty file (no rows)")


def _shard(out: str, i: int) -> str:
    return os.path.join(out, f"shard_{i:05d}")


def _complete(out: str, i: int) -> bool:
    return os.path.exists(_shard(out, i) + ".idx") and os.path.exists(_shard(out, i) + ".bin")


# Tokenizers loaded in this process (a worker's, or the main one's), by path.
_TOKENIZERS: Dict[str, Any] = {}


def _load_tokenizer(path: str) -> Any:
    if path not in _TOKENIZERS:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from tokenizers import Tokenizer
        _TOKENIZERS[path] = Tokenizer.from_file(path)
    return _TOKENIZERS[path]


def _make_shard(job: Tuple[str, str, int, Dict[str, Any]]) -> Tuple[int, int, int, Optional[str]]:
    """Writes shard i of `path`: (i, documents, tokens, error line or None)."""
    path, out, i, config = job
    tokenizer = _load_tokenizer(config["tokenizer"])
    eod = config["eod_id"]
    partial = os.path.join(out, f".partial-{os.getpid()}-shard_{i:05d}")
    writer = IndexedWriter(partial, config["dtype"])
    documents = tokens = 0
    try:
        batch: List[str] = []

        def flush() -> None:
            nonlocal documents, tokens
            for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
                if not encoding.ids:  # no sequence and no EOD: preprocess_data.py's rule
                    writer.add_empty_document()
                    continue
                ids = encoding.ids + ([eod] if eod is not None else [])
                writer.add_document(ids)
                documents += 1
                tokens += len(ids)
            batch.clear()

        for _, text in _texts(path, config["field"]):
            batch.append(text)
            if len(batch) == BATCH:
                flush()
        flush()
        writer.finish()
    except PrepareError as e:
        writer.close()
        _remove(partial)
        return i, 0, 0, str(e)
    except BaseException:
        writer.close()
        _remove(partial)
        raise
    os.replace(partial + ".bin", _shard(out, i) + ".bin")
    os.replace(partial + ".idx", _shard(out, i) + ".idx")  # last: the shard is whole
    return i, documents, tokens, None


def _remove(prefix: str) -> None:
    for ext in (".bin", ".idx"):
        try:
            os.remove(prefix + ext)
        except FileNotFoundError:
            pass


def _remove_partials(output: str) -> None:
    for name in os.listdir(output):
        if name.startswith(".partial-"):
            os.remove(os.path.join(output, name))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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

    def __init__(self, total: int, done: int, quiet: bool) -> None:
        self.total, self.done, self.tokens, self.quiet = total, done, 0, quiet
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


def prepare(inputs: Sequence[str], output: str, tokenizer: str, *, field: str = "text",
            eod: Optional[str] = None, workers: int = 1, quiet: bool = False) -> Dict[str, Any]:
    """Tokenizes `inputs` into shards in `output` (module docstring); returns prepare.json's
    content. Raises PrepareError for bad input or configuration."""
    if not inputs:
        raise PrepareError("inputs: none given; name at least one .jsonl, .parquet or .txt file")
    if workers < 1:
        raise PrepareError(f"--workers {workers}: must be at least 1")
    for path in inputs:
        if not os.path.isfile(path):
            raise PrepareError(f"{path}: no such file")
    if not os.path.isfile(tokenizer):
        raise PrepareError(f"--tokenizer {tokenizer}: no such file")
    try:
        loaded = _load_tokenizer(os.path.abspath(tokenizer))
    except Exception as e:  # tokenizers raises its own Exception type
        raise PrepareError(f"--tokenizer {tokenizer}: not a tokenizers file ({e})")
    vocab = loaded.get_vocab_size(with_added_tokens=True)
    dtype = optimal_dtype(vocab)
    config = {"tokenizer": os.path.abspath(tokenizer), "tokenizer_sha256": _sha256(tokenizer),
              "vocab_size": vocab, "dtype": dtype.__name__, "field": field, "eod": eod,
              "eod_id": _eod_id(loaded, eod), "inputs": [os.path.abspath(p) for p in inputs]}
    manifest_path = os.path.join(output, "prepare.json")
    try:
        os.makedirs(output, exist_ok=True)
        _remove_partials(output)  # a killed run's shards in the making
        probe = os.path.join(output, f".partial-{os.getpid()}-probe")
        open(probe, "wb").close()  # writable: found before any work, not after the first shard
        os.remove(probe)
    except OSError as e:
        raise PrepareError(f"--output {output}: {e.strerror or e}") from None
    same = {k: v for k, v in config.items() if k != "tokenizer"}
    if os.path.exists(manifest_path):
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
    else:
        _write_json(manifest_path, {"config": same, "shards": []})
    jobs = [(p, output, i, config) for i, p in enumerate(inputs) if not _complete(output, i)]
    progress = _Progress(len(inputs), len(inputs) - len(jobs), quiet)
    error = None
    if workers == 1 or len(jobs) <= 1:
        for job in jobs:
            _, _, tokens, error = _make_shard(job)
            if error:
                break
            progress.shard(tokens)
    else:
        with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
            for _, _, tokens, failed in pool.imap_unordered(_make_shard, jobs):
                if failed:
                    error = error or failed
                    pool.terminate()
                    break
                progress.shard(tokens)
    if error:
        _remove_partials(output)  # the other workers' shards, stopped mid-way
        raise PrepareError(error)
    shards = []
    for i, path in enumerate(inputs):
        prefix = _shard(output, i)
        documents, tokens = _count(prefix)
        shards.append({"input": os.path.abspath(path), "prefix": os.path.basename(prefix),
                       "documents": documents, "tokens": tokens})
    manifest = {"config": same, "shards": shards}
    _write_json(manifest_path, manifest)
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m distsampler.prepare",
        description="Tokenize JSONL, Parquet or text files into Megatron .bin/.idx shards "
                    "(one per input file) for distsampler.tokens.TokenStream.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help=".jsonl/.json/.ndjson, .parquet, or .txt/.text/.md (one document)")
    parser.add_argument("--output", "-o", required=True, help="the shards' folder")
    parser.add_argument("--tokenizer", required=True, help="a tokenizers file (tokenizer.json)")
    parser.add_argument("--field", default="text", help="JSONL field or Parquet column (text)")
    parser.add_argument("--eod", help="the end-of-document token appended to each document: a "
                        "token of the vocabulary (<|endoftext|>) or an id; none by default")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    args = parser.parse_args(argv)
    try:
        manifest = prepare(args.inputs, args.output, args.tokenizer, field=args.field,
                           eod=args.eod, workers=args.workers, quiet=args.quiet)
    except PrepareError as e:
        print(f"python -m distsampler.prepare: {e}", file=sys.stderr)
        return 2
    documents = sum(s["documents"] for s in manifest["shards"])
    tokens = sum(s["tokens"] for s in manifest["shards"])
    print(f"{len(manifest['shards'])} shards, {documents} documents, {tokens} tokens "
          f"({manifest['config']['dtype']}) in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
