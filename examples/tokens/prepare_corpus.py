"""Writes three token sources from text Debian installs, in Megatron's indexed format (.bin/.idx)
with megatron-core's own IndexedDatasetBuilder, for examples/tokens/train_gpt.py:

  python    Python's standard library sources, Debian's (/usr/bin/python3's: /usr/lib/python3.11
            on Debian 12), one document per .py file
  copyright Debian's per-package copyright files (/usr/share/doc/*/copyright), one document per
            file, written as two shards (copyright_0, copyright_1) to exercise a sharded source
  fortunes  the fortunes of Debian's fortunes-min package (/usr/share/games/fortunes), one
            document per fortune

Byte-level tokens: each byte is its own token (0..255), and every document ends with the
end-of-document token 256 (what Megatron's preprocess_data.py --append-eod does), dtype uint16.
Files are taken in sorted path order until a source holds --max-bytes bytes of text, so the same
installed packages always give the same files, in seconds.

Usage (the PyTorch 2 venv, where megatron-core is installed: requirements/torch2.txt):
    .venv/bin/python examples/tokens/prepare_corpus.py OUT_DIR [--max-bytes 2000000]

Writes OUT_DIR/<name>.bin and .idx per source (shard) and OUT_DIR/corpus.json: each source's
prefixes (a list: its shards, in order, relative to OUT_DIR), documents, tokens and the files it
was read from. Beside them, one more shard that no source holds, for an edit to append
(train_gpt.py --append STEP:0=python_more): python_more, Python's next files after the python
source's, up to --extra-bytes; corpus.json lists it under "extra". The sources are the same with
or without it.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import warnings

import numpy as np

VOCAB = 257  # bytes 0..255 and the end-of-document token
EOD = 256
FORTUNES = "/usr/share/games/fortunes"  # Debian's fortunes-min (scripts/deps.sh)
DEBIAN_PYTHON = "/usr/bin/python3"


def python_documents():
    # Debian's (libpython3.X-stdlib): the interpreter running this may be another build (a
    # venv's base interpreter may be pyenv's), whose files differ.
    stdlib = subprocess.run([DEBIAN_PYTHON, "-c", "import sysconfig; "
                             "print(sysconfig.get_path('stdlib'))"], capture_output=True,
                            text=True, check=True).stdout.strip()
    for path in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if os.sep + "site-packages" + os.sep in path or os.sep + "dist-packages" + os.sep in path:
            continue
        with open(path, "rb") as f:
            yield path, f.read()


def copyright_documents():
    for path in sorted(glob.glob("/usr/share/doc/*/copyright")):
        if os.path.islink(os.path.dirname(path)) or os.path.islink(path):
            continue  # a package whose doc folder points at another's: the same text again
        with open(path, "rb") as f:
            yield path, f.read()


def fortune_documents():
    names = sorted(n for n in os.listdir(FORTUNES)
                   if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(FORTUNES, n)))
    if not names:
        raise SystemExit(f"error: no fortunes in {FORTUNES} (Debian package fortunes-min)")
    for name in names:
        path = os.path.join(FORTUNES, name)
        with open(path, "rb") as f:
            text = f.read()
        for i, fortune in enumerate(text.split(b"\n%\n")):  # strfile's separator
            fortune = fortune.strip(b"%\n")
            if fortune:
                yield f"{path}#{i}", fortune + b"\n"


SOURCES = [("python", python_documents, 1), ("copyright", copyright_documents, 2),
           ("fortunes", fortune_documents, 1)]
EXTRA = {"python": "python_more"}  # a source's next documents, written apart to be appended


def take(documents, max_bytes):
    """The documents, in order, until max_bytes bytes are taken (at least one)."""
    taken, size = [], 0
    for name, data in documents:
        if not data:
            continue
        if taken and size + len(data) > max_bytes:
            break
        taken.append((name, data))
        size += len(data)
    return taken


def write(prefix, documents):
    """One .bin/.idx pair by megatron-core's builder: one item, then end_document, per document."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # megatron-core warns that Apex/TE are missing
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    tokens = 0
    for _, data in documents:
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
        ids = np.append(ids, EOD)
        builder.add_item(torch.from_numpy(ids))
        builder.end_document()
        tokens += len(ids)
    builder.finalize(prefix + ".idx")
    return tokens


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--max-bytes", type=int, default=2_000_000,
                   help="text per source, at most (default 2,000,000)")
    p.add_argument("--extra-bytes", type=int, default=100_000,
                   help="text of python_more: Python's next files after the python source's, "
                   "for train_gpt.py's --append (default 100,000)")
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    corpus = {"vocab_size": VOCAB, "eod": EOD, "dtype": "uint16", "sources": []}
    for name, documents, shards in SOURCES:
        more = take(documents(), args.max_bytes + args.extra_bytes) if name in EXTRA else []
        docs = take(more or documents(), args.max_bytes)
        more = more[len(docs):]
        if more:  # take's cut is greedy, in order: the first len(docs) of `more` are docs
            tokens = write(os.path.join(args.out_dir, EXTRA[name]), more)
            corpus.setdefault("extra", []).append(
                {"name": EXTRA[name], "prefixes": [EXTRA[name]], "documents": len(more),
                 "tokens": tokens, "files": sorted({d for d, _ in more})})
        cut = [round(len(docs) * s / shards) for s in range(shards + 1)]
        prefixes, tokens = [], 0
        for s in range(shards):
            prefix = name if shards == 1 else f"{name}_{s}"
            tokens += write(os.path.join(args.out_dir, prefix), docs[cut[s]:cut[s + 1]])
            prefixes.append(prefix)
        corpus["sources"].append({"name": name, "prefixes": prefixes, "documents": len(docs),
                                  "tokens": tokens, "files": sorted({d.split("#")[0]
                                                                     for d, _ in docs})})
        print(f"{name}: {len(docs)} documents, {tokens} tokens, {len(prefixes)} shard(s)",
              flush=True)
    for extra in corpus.get("extra", []):
        print(f"{extra['name']} (extra, to append): {extra['documents']} documents, "
              f"{extra['tokens']} tokens", flush=True)
    with open(os.path.join(args.out_dir, "corpus.json"), "w") as f:
        json.dump(corpus, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
