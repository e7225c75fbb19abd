"""The corpus and the checks of preparing data as a cluster's tasks (docs/tokens.md, "On SLURM
and Ray"): tests/slurm/prepare.sh (an sbatch array) and tests/frameworks/ray_prepare.py (Ray
tasks) each make the shards as 3 tasks (`--task I --tasks 3`), one task SIGKILLed mid-shard and
rerun by the engine, then --finalize; the result must be the one-machine run's, byte for byte.

  corpus DIR            DIR/raw/: three JSONL files and a .jsonl.gz, deterministic, 570 KB of
                        JSONL (11 shards of 64 KiB), DIR/tokenizer.json (a byte-level BPE of 400
                        ids with <|endoftext|>, trained here), DIR/inputs (the inputs' paths, a
                        line each), DIR/documents (how many)
  reference DIR         the one-machine run (--workers 1) into DIR/reference
  wait-partial OUT I N PID SECONDS
                        waits for a .partial-shard file of one of task I's shards in OUT (i % N
                        == I), then SIGKILLs PID; exit 0 when the kill left that file (the kill
                        came mid-shard), 1 otherwise (PID ended first, or SECONDS passed)
  check DIR OUT         OUT against DIR/reference, every shard_* file and prepare.json byte for
                        byte, no .partial- file, every document of the corpus once
"""
import gzip
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

SHARD_SIZE, SHARD_BYTES, EOD = "64K", 64 << 10, "<|endoftext|>"
WORDS = ("data parallel rank epoch shuffle sampler token stream batch world size seed order "
         "loader worker checkpoint resume document source weight packing sequence attention "
         "über naïve café 数据 并行 🙂").split()
# (name, documents): 290, 190 and 100 KB of JSONL (5, 3 and 2 shards), and a compressed file.
FILES = (("web.jsonl", 1000), ("books.jsonl", 650), ("code.jsonl", 350), ("news.jsonl.gz", 200))


def text(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words)) + rng.choice([".", "!\n", "?"])


def options(root):
    """The options after the inputs, the same for every run (tests/slurm/prepare.sh spells
    them out)."""
    return ["--tokenizer", os.path.join(root, "tokenizer.json"), "--eod", EOD,
            "--shard-size", SHARD_SIZE]


def inputs(root):
    with open(os.path.join(root, "inputs")) as f:
        return f.read().split()


def corpus(root):
    """The inputs, the tokenizer and DIR/inputs (module docstring)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    rng = random.Random(52)
    raw = os.path.join(root, "raw")
    os.makedirs(raw, exist_ok=True)
    paths, documents = [], 0
    for name, count in FILES:
        lines = "".join(json.dumps({"id": f"{name}/{k}", "text": text(rng, rng.randint(5, 60))},
                                   ensure_ascii=k % 2 == 0) + "\n" for k in range(count))
        path = os.path.join(raw, name)
        data = lines.encode("utf-8")
        with open(path, "wb") as f:
            f.write(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        paths.append(path)
        documents += count
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=[EOD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text(rng, 30) for _ in range(300)], trainer)
    tok.save(os.path.join(root, "tokenizer.json"))
    with open(os.path.join(root, "inputs"), "w") as f:
        f.write("".join(p + "\n" for p in paths))
    with open(os.path.join(root, "documents"), "w") as f:
        f.write(f"{documents}\n")
    return paths


def reference(root, python=sys.executable, env=None):
    """The one-machine run into DIR/reference; its output line."""
    out = os.path.join(root, "reference")
    done = subprocess.run([python, "-m", "distsampler.prepare", *inputs(root), "-o", out,
                           *options(root), "--workers", "1", "--quiet"], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if done.returncode != 0:
        sys.exit(f"the one-machine run: exit status {done.returncode}: {done.stdout}")
    return done.stdout.strip()


PARTIAL = re.compile(r"\.partial-shard_(\d+)-\d+\.bin")


def own_partials(out, task, tasks):
    """Task `task`'s shards in the making in OUT (their .partial-shard_*.bin names)."""
    try:
        names = os.listdir(out)
    except FileNotFoundError:
        return []
    return [n for n in names if (m := PARTIAL.fullmatch(n)) and int(m.group(1)) % tasks == task]


def wait_partial(out, task, tasks, pid, seconds):
    """Polls (every 1 ms, at most `seconds`) for one of task's .partial files, then SIGKILLs
    `pid`: whether the file was still there after the kill (so the kill came mid-shard)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = own_partials(out, task, tasks)
        if found:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)  # the process is gone: its files are what it left
            left = own_partials(out, task, tasks)
            print(f"killed {pid} making {', '.join(found)}; left {', '.join(left) or 'nothing'}")
            return bool(left)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.001)
    print(f"no .partial-shard file of task {task} of {tasks} in {out} while {pid} ran")
    return False


def check(root, out):
    """Problems of OUT against DIR/reference (module docstring)."""
    ref = os.path.join(root, "reference")
    problems = []
    names = sorted(os.listdir(ref))
    got = sorted(os.listdir(out))
    partial = [n for n in got if n.startswith(".partial-")]
    if partial:
        problems.append(f"left in {out}: {', '.join(partial)}")
    if got != names:
        problems.append(f"{out} holds {got}, the one-machine run's folder {names}")
    for name in names:
        path = os.path.join(out, name)
        if name in got:
            with open(os.path.join(ref, name), "rb") as a, open(path, "rb") as b:
                if a.read() != b.read():
                    problems.append(f"{path}: not the one-machine run's bytes")
    with open(os.path.join(root, "documents")) as f:
        documents = int(f.read())
    try:
        with open(os.path.join(out, "prepare.json")) as f:
            manifest = json.load(f)
        counted = sum(s["documents"] + s["empty_documents"] for s in manifest["shards"])
        if counted != documents:
            problems.append(f"prepare.json counts {counted} documents, the corpus has "
                            f"{documents}")
    except (OSError, ValueError, KeyError) as e:
        problems.append(f"{out}/prepare.json: {e}")
    if not problems:
        print(f"{out}: its {len(names)} files are the one-machine run's, byte for byte; "
              f"{documents} documents; no .partial file")
    return problems


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "corpus" and len(argv) == 3:
        print(f"{len(corpus(argv[2]))} inputs in {argv[2]}/raw")
        return 0
    if mode == "reference" and len(argv) == 3:
        print(reference(argv[2]))
        return 0
    if mode == "wait-partial" and len(argv) == 7:
        return 0 if wait_partial(argv[2], int(argv[3]), int(argv[4]), int(argv[5]),
                                 float(argv[6])) else 1
    if mode == "check" and len(argv) == 4:
        problems = check(argv[2], argv[3])
        for p in problems:
            print(f"FAIL: {p}")
        return 1 if problems else 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
