"""python -m distsampler.prepare at corpus scale (issue 52): a file cut into shards at record
boundaries, the same bytes for any worker count and for tasks then --finalize; compressed and
Parquet inputs by piece; records that make a rerun redo exactly what changed; a killed main
process or worker leaving no process and no file behind; memory bounded whatever the file size.
The fixtures and helpers are test_prepare.py's."""
import gzip
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

from test_prepare import ENV, digest, run, text, tokenizer, tokenizers  # noqa: F401
from distsampler import _core  # noqa: E402
from distsampler.indexed import write_indexed  # noqa: E402


def corpus(path, count, seed=0, words=(1, 300)):
    rng = random.Random(seed)
    docs = [text(rng, rng.randint(*words)) for _ in range(count)]
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    return docs


def prepared(out, inputs, tokenizer, *args):
    code, stdout, stderr = run([*map(str, inputs), "-o", str(out), "--tokenizer", tokenizer,
                                "--eod", "<|endoftext|>", "--quiet", *args])
    assert code == 0, stderr
    return json.load(open(os.path.join(out, "prepare.json")))


def tokens_of(out, manifest):
    return b"".join(open(os.path.join(out, s["prefix"] + ".bin"), "rb").read()
                    for s in manifest["shards"])


def test_a_file_is_cut_at_record_boundaries_the_same_for_any_worker_count(tmp_path, tokenizer):
    docs = corpus(tmp_path / "big.jsonl", 1500)
    data = (tmp_path / "big.jsonl").read_bytes()
    one = prepared(tmp_path / "one", [tmp_path / "big.jsonl"], tokenizer, "--shard-size", "128K")
    two = prepared(tmp_path / "two", [tmp_path / "big.jsonl"], tokenizer, "--shard-size", "128K",
                   "--workers", "2")
    assert len(one["shards"]) == -(-len(data) // (128 << 10)) >= 5
    assert digest(tmp_path / "one") == digest(tmp_path / "two") and one == two
    starts = [s["range"][0] for s in one["shards"]]
    assert starts[0] == 0 and all(data[a - 1:a] == b"\n" for a in starts[1:])
    assert [s["range"][1] for s in one["shards"]] == starts[1:] + [len(data)]
    assert sum(s["documents"] for s in one["shards"]) == len(docs)
    # The shards in order hold the tokens of the uncut file's one shard.
    whole = prepared(tmp_path / "whole", [tmp_path / "big.jsonl"], tokenizer)
    assert len(whole["shards"]) == 1
    assert tokens_of(tmp_path / "one", one) == tokens_of(tmp_path / "whole", whole)
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    source = _core.IndexedSource([os.path.join(tmp_path / "one", s["prefix"])
                                  for s in one["shards"]])
    for d in (0, 1, len(docs) // 2, len(docs) - 1):
        assert source.read(d).tolist() == tok.encode(docs[d], add_special_tokens=False).ids + [eod]
    # Each document's digest of its text, in the reader's order: what provenance looks a text up by.
    hashes = b"".join(open(os.path.join(tmp_path / "one", s["prefix"] + ".dochash"), "rb").read()
                      for s in one["shards"])
    assert hashes == b"".join(hashlib.blake2b(d.encode(), digest_size=16).digest() for d in docs)


def test_an_error_in_a_later_piece_names_the_files_line(tmp_path, tokenizer):
    corpus(tmp_path / "bad.jsonl", 900)
    lines = (tmp_path / "bad.jsonl").read_bytes().split(b"\n")
    lines[800] = b'{"text": oops}'
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(lines))
    code, _, stderr = run([str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "out"),
                           "--tokenizer", tokenizer, "--shard-size", "64K", "--quiet"])
    assert code == 2 and "bad.jsonl:801: not JSON" in stderr and len(stderr.splitlines()) == 1, \
        stderr


