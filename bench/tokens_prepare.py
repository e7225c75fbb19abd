#!/usr/bin/env python3
"""Raw text to Megatron shards: `python -m distsampler.prepare` against Megatron-LM's
tools/preprocess_data.py and datatrove's DocumentTokenizer, on the same input and tokenizer, the
outputs checked token for token. Run with an interpreter that has all three (scripts/bench.sh
makes .venv-prepare from requirements/prepare-bench.txt):

    PYTHONPATH=build/python .venv-prepare/bin/python bench/tokens_prepare.py \
        --megatron-lm DIR [--write docs/benchmarks.md]

DIR: Megatron-LM's source at the tag of the pinned megatron-core (core_v0.16.1), fetched locally
and never committed (`git clone` the repository and `git checkout core_v0.16.1`); its
tools/preprocess_data.py runs with DIR first on PYTHONPATH.

The input: the Python standard library's .py files of the running interpreter (real text, about
30 MB; empty files left out, since Megatron drops empty documents), each file a document, dealt
round-robin into 4 JSONL files of {"text": ...}. The tokenizer: a byte-level BPE of 16,000 ids
with <|endoftext|>, trained here with `tokenizers` on the first 2 MB; every tool appends
<|endoftext|> to each document. Each tool runs once with 2 worker processes (this machine's cores),
timed as a command (its interpreter's start included):
- ours: the 4 files, --workers 2 (a shard per file);
- Megatron: the 4 files concatenated into one (its tool reads one input; --partitions would split
  and merge it again), --workers 2, --append-eod, HuggingFaceTokenizer over a folder with the
  tokenizer.json;
- datatrove: JsonlReader + DocumentTokenizer (shuffle_documents=False, eos_token) under
  LocalPipelineExecutor with 4 tasks on 2 workers.
Every document's tokens from the three outputs are compared with each other and with
`tokenizer.encode(text, add_special_tokens=False).ids + [eod]`; a difference fails the script.
Startup is measured apart: each tool on a one-document input.

--write replaces the text between this section's markers in the file, or appends the section.
"""
import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokens import replace_between  # noqa: E402 (bench/tokens.py's helper)

BEGIN = "<!-- bench/tokens_prepare.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_prepare.py: end -->"
HEADING = "## Preparing data: raw text to Megatron shards, against Megatron-LM and datatrove"
FILES, WORKERS, VOCAB, EOD = 4, 2, 16000, "<|endoftext|>"


def documents(limit=None):
    """The standard library's non-empty .py files, sorted by path, as texts (up to `limit`
    characters in all)."""
    root = sysconfig.get_paths()["stdlib"]
    out, size = [], 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "dist-packages"))
        for name in sorted(names):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    raw = f.read()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue  # a few test files hold other encodings on purpose
                if text.strip():
                    out.append(text)
                    size += len(text)
                    if limit and size >= limit:
                        return out
    return out


def write_inputs(scratch, docs):
    paths = [os.path.join(scratch, f"part{i}.jsonl") for i in range(FILES)]
    parts = [docs[i::FILES] for i in range(FILES)]
    for path, part in zip(paths, parts):
        with open(path, "w", encoding="utf-8") as f:
            for text in part:
                f.write(json.dumps({"text": text}) + "\n")
    with open(os.path.join(scratch, "all.jsonl"), "w", encoding="utf-8") as out:
        for path in paths:
            with open(path, encoding="utf-8") as f:
                out.write(f.read())
    one = os.path.join(scratch, "one", "one.jsonl")
    os.makedirs(os.path.dirname(one))
    with open(one, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": docs[0]}) + "\n")
    return paths, parts, one


def train_tokenizer(scratch, docs):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    sample, size = [], 0
    for text in docs:
        sample.append(text)
        size += len(text)
        if size > 2_000_000:
            break
    tok.train_from_iterator(sample, trainer)
    folder = os.path.join(scratch, "tokenizer")
    os.makedirs(folder)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOD}, f)
    return folder, tok


