"""python -m distsampler.prepare (docs/tokens.md, "Preparing data"): JSONL, Parquet and text in,
a small BPE tokenizer trained here with `tokenizers` (never downloaded), Megatron shards out;
each document's tokens are the tokenizer's encoding plus the EOD token, read back by our reader
and by megatron-core's IndexedDataset; the bytes are the same for 1 and 4 workers; a run killed
mid-way and rerun gives the same bytes and leaves the shards it had finished untouched; bad input
gets one line naming the file and the line.

`tokenizers`, pyarrow and megatron-core are the torch 2 stack's (requirements/torch2.txt pins
them; DISTSAMPLER_REQUIRE_TRANSFORMERS=1 and DISTSAMPLER_REQUIRE_MEGATRON=1 make their absence a
failure there); on Debian's stack these tests skip, saying why.
"""
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from stack import required

tokenizers = required("tokenizers", "DISTSAMPLER_REQUIRE_TRANSFORMERS")
from distsampler import _core  # noqa: E402
from distsampler.prepare import main as prepare_main  # noqa: E402

WORDS = ("data parallel rank epoch shuffle sampler token stream batch world size seed order "
         "loader worker checkpoint resume document source weight packing sequence attention "
         "über naïve café 数据 并行 🙂").split()


def text(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words)) + rng.choice([".", "!\n", "?"])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A byte-level BPE of 400 ids with <|endoftext|>, trained on the words above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(0)
    tok.train_from_iterator([text(rng, 30) for _ in range(300)], trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Eight input files (JSONL, a text file, Parquet where pyarrow is) and their documents."""
    root, rng = tmp_path_factory.mktemp("raw"), random.Random(1)
    files, documents = [], []
    for i in range(6):
        docs = [text(rng, rng.randint(1, 400)) for _ in range(rng.randint(20, 60))]
        path = root / f"part{i}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": rng.random(), "text": d}, ensure_ascii=i % 2 == 0) + "\n")
        files.append(str(path))
        documents.append(docs)
    doc = text(rng, 700)
    (root / "book.txt").write_text(doc, encoding="utf-8")
    files.append(str(root / "book.txt"))
    documents.append([doc])
    pyarrow = required("pyarrow", "DISTSAMPLER_REQUIRE_TRANSFORMERS")
    import pyarrow.parquet as pq
    docs = [text(rng, rng.randint(1, 200)) for _ in range(50)]
    pq.write_table(pyarrow.table({"text": docs, "n": list(range(50))}), str(root / "t.parquet"),
                   row_group_size=16)
    files.append(str(root / "t.parquet"))
    documents.append(docs)
    return files, documents


# The package under test, for the subprocesses: where this process imported it from.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    [os.path.dirname(os.path.dirname(_core.__file__))] +
    [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


def run(args):
    """python -m distsampler.prepare ARGS in a subprocess: (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-m", "distsampler.prepare", *args], text=True,
                       capture_output=True, timeout=600, env=ENV)
    return r.returncode, r.stdout, r.stderr


def digest(folder):
    out = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.startswith("shard_"):
            with open(os.path.join(folder, name), "rb") as f:
                out.update(name.encode() + f.read())
    return out.hexdigest()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tokenizer, inputs):
    out = str(tmp_path_factory.mktemp("out") / "one")
    code, stdout, stderr = run([*inputs[0], "-o", out, "--tokenizer", tokenizer,
                                "--eod", "<|endoftext|>", "--workers", "1"])
    assert code == 0, stderr
    return out, stdout, stderr