def test_compressed_inputs_give_the_plain_files_shards(tmp_path, tokenizer):
    zstandard = pytest.importorskip("zstandard") if not os.environ.get(
        "DISTSAMPLER_REQUIRE_TRANSFORMERS") else __import__("zstandard")
    corpus(tmp_path / "c.jsonl", 300)
    raw = (tmp_path / "c.jsonl").read_bytes()
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(raw, mtime=0))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    plain = prepared(tmp_path / "plain", [tmp_path / "c.jsonl"], tokenizer)
    for name in ("c.jsonl.gz", "c.jsonl.zst"):
        out = tmp_path / name.replace(".", "_")
        packed = prepared(out, [tmp_path / name], tokenizer)
        for ext in (".bin", ".idx"):
            assert (out / ("shard_00000" + ext)).read_bytes() == \
                (tmp_path / "plain" / ("shard_00000" + ext)).read_bytes(), name
        assert packed["shards"][0]["documents"] == plain["shards"][0]["documents"] == 300
        made = os.stat(out / "shard_00000.bin").st_mtime_ns
        assert prepared(out, [tmp_path / name], tokenizer) == packed  # a rerun keeps it
        assert os.stat(out / "shard_00000.bin").st_mtime_ns == made
    (tmp_path / "broken.jsonl.gz").write_bytes(gzip.compress(raw)[:-100])
    code, _, stderr = run([str(tmp_path / "broken.jsonl.gz"), "-o", str(tmp_path / "b"),
                           "--tokenizer", tokenizer, "--quiet"])
    assert code == 2 and "broken.jsonl.gz: not a gzip file" in stderr, stderr
    assert len(stderr.splitlines()) == 1 and not [
        n for n in os.listdir(tmp_path / "b") if n.startswith(".partial-")]


