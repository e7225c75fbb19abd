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

Then one large file (the 4 files concatenated, all.jsonl), at 1 and at 2 workers:
- ours with --shard-size 4M (the file cut into several shards; 512K in a --max-mb run), at
  --workers 1 and 2, and as 2 Ray tasks (Ray from the same interpreter: requirements/
  prepare-bench.txt takes torch2.txt's ray) on a local cluster its driver starts on 127.0.0.1,
  each task calling prepare(..., task=i, tasks=2), then finalize=True; and as a SLURM array of 2
  (sbatch --wait, then --finalize) when `sinfo` answers, else "SLURM: not run (why)". Every
  shard_* file and prepare.json of the 2-worker, Ray and SLURM runs must be the 1-worker run's;
- Megatron's tool at --workers 1 (and 2: the run above);
- datatrove at tasks=1, workers=1 (it deals whole files to tasks), and at tasks=2, workers=2 to
  show what its second task does with one file (what each task wrote, and its log's word).
Every run's peak memory: the largest sum of VmRSS over the command's process tree (the command
and its descendants through /proc/PID/task/*/children), sampled every 20 ms from a thread; and
its CPU seconds (/proc/PID/stat's utime + stime of those processes, as last sampled).

--write replaces the text between this section's markers in the file, or appends the section.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokens import replace_between  # noqa: E402 (bench/tokens.py's helper)

BEGIN = "<!-- bench/tokens_prepare.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_prepare.py: end -->"
HEADING = "## Preparing data: raw text to Megatron shards, against Megatron-LM and datatrove"
FILES, WORKERS, VOCAB, EOD = 4, 2, 16000, "<|endoftext|>"
# The one-file runs' --shard-size: all.jsonl (about 33 MB) in several shards; a quick run's
# (--max-mb) is smaller, so that its few MB still make several.
SHARD_SIZE, QUICK_SHARD_SIZE = "4M", "512K"
SAMPLE = 0.02  # seconds between two samples of a command's memory
TICKS = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's times are in these


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


def tree_sample(root):
    """(the summed VmRSS of `root` and all its descendants in bytes, their names, and per process
    (pid, start time) its user + system seconds so far): the tree walked through
    /proc/PID/task/*/children."""
    total, names, cpu, stack, seen = 0, [], {}, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
            tasks = os.listdir(f"/proc/{pid}/task")
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    stack += [int(c) for c in f.read().split()]
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
                pass
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        names.append(fields.get("Name", "?").strip())
        if "VmRSS" in fields:  # a zombie has none
            total += int(fields["VmRSS"].split()[0]) * 1024
        cpu[(pid, stat[19])] = (int(stat[11]) + int(stat[12])) / TICKS  # utime + stime
    return total, names, cpu


def timed(command, env=None):
    """Runs `command` (exit on failure): {"seconds", "peak" (the largest summed RSS of its process
    tree, bytes, sampled every SAMPLE s), "processes" (the most at once), "names" (every process
    name seen), "cpu" (the processes' user + system seconds as last sampled), "stdout"}. The
    command gets a session of its own, stopped whole when it ends."""
    peak = {"rss": 0, "processes": 0, "names": set(), "cpu": {}}
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    done = threading.Event()

    def sample():
        while not done.is_set():
            rss, names, cpu = tree_sample(process.pid)
            peak["rss"] = max(peak["rss"], rss)
            peak["processes"] = max(peak["processes"], len(names))
            peak["names"].update(names)
            peak["cpu"].update(cpu)
            done.wait(SAMPLE)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = process.communicate()
        seconds = time.perf_counter() - start
    finally:
        done.set()
        sampler.join()
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever it left running (Ray's daemons)
        except (ProcessLookupError, PermissionError):  # none left
            pass
    if process.returncode != 0:
        sys.exit(f"{command[:3]} failed ({process.returncode}):\n{stdout[-3000:]}\n"
                 f"{stderr[-3000:]}")
    return {"seconds": seconds, "peak": peak["rss"], "processes": peak["processes"],
            "names": sorted(peak["names"]), "cpu": sum(peak["cpu"].values()), "stdout": stdout}


def run_ours(inputs, out, tokenizer, workers=WORKERS, shard_size=None):
    size = ["--shard-size", shard_size] if shard_size else []
    return timed([sys.executable, "-m", "distsampler.prepare", *inputs, "-o", out, "--tokenizer",
                  os.path.join(tokenizer, "tokenizer.json"), "--eod", EOD, "--workers",
                  str(workers), *size, "--quiet"])


def run_megatron(megatron_lm, single, prefix, tokenizer, workers=WORKERS):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [megatron_lm] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return timed([sys.executable, os.path.join(megatron_lm, "tools", "preprocess_data.py"),
                  "--input", single, "--output-prefix", prefix, "--tokenizer-type",
                  "HuggingFaceTokenizer", "--tokenizer-model", tokenizer, "--append-eod",
                  "--workers", str(workers), "--log-interval", "100000000"], env)


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


def run_datatrove(folder, glob, out, tokenizer, tasks, logs, workers=WORKERS):
    return timed([sys.executable, "-c", DATATROVE, folder, glob, out,
                  os.path.join(tokenizer, "tokenizer.json"), EOD, str(tasks), str(workers),
                  logs], dict(os.environ, HF_HUB_OFFLINE="1"))


# Ours as Ray tasks on a local cluster started (and shut down) by this driver: task i makes the
# shards i % tasks == i, then the driver's --finalize. Ray's files under TEMP; its servers on
# 127.0.0.1 (ray.init turns a _node_ip_address of 127.0.0.1 into the host's address unless
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, run_ray's environment).
RAY = """
import json, sys
import ray
from distsampler.prepare import prepare
source, out, tokenizer, eod, shard_size, tasks, temp = sys.argv[1:]
shard_size, tasks = int(shard_size), int(tasks)
ray.init(num_cpus=tasks, include_dashboard=False, log_to_driver=False,
         _node_ip_address="127.0.0.1", _temp_dir=temp)

@ray.remote(num_cpus=1)
def task(i):
    return len(prepare([source], out, tokenizer, eod=eod, quiet=True, shard_size=shard_size,
                       task=i, tasks=tasks)["shards"])

try:
    address = ray.nodes()[0]["NodeManagerAddress"]
    made = ray.get([task.remote(i) for i in range(tasks)])
finally:
    ray.shutdown()
manifest = prepare([source], out, tokenizer, eod=eod, quiet=True, shard_size=shard_size,
                   finalize=True)
print(json.dumps({"made": made, "shards": len(manifest["shards"]), "address": address}))
"""


def package_env(**extra):
    """This environment with the distsampler package's folder first on PYTHONPATH, absolute (Ray's
    workers and SLURM's tasks may start elsewhere)."""
    import distsampler
    here = os.path.dirname(os.path.dirname(os.path.abspath(distsampler.__file__)))
    paths = [here] + [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                      if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **extra)


def run_ray(source, out, tokenizer, shard_size, tasks, temp):
    run = timed([sys.executable, "-c", RAY, source, out, os.path.join(tokenizer, "tokenizer.json"),
                 EOD, str(parse_size(shard_size)), str(tasks), temp],
                package_env(RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"))
    said = json.loads(run["stdout"].strip().splitlines()[-1])
    if said["address"] != "127.0.0.1":
        sys.exit(f"the Ray cluster's node is at {said['address']}, not 127.0.0.1")
    run["made"] = said["made"]
    return run


def slurm_reason():
    """None when a SLURM cluster answers `sinfo`, else why not."""
    try:
        r = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return "no cluster: no sinfo"
    except subprocess.TimeoutExpired:
        return "no cluster: sinfo timed out"
    return None if r.returncode == 0 else "no cluster: sinfo failed"


def run_slurm(source, out, tokenizer, shard_size, tasks, logs):
    """Ours as an sbatch array of `tasks` (--task $SLURM_ARRAY_TASK_ID), sbatch --wait, then
    --finalize here: one command. Its tasks run under slurmd, outside the command's tree."""
    os.makedirs(logs)
    base = [sys.executable, "-m", "distsampler.prepare", source, "-o", out, "--tokenizer",
            os.path.join(tokenizer, "tokenizer.json"), "--eod", EOD, "--shard-size", shard_size,
            "--quiet"]
    task = shlex.join(base + ["--tasks", str(tasks)]) + ' --task "$SLURM_ARRAY_TASK_ID"'
    script = (f"sbatch --wait --array=0-{tasks - 1} -n 1 -c 1 -o {shlex.quote(logs)}/%a.out "
              f"--wrap {shlex.quote(task)} >/dev/null && {shlex.join(base + ['--finalize'])}")
    return timed(["bash", "-c", script], package_env())


def parse_size(text):
    """--shard-size's bytes ("4M": 4 MiB), as `python -m distsampler.prepare` reads it."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def read_indexed(prefixes):
    from distsampler import _core
    source = _core.IndexedSource(prefixes)
    return [source.read(d) for d in range(source.documents)]


def read_datatrove_tasks(out, tasks):
    """Each task's documents, [] for a task that wrote no file."""
    per_task = []
    for rank in range(tasks):
        path = os.path.join(out, f"{rank:05d}_unshuffled.ds")
        if not os.path.exists(path):
            per_task.append([])
            continue
        tokens = np.fromfile(path, dtype=np.uint16)
        ends = np.fromfile(path + ".index", dtype=np.uint64)
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        per_task.append([tokens[a:b] for a, b in zip(starts, ends.astype(np.int64))])
    return per_task


def read_datatrove(out, tasks):
    return [d for docs in read_datatrove_tasks(out, tasks) for d in docs]


def read_ours(out):
    """Our output's documents, its shards in prepare.json's order, and their number."""
    with open(os.path.join(out, "prepare.json")) as f:
        manifest = json.load(f)
    prefixes = [os.path.join(out, s["prefix"]) for s in manifest["shards"]]
    return read_indexed(prefixes), len(prefixes)


def same_bytes(a, b):
    """Problems of folder b against folder a: every shard_* file and prepare.json byte for byte."""
    names = sorted(n for n in os.listdir(a) if n.startswith("shard_") or n == "prepare.json")
    other = sorted(n for n in os.listdir(b) if n.startswith("shard_") or n == "prepare.json")
    if names != other:
        return [f"{b} holds {other}, {a} {names}"]
    problems = []
    for name in names:
        with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
            if x.read() != y.read():
                problems.append(f"{b}/{name}: not the bytes of {a}/{name}")
    return problems


def check_tokens(name, got, want):
    if len(got) != len(want):
        sys.exit(f"{name}: {len(got)} documents, the input has {len(want)}")
    for d, (a, b) in enumerate(zip(got, want)):
        if a.tolist() != b:
            sys.exit(f"{name}: document {d} differs from the tokenizer's encoding + EOD")


def measure(args):
    from tokenizers import Tokenizer
    docs = documents(int(args.max_mb * 1e6) if args.max_mb else None)
    shard_size = QUICK_SHARD_SIZE if args.max_mb else SHARD_SIZE
    with tempfile.TemporaryDirectory() as scratch:
        def at(name):
            return os.path.join(scratch, name)

        inputs, parts, one = write_inputs(scratch, docs)
        single = at("all.jsonl")  # the 4 files concatenated: the same documents in order
        tokenizer, _ = train_tokenizer(scratch, docs)
        tok = Tokenizer.from_file(os.path.join(tokenizer, "tokenizer.json"))
        eod = tok.token_to_id(EOD)
        order = [text for part in parts for text in part]  # the files' documents, file by file
        want = [e.ids + [eod] for e in tok.encode_batch(order, add_special_tokens=False)]
        tokens = sum(map(len, want))
        runs = {
            "ours": run_ours(inputs, at("ours"), tokenizer),
            "megatron": run_megatron(args.megatron_lm, single, at("meg"), tokenizer),
            "datatrove": run_datatrove(scratch, "part*.jsonl", at("dt"), tokenizer, FILES,
                                       at("dt-logs")),
        }
        check_tokens("ours", read_indexed([at(f"ours/shard_{i:05d}") for i in range(FILES)]),
                     want)
        check_tokens("megatron", read_indexed([at("meg_text_document")]), want)
        check_tokens("datatrove", read_datatrove(at("dt"), FILES), want)

        # One large file, at 1 and 2 workers. Megatron's 2-worker run is the one above (the same
        # command on the same file).
        large = {
            "ours-1": run_ours([single], at("one-ours-1"), tokenizer, 1, shard_size),
            "ours-2": run_ours([single], at("one-ours-2"), tokenizer, 2, shard_size),
            "ray-2": run_ray(single, at("one-ray-2"), tokenizer, shard_size, 2, at("ray")),
            "megatron-1": run_megatron(args.megatron_lm, single, at("one-meg-1"), tokenizer, 1),
            "megatron-2": runs["megatron"],
            "datatrove-1": run_datatrove(scratch, "all.jsonl", at("one-dt-1"), tokenizer, 1,
                                         at("one-dt-1-logs"), workers=1),
            "datatrove-2": run_datatrove(scratch, "all.jsonl", at("one-dt-2"), tokenizer, 2,
                                         at("one-dt-2-logs"), workers=2),
        }
        slurm = slurm_reason()
        if slurm is None:
            large["slurm-2"] = run_slurm(single, at("one-slurm-2"), tokenizer, shard_size, 2,
                                         at("slurm-logs"))
        else:
            print(f"SLURM: not run ({slurm})", flush=True)
        got, shards = read_ours(at("one-ours-1"))
        check_tokens("ours, one file, 1 worker", got, want)
        for key in ("ours-2", "ray-2", "slurm-2"):
            if key in large:
                problems = same_bytes(at("one-ours-1"), at("one-" + key))
                if problems:
                    sys.exit(f"{key}: not the 1-worker run's output:\n" + "\n".join(problems))
        check_tokens("megatron, 1 worker", read_indexed([at("one-meg-1_text_document")]), want)
        check_tokens("datatrove, tasks=1", read_datatrove(at("one-dt-1"), 1), want)
        per_task = read_datatrove_tasks(at("one-dt-2"), 2)
        check_tokens("datatrove, tasks=2", [d for docs in per_task for d in docs], want)
        datatrove_tasks = []
        for rank, docs in enumerate(per_task):
            log = at(f"one-dt-2-logs/logs/task_{rank:05d}.log")
            with open(log, errors="replace") as f:
                said = [line.split(" - ", 1)[-1].strip().replace(scratch, "DIR")
                        for line in f if "No files found" in line]
            datatrove_tasks.append({
                "file": os.path.exists(at(f"one-dt-2/{rank:05d}_unshuffled.ds")),
                "documents": len(docs), "tokens": int(sum(len(d) for d in docs)),
                "said": said[0] if said else None})

        startup = {
            "ours": run_ours([one], at("ours1"), tokenizer)["seconds"],
            "megatron": run_megatron(args.megatron_lm, one, at("meg1"), tokenizer)["seconds"],
            "datatrove": run_datatrove(os.path.dirname(one), "one.jsonl", at("dt1"), tokenizer,
                                       1, at("dt1-logs"))["seconds"],
            "ray": run_ray(one, at("ray1-out"), tokenizer, shard_size, 2, at("ray1"))["seconds"],
        }
        size = sum(os.path.getsize(p) for p in inputs)
        single_size = os.path.getsize(single)
    return {"documents": len(want), "tokens": tokens, "bytes": size, "runs": runs,
            "startup": startup, "large": large, "single_bytes": single_size,
            "shard_size": shard_size, "shards": shards, "slurm": slurm,
            "datatrove_tasks": datatrove_tasks}


def versions():
    from importlib.metadata import version
    return {name: version(name) for name in ("megatron-core", "datatrove", "tokenizers", "ray")}


def mb(run):
    return f"{run['peak'] / 1e6:,.0f}"


def interpreter():
    path = os.path.relpath(sys.executable)
    return path if not path.startswith("..") else sys.executable


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
         f"whole command, and its startup alone (the same command on one document). Peak "
         f"memory: the largest sum of VmRSS (/proc/PID/status) over the command's process tree "
         f"(the command and every descendant, found through /proc/PID/task/*/children), sampled "
         f"every {SAMPLE * 1000:.0f} ms while it ran; a page that processes share (copy-on-write "
         f"after a fork, a mapped file) counts once in each of them. CPU s: the user + system "
         f"seconds of the tree's processes (/proc/PID/stat, as last sampled).")
    emit()
    emit("| tool | seconds | tokens/s | vs ours | startup (s) | peak MB | CPU s |")
    emit("|---|---|---|---|---|---|---|")
    runs = m["runs"]
    ours = m["tokens"] / runs["ours"]["seconds"]
    names = {"ours": "`python -m distsampler.prepare`",
             "megatron": f"Megatron-LM `tools/preprocess_data.py` (core {v['megatron-core']})",
             "datatrove": f"datatrove {v['datatrove']} `DocumentTokenizer`"}
    for key in ("ours", "megatron", "datatrove"):
        rate = m["tokens"] / runs[key]["seconds"]
        emit(f"| {names[key]} | {runs[key]['seconds']:.1f} | {rate:,.0f} | {rate / ours:.2f} | "
             f"{m['startup'][key]:.1f} | {mb(runs[key])} | {runs[key]['cpu']:.1f} |")
    emit()
    large, t = m["large"], m["datatrove_tasks"]
    ray = large["ray-2"]
    ray_names = sorted(n for n in ray["names"] if n not in ("python", "python3"))
    second = (f"task 1 {t[1]['tokens']:,} tokens ({t[1]['documents']:,} documents, "
              + ("no file" if not t[1]["file"] else "empty files" if not t[1]["tokens"]
                 else "its files")
              + (f"; its log: \"{t[1]['said']}\")" if t[1]["said"] else ")"))
    made = ", ".join(f"task {i} made {n}" for i, n in enumerate(ray["made"]))

    def busy(key):
        return f"{large[key]['cpu'] / large[key]['seconds']:.2f}"
    if m["slurm"] is None:
        slurm = (" As a SLURM array of 2 tasks (`sbatch --wait --array=0-1`, then `--finalize`, "
                 "one command): byte for byte the same again; its memory and CPU not measured, "
                 "its tasks running under slurmd, outside the command's tree.")
    else:
        slurm = f" SLURM: not run ({m['slurm']})."
    emit(f"One large file: the same documents as one JSONL file ({m['single_bytes'] / 1e6:.1f} "
         f"MB), each tool at 1 and at 2 workers. Ours with `--shard-size {m['shard_size']}`: the "
         f"file cut after newlines into {m['shards']} pieces, a shard each, dealt to the "
         f"workers; its output at 2 workers is its output at 1 worker byte for byte (every "
         f"shard_* file and prepare.json compared), and so is the Ray run's: Ray {v['ray']} on a "
         f"local cluster that the command's driver starts and stops (`ray.init(num_cpus=2, "
         f"include_dashboard=False)`, its node on 127.0.0.1, with {interpreter()}), 2 tasks each "
         f"calling "
         f"`distsampler.prepare.prepare(..., task=i, tasks=2)` ({made} shards), then "
         f"`finalize=True` in the driver; its time includes the cluster's start and stop "
         f"({m['startup']['ray']:.1f} s on one document), its memory the cluster's processes "
         f"(at most {ray['processes']} at once; names seen: {', '.join(ray_names)}).{slurm} "
         f"Megatron's tool: `--workers 1` and `--workers 2` on the file (the 2-worker run is the "
         f"table above's). datatrove deals whole files to its tasks, so one file is one task's "
         f"work: `tasks=1`; run with `tasks=2, workers=2` on this file, task 0 wrote "
         f"{t[0]['tokens']:,} of the {m['tokens']:,} tokens and {second}. Vs ours: tokens/s "
         f"over ours' at the same number of workers, in this run. A worker is a process, not a "
         f"core: at 1 worker, CPU s over seconds is {busy('ours-1')} for ours and "
         f"{busy('datatrove-1')} for datatrove (in one process, both let `encode_batch` run on "
         f"tokenizers' thread pool; ours gives each of several workers one thread) and "
         f"{busy('megatron-1')} for Megatron's tool.")
    emit()
    emit("| tool | workers | seconds | tokens/s | vs ours | peak MB | CPU s | processes |")
    emit("|---|---|---|---|---|---|---|---|")
    rows = [("ours-1", f"{names['ours']} `--workers 1`", 1),
            ("ours-2", f"{names['ours']} `--workers 2`", 2),
            ("ray-2", "ours as 2 Ray tasks + finalize", 2),
            ("slurm-2", "ours as a SLURM array of 2 + `--finalize`", 2),
            ("megatron-1", f"{names['megatron']} `--workers 1`", 1),
            ("megatron-2", f"{names['megatron']} `--workers 2`", 2),
            ("datatrove-1", f"{names['datatrove']} tasks=1, workers=1", 1),
            ("datatrove-2", f"{names['datatrove']} tasks=2, workers=2", 2)]
    for key, label, workers in rows:
        if key not in large:
            continue
        run = large[key]
        rate = m["tokens"] / run["seconds"]
        base = m["tokens"] / large[f"ours-{workers}"]["seconds"]
        measured = ([mb(run), f"{run['cpu']:.1f}", str(run["processes"])] if key != "slurm-2"
                    else ["n/a (under slurmd)", "n/a", "n/a"])
        emit(f"| {label} | {workers} | {run['seconds']:.1f} | {rate:,.0f} | {rate / base:.2f} | "
             f"{' | '.join(measured)} |")
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