def test_each_document_is_the_tokenizers_encoding_and_the_eod(prepared, tokenizer, inputs):
    out, stdout, stderr = prepared
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    manifest = json.load(open(os.path.join(out, "prepare.json")))
    assert manifest["config"]["dtype"] == "uint16" and manifest["config"]["eod_id"] == eod
    total = 0
    for i, docs in enumerate(inputs[1]):
        source = _core.IndexedSource([os.path.join(out, f"shard_{i:05d}")])
        assert source.documents == len(docs) == manifest["shards"][i]["documents"]
        for d, doc in enumerate(docs):
            want = tok.encode(doc, add_special_tokens=False).ids + [eod]
            assert source.read(d).tolist() == want
            total += len(want)
        with open(os.path.join(out, f"shard_{i:05d}.idx"), "rb") as f:
            assert f.read(18)[-1] == 8  # megatron's dtype code of uint16
    assert f"{len(inputs[0])} shards, {sum(map(len, inputs[1]))} documents, {total} tokens" \
        in stdout
    assert f"{len(inputs[0])}/{len(inputs[0])} shards" in stderr  # the progress line


def test_a_text_is_found_by_its_dochash_and_its_steps_by_where(prepared, tokenizer, inputs,
                                                                cli, cli_path, tmp_path):
    """The .dochash beside each shard finds a document by its text (TokenStream.find_text,
    `tokens where --text`): the document whose tokens are that text's encoding, and the steps
    it was read at (docs/tokens.md, "At which steps a document was seen")."""
    from distsampler.tokens import TokenStream
    out = prepared[0]
    shards = [os.path.join(out, f"shard_{i:05d}") for i in range(len(inputs[0]))]
    s = TokenStream([(shards[:3], 1.0), (shards[3:], 2.0)], seq_len=63, global_batch=4)
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    text = inputs[1][4][7]  # the 8th document of the 5th input: source 1, its 2nd shard
    found = s.find_text(text)
    assert found == [(1, len(inputs[1][3]) + 7)]
    source = _core.IndexedSource(shards[3:])
    assert source.read(found[0][1]).tolist() == tok.encode(text, add_special_tokens=False).ids + [eod]
    seen = s.where(*found[0], until=200)
    assert seen and all(x["source"] == 1 and x["document"] == found[0][1] for x in seen)
    (tmp_path / "text.txt").write_bytes(text.encode("utf-8"))
    flags = ["--seq-len", 63, "--global-batch", 4, "--source", ",".join(shards[:3]) + ":1",
             "--source", ",".join(shards[3:]) + ":2"]
    got = json.loads(cli("tokens", "where", *flags, "--text", tmp_path / "text.txt", "--until",
                         200, "--format", "json").stdout)
    assert got["text_matches"] == [{"source": 1, "document": found[0][1]}]
    assert got["documents"][0]["sightings"] == seen
    # The step's text, by the CLI (distsampler.explain_text on this Python) as by Python.
    step = seen[0]["step"]
    env = dict(ENV, DISTSAMPLER_PYTHON=sys.executable)
    shown = subprocess.run([cli_path, "tokens", "explain", *map(str, flags), "--step", str(step),
                            "--tokenizer", tokenizer], capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    explained = s.explain(step, world_size=1, tokenizer=tokenizer)
    assert json.loads(shown.stdout) == explained
    assert text[:20] in "".join(x["text"] for r in explained["rows"] for x in r["spans"])


def test_megatron_reads_the_shards(prepared, tokenizer, inputs):
    indexed = required("megatron.core.datasets.indexed_dataset", "DISTSAMPLER_REQUIRE_MEGATRON")
    out = prepared[0]
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    for i, docs in enumerate(inputs[1]):
        dataset = indexed.IndexedDataset(os.path.join(out, f"shard_{i:05d}"))
        assert len(dataset) == len(docs)
        for d in (0, len(docs) - 1):
            want = tok.encode(docs[d], add_special_tokens=False).ids + [eod]
            assert dataset[d].tolist() == want and dataset[d].dtype == np.uint16


def test_four_workers_write_the_same_bytes(prepared, tmp_path, tokenizer, inputs):
    out = str(tmp_path / "four")
    code, _, stderr = run([*inputs[0], "-o", out, "--tokenizer", tokenizer,
                           "--eod", "<|endoftext|>", "--workers", "4", "--quiet"])
    assert code == 0, stderr
    assert digest(out) == digest(prepared[0])
    assert stderr == ""


def test_a_killed_run_resumes_to_the_same_bytes_leaving_whole_shards_untouched(
        prepared, tmp_path, tokenizer, inputs):
    # Many inputs, so that a kill after the first shard finds most of them not yet written.
    many = inputs[0] * 12
    reference = str(tmp_path / "reference")
    assert run([*many, "-o", reference, "--tokenizer", tokenizer, "--eod", "<|endoftext|>",
                "--quiet"])[0] == 0
    out = str(tmp_path / "killed")
    process = subprocess.Popen([sys.executable, "-m", "distsampler.prepare", *many, "-o", out,
                                "--tokenizer", tokenizer, "--eod", "<|endoftext|>", "--quiet"],
                               env=ENV)
    first = os.path.join(out, "shard_00000.json")  # a shard's record is written last
    deadline = time.monotonic() + 300
    while not os.path.exists(first) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    whole = sorted(n for n in os.listdir(out) if n.startswith("shard_") and n.endswith(".json"))
    assert 1 <= len(whole) < len(many), "the kill came too late to leave shards unwritten"
    before = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)
              if n.startswith("shard_") and os.path.exists(os.path.join(out, n[:11] + ".json"))}
    code, _, stderr = run([*many, "-o", out, "--tokenizer", tokenizer, "--eod", "<|endoftext|>",
                           "--workers", "2", "--quiet"])
    assert code == 0, stderr
    assert digest(out) == digest(reference)
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in before} == before
    assert not [n for n in os.listdir(out) if n.startswith(".partial-")]
    # Another configuration into the same folder is refused, naming what differs.
    code, _, stderr = run([*many, "-o", out, "--tokenizer", tokenizer, "--quiet"])
    assert code == 2 and "eod, eod_id differ" in stderr and len(stderr.splitlines()) == 1