def timed(command, env=None):
    start = time.perf_counter()
    r = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"{command[:3]} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return seconds


def run_ours(inputs, out, tokenizer):
    return timed([sys.executable, "-m", "distsampler.prepare", *inputs, "-o", out, "--tokenizer",
                  os.path.join(tokenizer, "tokenizer.json"), "--eod", EOD, "--workers",
                  str(WORKERS), "--quiet"])


def run_megatron(megatron_lm, single, prefix, tokenizer):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [megatron_lm] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return timed([sys.executable, os.path.join(megatron_lm, "tools", "preprocess_data.py"),
                  "--input", single, "--output-prefix", prefix, "--tokenizer-type",
                  "HuggingFaceTokenizer", "--tokenizer-model", tokenizer, "--append-eod",
                  "--workers", str(WORKERS), "--log-interval", "100000000"], env)


DATATROVE = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
folder, glob, out, tokenizer, eod, tasks, workers, logs = sys.argv[1:]
LocalPipelineExecutor(
    pipeline=[JsonlReader(folder, glob_pattern=glob),
              DocumentTokenizer(output_folder=out, tokenizer_name_or_path=tokenizer,
                                eos_token=eod, shuffle_documents=False)],
    tasks=int(tasks), workers=int(workers), logging_dir=logs).run()