def test_parquet_is_cut_between_row_groups(tmp_path, tokenizer):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rng = random.Random(3)
    docs = [text(rng, rng.randint(1, 200)) for _ in range(600)]
    pq.write_table(pyarrow.table({"text": docs}), str(tmp_path / "t.parquet"),
                   row_group_size=40)
    manifest = prepared(tmp_path / "out", [tmp_path / "t.parquet"], tokenizer,
                        "--shard-size", "48K", "--workers", "2")
    assert len(manifest["shards"]) >= 3
    assert [s["unit"] for s in manifest["shards"]] == ["row_groups"] * len(manifest["shards"])
    ranges = [s["range"] for s in manifest["shards"]]
    assert ranges[0][0] == 0 and ranges[-1][1] == 15 and all(
        a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    eod = tok.token_to_id("<|endoftext|>")
    want = b"".join(np.asarray(tok.encode(d, add_special_tokens=False).ids + [eod],
                               np.uint16).tobytes() for d in docs)
    assert tokens_of(tmp_path / "out", manifest) == want
    made = {n: os.stat(tmp_path / "out" / n).st_mtime_ns for n in os.listdir(tmp_path / "out")
            if n.startswith("shard_")}
    assert prepared(tmp_path / "out", [tmp_path / "t.parquet"], tokenizer, "--shard-size",
                    "48K") == manifest  # a rerun keeps every shard
    assert {n: os.stat(tmp_path / "out" / n).st_mtime_ns for n in made} == made


def test_shards_this_run_did_not_make_are_made_again(tmp_path, tokenizer):
    """Shards of the right names but no record (an older run's, another tool's) are not kept."""
    docs = corpus(tmp_path / "in.jsonl", 300)
    out = tmp_path / "out"
    out.mkdir()
    write_indexed(str(out / "shard_00000"), [[1, 2, 3]] * 2000)
    code, stdout, stderr = run([str(tmp_path / "in.jsonl"), "-o", str(out), "--tokenizer",
                                tokenizer, "--quiet"])
    assert code == 0, stderr
    assert f"1 shards, {len(docs)} documents" in stdout, stdout
    assert _core.IndexedDataset(str(out / "shard_00000")).documents == len(docs)
    assert json.load(open(out / "shard_00000.json"))["documents"] == len(docs)


def test_an_input_edited_in_place_remakes_its_shards_alone(tmp_path, tokenizer):
    corpus(tmp_path / "a.jsonl", 200, seed=1)
    corpus(tmp_path / "b.jsonl", 200, seed=2)
    inputs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    out = tmp_path / "out"
    before = prepared(out, inputs, tokenizer)
    times = {n: os.stat(out / n).st_mtime_ns for n in os.listdir(out) if n.startswith("shard_")}
    data = (tmp_path / "b.jsonl").read_bytes()
    at = data.index(b"rank")
    (tmp_path / "b.jsonl").write_bytes(data[:at] + b"seed" + data[at + 4:])  # the same size
    after = prepared(out, inputs, tokenizer)
    assert {n: os.stat(out / n).st_mtime_ns for n in times if n.startswith("shard_00000")} == \
        {n: t for n, t in times.items() if n.startswith("shard_00000")}
    assert os.stat(out / "shard_00001.bin").st_mtime_ns != times["shard_00001.bin"]
    assert before["inputs"][0] == after["inputs"][0]
    assert before["inputs"][1]["size"] == after["inputs"][1]["size"]
    assert before["inputs"][1]["sha256"] != after["inputs"][1]["sha256"]
    prepared(tmp_path / "fresh", inputs, tokenizer)
    assert digest(out) == digest(tmp_path / "fresh")
    assert (out / "prepare.json").read_bytes() == (tmp_path / "fresh" / "prepare.json").read_bytes()


def test_tasks_then_finalize_write_the_one_machine_bytes(tmp_path, tokenizer):
    corpus(tmp_path / "a.jsonl", 700, seed=4)
    corpus(tmp_path / "b.jsonl", 300, seed=5)
    inputs = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    reference = prepared(tmp_path / "one", inputs, tokenizer, "--shard-size", "96K")
    assert len(reference["shards"]) >= 6
    out = str(tmp_path / "tasks")
    common = [*inputs, "-o", out, "--tokenizer", tokenizer, "--eod", "<|endoftext|>", "--quiet",
              "--shard-size", "96K"]
    for task in (0, 2):
        code, stdout, stderr = run([*common, "--task", str(task), "--tasks", "3"])
        assert code == 0 and stdout.startswith(f"task {task} of 3: "), stderr
    assert not os.path.exists(os.path.join(out, "prepare.json"))
    code, _, stderr = run([*common, "--finalize"])
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert "shards 1, 4, 7, " in stderr and "then --finalize again" in stderr, stderr
    assert run([*common, "--task", "1", "--tasks", "3"])[0] == 0
    assert run([*common, "--finalize"])[0] == 0
    assert digest(out) == digest(tmp_path / "one")
    assert open(os.path.join(out, "prepare.json"), "rb").read() == \
        (tmp_path / "one" / "prepare.json").read_bytes()
    # --finalize again checks a finished folder: a byte changed in a shard is found.
    with open(os.path.join(out, "shard_00002.bin"), "r+b") as f:
        byte = f.read(1)
        f.seek(0)
        f.write(bytes([byte[0] ^ 1]))
    code, _, stderr = run([*common, "--finalize"])
    assert code == 2 and "shards 2 not as their records say" in stderr, stderr
    code, _, stderr = run([*common, "--task", "3", "--tasks", "3"])
    assert code == 2 and "--task 3 --tasks 3: allowed: 0 <= task < tasks" in stderr, stderr


def children(pid):
    """The processes `pid` started (all its threads')."""
    found = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(c) for c in f.read().split())
    except OSError:
        pass
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pids, seconds=20):
    """Whether every process of `pids` has ended within `seconds` (a dying one takes a moment
    to leave /proc)."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def started(tmp_path, tokenizer, out):
    """A 2-worker run of many shards, once both workers are making one: (process, workers)."""
    corpus(tmp_path / "many.jsonl", 3000, seed=6)
    args = [sys.executable, "-m", "distsampler.prepare", str(tmp_path / "many.jsonl"), "-o",
            str(out), "--tokenizer", tokenizer, "--eod", "<|endoftext|>", "--quiet",
            "--shard-size", "32K", "--workers", "2"]
    process = subprocess.Popen(args, env=ENV, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        partials = [n for n in os.listdir(out) if n.startswith(".partial-")] \
            if os.path.isdir(out) else []
        if len({n.split("-")[1] for n in partials}) >= 2 and any(
                n.startswith("shard_") for n in os.listdir(out)):
            break
        time.sleep(0.002)
    assert process.poll() is None, "the run ended before the kill"
    workers = {c for c in children(process.pid) if alive(c)}
    assert len(workers) >= 2, workers
    return process, workers, args


def test_a_killed_main_process_leaves_no_worker_and_the_rerun_is_whole(tmp_path, tokenizer):
    out = tmp_path / "out"
    process, workers, args = started(tmp_path, tokenizer, out)
    process.kill()
    process.wait()
    assert gone(workers), "workers outlived the main process"
    left = sorted(os.listdir(out))
    time.sleep(0.5)
    assert sorted(os.listdir(out)) == left  # no one writes any more
    reference = tmp_path / "reference"
    assert subprocess.run([*args[:5], str(reference), *args[6:]], env=ENV).returncode == 0
    assert subprocess.run(args, env=ENV, capture_output=True).returncode == 0
    assert digest(out) == digest(reference)
    assert not [n for n in os.listdir(out) if n.startswith(".partial-")]


def test_a_killed_worker_is_one_line_and_the_rerun_is_whole(tmp_path, tokenizer):
    out = tmp_path / "out"
    process, workers, args = started(tmp_path, tokenizer, out)
    victim = min(w for w in workers if "spawn_main" in open(f"/proc/{w}/cmdline").read())
    os.kill(victim, signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and len(stderr.splitlines()) == 1, stderr
    assert "a worker died (killed?) making shard" in stderr and "rerun to go on" in stderr
    assert gone(workers), "workers outlived the main process"
    assert not [n for n in os.listdir(out) if n.startswith(".partial-")]
    reference = tmp_path / "reference"
    assert subprocess.run([*args[:5], str(reference), *args[6:]], env=ENV).returncode == 0
    assert subprocess.run(args, env=ENV, capture_output=True).returncode == 0
    assert digest(out) == digest(reference)


# docs/tokens.md states it: a worker's peak memory beyond its start, whatever the file's size.
MEMORY_BOUND = 128 << 20


def peak_rss(args):
    """Peak resident bytes of `python -m distsampler.prepare ARGS`, with the exit status."""
    process = subprocess.Popen([sys.executable, "-m", "distsampler.prepare", *args], env=ENV,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, process.stderr.read()
    return usage.ru_maxrss * 1024


def test_memory_is_bounded_whatever_the_file_size(tmp_path, tokenizer):
    """A 1 GiB file (documents of a short text and 4 KB of another field) and a 1 MB one: the
    peak memory differs by less than the bound (the old reader held the file twice over)."""
    rng = random.Random(7)
    pad = "x" * 4000
    for name, size in (("small.jsonl", 1 << 20), ("large.jsonl", 1 << 30)):
        lines = [json.dumps({"text": text(rng, 12), "pad": pad}) + "\n" for _ in range(512)]
        block = "".join(lines).encode()
        with open(tmp_path / name, "wb") as f:
            for _ in range(size // len(block) + 1):
                f.write(block)
    common = ["--tokenizer", tokenizer, "--eod", "<|endoftext|>", "--quiet"]
    small = peak_rss([str(tmp_path / "small.jsonl"), "-o", str(tmp_path / "s"), *common])
    large = peak_rss([str(tmp_path / "large.jsonl"), "-o", str(tmp_path / "l"), *common])
    assert large - small < MEMORY_BOUND, (small, large)
    manifest = json.load(open(tmp_path / "l" / "prepare.json"))
    assert len(manifest["shards"]) == 5 and manifest["inputs"][0]["size"] > 1 << 30