BAD = [
    ("missing.jsonl", b'{"text": "fine"}\n{"body": "no text"}\n', "missing.jsonl:2: no field "
     "'text' (fields: body)"),
    ("notjson.jsonl", b'{"text": "fine"}\n\n{"text": oops}\n', "notjson.jsonl:3: not JSON"),
    ("number.jsonl", b'{"text": 7}\n', "number.jsonl:1: field 'text' is int, not a string"),
    ("latin1.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', "latin1.jsonl:2: not UTF-8 "
     "(byte 0xe9 at column 14)"),
    ("latin1.txt", b"line one\nline \xff two\n", "latin1.txt:2: not UTF-8 (byte 0xff at column 6)"),
    ("empty.jsonl", b"\n\n", "empty.jsonl: an empty file (no documents)"),
    ("empty.txt", b"", "empty.txt: an empty file (no documents)"),
    ("data.csv", b"text\nhello\n", "data.csv: the format of '.csv' files is unknown"),
]


@pytest.mark.parametrize("name,content,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_naming_the_file_and_line(tmp_path, tokenizer, inputs, name,
                                                        content, message):
    bad = tmp_path / name
    bad.write_bytes(content)
    out = str(tmp_path / "out")
    code, stdout, stderr = run([inputs[0][0], str(bad), "-o", out, "--tokenizer", tokenizer,
                                "--workers", "2", "--quiet"])
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("python -m distsampler.prepare: ") and message in stderr, stderr
    left = os.listdir(out) if os.path.isdir(out) else []  # a format is checked before any work
    assert not [n for n in left if n.startswith(".partial-") or "00001" in n]


def test_bad_options_are_refused_naming_them(tmp_path, tokenizer, inputs):
    out = str(tmp_path / "out")
    for args, message in [
            (["--eod", "<|nope|>"], "--eod <|nope|>: neither a token of the tokenizer's "
             "vocabulary nor an id below its size 400"),
            (["--workers", "0"], "--workers 0: must be at least 1"),
            (["--tokenizer", str(tmp_path / "none.json")], "none.json: no such file")]:
        argv = [inputs[0][0], "-o", out, "--tokenizer", tokenizer, *args]
        code, _, stderr = run(argv)
        assert code == 2 and message in stderr and len(stderr.splitlines()) == 1, stderr
    assert prepare_main([str(tmp_path / "absent.jsonl"), "-o", out, "--tokenizer",
                         tokenizer]) == 2