"""


def run_datatrove(folder, glob, out, tokenizer, tasks, logs):
    return timed([sys.executable, "-c", DATATROVE, folder, glob, out,
                  os.path.join(tokenizer, "tokenizer.json"), EOD, str(tasks), str(WORKERS),
                  logs], dict(os.environ, HF_HUB_OFFLINE="1"))


def read_indexed(prefixes):
    from distsampler import _core
    source = _core.IndexedSource(prefixes)
    return [source.read(d) for d in range(source.documents)]


def read_datatrove(out, tasks):
    docs = []
    for rank in range(tasks):
        path = os.path.join(out, f"{rank:05d}_unshuffled.ds")
        tokens = np.fromfile(path, dtype=np.uint16)
        ends = np.fromfile(path + ".index", dtype=np.uint64)
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        docs += [tokens[a:b] for a, b in zip(starts, ends.astype(np.int64))]
    return docs


def measure(args):
    from tokenizers import Tokenizer
    docs = documents(int(args.max_mb * 1e6) if args.max_mb else None)
    with tempfile.TemporaryDirectory() as scratch:
        inputs, parts, one = write_inputs(scratch, docs)
        tokenizer, _ = train_tokenizer(scratch, docs)
        tok = Tokenizer.from_file(os.path.join(tokenizer, "tokenizer.json"))
        eod = tok.token_to_id(EOD)
        order = [text for part in parts for text in part]  # the files' documents, file by file
        want = [e.ids + [eod] for e in tok.encode_batch(order, add_special_tokens=False)]
        tokens = sum(map(len, want))
        seconds = {
            "ours": run_ours(inputs, os.path.join(scratch, "ours"), tokenizer),
            "megatron": run_megatron(args.megatron_lm, os.path.join(scratch, "all.jsonl"),
                                     os.path.join(scratch, "meg"), tokenizer),
            "datatrove": run_datatrove(scratch, "part*.jsonl", os.path.join(scratch, "dt"),
                                       tokenizer, FILES, os.path.join(scratch, "dt-logs")),
        }
        outputs = {
            "ours": read_indexed([os.path.join(scratch, "ours", f"shard_{i:05d}")
                                  for i in range(FILES)]),
            "megatron": read_indexed([os.path.join(scratch, "meg_text_document")]),
            "datatrove": read_datatrove(os.path.join(scratch, "dt"), FILES),
        }
        for name, got in outputs.items():
            if len(got) != len(want):
                sys.exit(f"{name}: {len(got)} documents, the input has {len(want)}")
            for d, (a, b) in enumerate(zip(got, want)):
                if a.tolist() != b:
                    sys.exit(f"{name}: document {d} differs from the tokenizer's encoding + EOD")
        startup = {
            "ours": run_ours([one], os.path.join(scratch, "ours1"), tokenizer),
            "megatron": run_megatron(args.megatron_lm, one, os.path.join(scratch, "meg1"),
                                     tokenizer),
            "datatrove": run_datatrove(os.path.dirname(one), "one.jsonl",
                                       os.path.join(scratch, "dt1"), tokenizer, 1,
                                       os.path.join(scratch, "dt1-logs")),
        }
        size = sum(os.path.getsize(p) for p in inputs)
    return {"documents": len(want), "tokens": tokens, "bytes": size, "seconds": seconds,
            "startup": startup}


def versions():
    from importlib.metadata import version
    return {name: version(name) for name in ("megatron-core", "datatrove", "tokenizers")}


def write_section(emit, m, v):
    emit(BEGIN)
    emit()
    emit(f"Measured by `bench/tokens_prepare.py` (scripts/bench.sh: `PYTHONPATH=build/python "
         f".venv-prepare/bin/python bench/tokens_prepare.py --megatron-lm DIR --write "
         f"docs/benchmarks.md`), {time.strftime('%Y-%m-%d')}, on {os.cpu_count()} cores. The "
         f"input: {m['documents']:,} documents (the Python standard library's .py files, "
         f"{m['bytes'] / 1e6:.1f} MB of JSONL in {FILES} files); a byte-level BPE of {VOCAB:,} "
         f"ids trained here; {m['tokens']:,} tokens with the EOD appended to each document. "
         f"Every tool's output equals `tokenizer.encode(text, add_special_tokens=False).ids + "
         f"[eod]` for every document, checked token for token. Each tool ran once, with "
         f"{WORKERS} worker processes, timed as a command: tokens written per second of the "
         f"whole command, and its startup alone (the same command on one document).")
    emit()
    emit("| tool | seconds | tokens/s | vs ours | startup (s) |")
    emit("|---|---|---|---|---|")
    ours = m["tokens"] / m["seconds"]["ours"]
    names = {"ours": "`python -m distsampler.prepare`",
             "megatron": f"Megatron-LM `tools/preprocess_data.py` (core {v['megatron-core']})",
             "datatrove": f"datatrove {v['datatrove']} `DocumentTokenizer`"}
    for key in ("ours", "megatron", "datatrove"):
        rate = m["tokens"] / m["seconds"][key]
        emit(f"| {names[key]} | {m['seconds'][key]:.1f} | {rate:,.0f} | {rate / ours:.2f} | "
             f"{m['startup'][key]:.1f} |")
    emit()
    emit(f"All three call the same Rust tokenizer (tokenizers {v['tokenizers']}); the "
         "differences are in what surrounds it: interpreter and library imports (Megatron's "
         "imports torch and megatron.training), how documents reach the workers, and how tokens "
         "are written.")
    emit()
    emit(END)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-lm", required=True,
                        help="Megatron-LM's source at core_v0.16.1 (tools/preprocess_data.py)")
    parser.add_argument("--write", help="replace (or append) the section in this file")
    parser.add_argument("--max-mb", type=float,
                        help="a quick run on the first MB of the input (not for --write)")
    args = parser.parse_args()
    if args.max_mb and args.write:
        parser.error("--max-mb is a quick check: its numbers are not written")
    if not os.path.isfile(os.path.join(args.megatron_lm, "tools", "preprocess_data.py")):
        parser.error(f"--megatron-lm {args.megatron_lm}: no tools/preprocess_data.py there")
    lines = []

    def emit(text=""):
        print(text, flush=True)
        lines.append(text)

    write_section(emit, measure(args), versions())
    if args.write:
        replace_between(args.write, "\n".join(lines), BEGIN, END, HEADING)
        print(f"wrote the preparing-data section of {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