def test_an_eod_in_digits_is_the_id_not_the_token_spelled_so(tmp_path, tokenizer, inputs):
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    assert tok.token_to_id("0") not in (None, 0)  # "0" is a token too: the test can tell
    out = str(tmp_path / "out")
    code, _, stderr = run([inputs[0][0], "-o", out, "--tokenizer", tokenizer, "--eod", "0",
                           "--quiet"])
    assert code == 0, stderr
    assert json.load(open(os.path.join(out, "prepare.json")))["config"]["eod_id"] == 0
    shard = _core.IndexedDataset(os.path.join(out, "shard_00000"))
    assert all(shard.read(d)[-1] == 0 for d in range(shard.documents))
    code, _, stderr = run([inputs[0][0], "-o", str(tmp_path / "big"), "--tokenizer", tokenizer,
                           "--eod", "400"])
    assert code == 2 and "--eod 400: an id, below the vocabulary's size 400" in stderr, stderr


def test_an_empty_text_is_a_document_without_a_sequence_as_megatrons_tool_writes(tmp_path,
                                                                                  tokenizer):
    """Megatron-LM's tools/preprocess_data.py gives an empty text no sequence and no EOD, and
    its builder's add_document still ends a document: our bytes are its bytes."""
    texts = ["data parallel", "", "rank epoch", "", ""]
    raw = tmp_path / "empty_texts.jsonl"
    raw.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = str(tmp_path / "out")
    code, stdout, stderr = run([str(raw), "-o", out, "--tokenizer", tokenizer, "--eod",
                                "<|endoftext|>", "--quiet"])
    assert code == 0, stderr
    assert "1 shards, 2 documents" in stdout, stdout
    shard = os.path.join(out, "shard_00000")
    with open(shard + ".idx", "rb") as f:
        header = f.read(34)
    assert np.frombuffer(header[18:34], "<u8").tolist() == [2, 6]  # sequences, document indices
    indexed = required("megatron.core.datasets.indexed_dataset", "DISTSAMPLER_REQUIRE_MEGATRON")
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    reference = str(tmp_path / "megatron")
    builder = indexed.IndexedDatasetBuilder(reference + ".bin", dtype=np.uint16)
    for t in texts:  # preprocess_data.py's Encoder.encode, then builder.add_document
        ids = tok.encode(t, add_special_tokens=False).ids
        builder.add_document(ids + [eod] if ids else [], [len(ids) + 1] if ids else [])
    builder.finalize(reference + ".idx")
    for ext in (".bin", ".idx"):
        assert open(shard + ext, "rb").read() == open(reference + ext, "rb").read(), ext


def test_an_output_or_manifest_it_cannot_use_is_one_line(tmp_path, tokenizer, inputs):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "prepare.json").write_text("{not json")
    surrogate = tmp_path / "surrogate.jsonl"
    surrogate.write_text('{"text": "fine"}\n{"text": "a\\ud800b"}\n', encoding="utf-8")
    for args, message in [
            ([inputs[0][0], "-o", str(a_file / "out")], f"--output {a_file / 'out'}: Not a "
             "directory"),
            ([inputs[0][0], "-o", "/sys/distsampler-prepare-test"],
             "--output /sys/distsampler-prepare-test: Operation not permitted"),
            ([inputs[0][0], "-o", str(corrupt)], f"{corrupt / 'prepare.json'}: not a prepare.json"),
            ([str(surrogate), "-o", str(tmp_path / "s")], "surrogate.jsonl:2: field 'text' holds "
             "a lone surrogate (U+D800 at character 2)")]:
        code, _, stderr = run([*args, "--tokenizer", tokenizer, "--quiet"])
        assert code == 2 and len(stderr.splitlines()) == 1 and message in stderr, stderr
