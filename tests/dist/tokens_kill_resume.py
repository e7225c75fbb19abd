"""The token-stream training run, killed and resumed on other world sizes (issue 30, "A real
run"): examples/tokens/train_gpt.py, a small GPT on three sources of real text that
examples/tokens/prepare_corpus.py writes with megatron-core's builder, under torchrun (gloo, CPU),
reading its batches through distsampler.tokens' loader with DataLoader workers.

- uninterrupted: W=1 for --steps S steps;
- resumed: W=2, a random rank SIGKILLed at a random step past a checkpoint; resumed from the last
  checkpoint on W=3, killed the same way later; resumed on W=1 to step S.

The check: each launch's ranks log one line per sequence trained ("step sequence sha256"). A killed
launch's steps from the checkpoint the next one resumed from never happened (the model rolled
back); every other step counts, and each rank of a launch must have trained the steps from its
checkpoint's on, in order. Over the counted steps of all launches, every global sequence index k
of [0, S x B) appears exactly once, in step k // B, with the hash of the uninterrupted run's
sequence k; so the global token stream, and its hash (sha256 over the sequences' hashes in
order of k), equal the uninterrupted run's. Then the check must be able to fail: a log with a
sequence left out, one repeated, one changed, and a launch that trained the step before its
checkpoint's again are each reported, and so is a real run whose last resume is one step late
(its checkpoint's stream advanced by one step through the public API, the model's not).

--edits: every run reads a schedule of edits (docs/tokens.md, "Edits"; edit_schedule): a weight
change and python_more appended as a new source before the first kill, then a ramp that only the
resumed launches declare and a skip list that only the last declares, each at a step after the
checkpoint its first launch resumes from (the uninterrupted run declares all from the start).
The check above must pass as it is; each edit must change the stream from its step on (checked
in process first); and, besides the late resume, the last resume without the latest edit its
checkpoint records must be refused: the launch exits non-zero with the ValueError naming
"edits", before training a step.

usage: tokens_kill_resume.py PYTHON_PACKAGE_DIR [--steps S] [--checkpoint-every N] [--seed N]
                             [--seq-len L] [--packing concat|best-fit] [--micro-batch M]
                             [--chart PNG] [--work DIR] [--no-broken] [--edits]
PYTHON_PACKAGE_DIR holds the built package (build/python). Run with the PyTorch 2 venv's
interpreter (megatron-core writes the corpus). --chart draws both runs' loss (docs/tokens_run.md's
chart: see there for the command). A process of a launch still alive LEFTOVER_GRACE seconds after
torchrun exited fails the test, after it is killed.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchrun_kill_resume import LEFTOVER_GRACE, launch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "tokens")
TRAIN = os.path.join(EXAMPLES, "train_gpt.py")
GLOBAL_BATCH = 12  # a multiple of every world size used: 1, 2, 3
DEFAULT_SEED = 20261203


def torchrun(package_dir, nproc, args, out, timeout, script=TRAIN):
    """`script` (train_gpt.py) on nproc ranks with `args`, logs in `out`; a CompletedProcess.
    torchrun's output goes to files (see torchrun_kill_resume.torchrun: a worker left behind keeps pipes
    open); the launch's processes, which all name `out`, are awaited and the leftovers killed."""
    env = dict(os.environ, PYTHONPATH=package_dir, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as logs:
        cmd = [sys.executable, "-m", "distsampler.torchrun", "--nnodes=1",
               f"--nproc_per_node={nproc}", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
               "--redirects", "2", "--tee", "2", "--monitor_interval", "0.1", "--log_dir", logs,
               script, "--out", out] + args
        r, left = launch(cmd, env, out, timeout, merge_stderr=True)
    assert not left, (f"{len(left)} processes of the launch were still alive {LEFTOVER_GRACE} s "
                      "after torchrun exited (killed):\n" + "\n".join(left))
    return r


def checkpoint_step(out):
    import torch
    return torch.load(os.path.join(out, "checkpoint.pt"))["step"]


def read_log(out, attempt):
    """{rank: [(step, sequence, hash)]} that the ranks of launch `attempt` logged, in order."""
    ranks = {}
    for name in os.listdir(out):
        if name.startswith(f"tokens.a{attempt}.rank") and name.endswith(".tsv"):
            rank = int(name[len(f"tokens.a{attempt}.rank"):-len(".tsv")])
            with open(os.path.join(out, name)) as f:
                ranks[rank] = [(int(s), int(k), h) for s, k, h in (line.split() for line in f)]
    return ranks


def counted(launches, steps):
    """The lines that count, [(step, sequence, hash)]: launch i's with start_i <= step <
    start_{i+1} (the last launch's up to `steps`), launches = [(start step, read_log's lines)];
    how many logged lines were rolled back; and problems: each rank of a launch must have trained
    steps start_i, start_i + 1, ... in order (a resume that trains an earlier step again, or skips
    one, fails here even where the lines it kept look right)."""
    kept, rolled_back, problems = [], 0, []
    for i, (start, ranks) in enumerate(launches):
        end = launches[i + 1][0] if i + 1 < len(launches) else steps
        for rank, lines in sorted(ranks.items()):
            order = [line[0] for j, line in enumerate(lines)
                     if j == 0 or lines[j - 1][0] != line[0]]
            if order != list(range(start, start + len(order))):
                problems.append(f"launch {i} rank {rank}: trained steps {order[:8]}, not "
                                f"{start}, {start + 1}, ... in order")
            for line in lines:
                if start <= line[0] < end:
                    kept.append(line)
                else:
                    rolled_back += 1
    return kept, rolled_back, problems


def check(reference, kept, steps, batch):
    """Problems (strings) of the counted lines against the uninterrupted run's, whose own lines
    must be the whole stream too: each sequence k of [0, steps x batch) once, in step k // batch,
    with the reference's hash."""
    problems = []

    def stream(lines, what):
        by_sequence = {}
        for step, k, h in lines:
            if k in by_sequence:
                problems.append(f"{what}: sequence {k} trained twice (steps "
                                f"{by_sequence[k][0]} and {step})")
            by_sequence[k] = (step, h)
            if step != k // batch:
                problems.append(f"{what}: sequence {k} trained at step {step}, not {k // batch}")
        missing = sorted(set(range(steps * batch)) - set(by_sequence))
        extra = sorted(set(by_sequence) - set(range(steps * batch)))
        if missing:
            problems.append(f"{what}: {len(missing)} sequences never trained, first {missing[:8]}")
        if extra:
            problems.append(f"{what}: {len(extra)} sequences past the run, first {extra[:8]}")
        return by_sequence

    ref = stream(reference, "uninterrupted")
    got = stream(kept, "resumed")
    differ = [k for k in sorted(set(ref) & set(got)) if ref[k][1] != got[k][1]]
    if differ:
        problems.append(f"{len(differ)} sequences differ from the uninterrupted run's, first "
                        f"{differ[:8]}")
    return problems


def stream_hash(lines):
    """sha256 over the sequences' hashes in order of the global sequence index."""
    return hashlib.sha256("".join(h for _, _, h in sorted(lines, key=lambda x: x[1]))
                          .encode()).hexdigest()


def kill_windows(s):
    """The steps each killed launch is killed in: past a checkpoint of this launch and not on
    one, so that steps are rolled back; the first in the first third, the second in the second:
    each world size trains a share."""
    return [(s // 6, s // 3), (s // 2, 2 * s // 3)]


def kill_step_of(rng, start, c, window):
    """A launch from step `start` is killed at a step of `window`, or the first past its first
    checkpoint (start + c) when the window ends before; never on a checkpoint (nothing would be
    rolled back): at most max(start + c + 1, window's end) + 1."""
    first = start + c + 1
    kill_step = rng.randint(max(first, window[0]), max(first, window[1]))
    return kill_step + 1 if kill_step % c == 0 else kill_step


def local_stream(args, flags):
    """train_gpt.py's stream with the run's configuration and these edit flags, in this process
    (one replica: no process group)."""
    sys.path.insert(0, EXAMPLES)
    import train_gpt
    with open(os.path.join(args.corpus, "corpus.json")) as f:
        corpus = json.load(f)
    options = train_gpt.parse_args(["--data", args.corpus, "--out", "-", "--steps", "1",
                                    "--global-batch", str(GLOBAL_BATCH),
                                    "--seq-len", str(args.seq_len)] + args.stream + flags)
    return train_gpt.make_stream(options, corpus)


def advance_one_step(out, args, flags):
    """A broken resume: the checkpoint's stream one step further than its model, made through
    the public API (load the state on one rank, take one step's batch, save the state)."""
    import torch
    path = os.path.join(out, "checkpoint.pt")
    checkpoint = torch.load(path)
    stream = local_stream(args, flags)
    stream.load_state_dict(checkpoint["stream"])
    batches = iter(stream.loader(num_workers=0))
    next(batches)
    checkpoint["stream"] = stream.state_dict()
    del batches
    torch.save(checkpoint, path)


def edit_schedule(args, work):
    """--edits: [(the first launch that declares it, its step, its flags)], by step. Before the
    first kill: a weight change, and python_more appended as a new source with the four weights.
    Then edits declared at a resume, the uninterrupted run declaring them from the start: a ramp
    from after every possible start of launch 1 (the first resume) and a skip list (every other
    fortune) from after every possible start of launch 2; the first resume's checkpoint then
    records the ramp, which launch 2 declares again."""
    s, c = args.steps, args.checkpoint_every
    latest = []  # the latest kill step of each killed launch (kill_step_of), after which the
    for window in kill_windows(s):  # next launch starts (from a checkpoint before it)
        latest.append(max((latest[-1] if latest else 0) + c + 1, window[1]) + 1)
    ramp, skip = (latest[0] + 1, latest[0] + 1 + c), latest[1] + 1
    if c < 3 or skip >= s:
        raise SystemExit(f"--edits: --steps {s} is too few for --checkpoint-every {c} (a skip "
                         f"list at step {skip} must come before the end; at least 3 steps a "
                         "checkpoint: two edits before the first)")
    with open(os.path.join(args.corpus, "corpus.json")) as f:
        fortunes = json.load(f)["sources"][2]
    skips = os.path.join(work, "skip.txt")
    with open(skips, "w") as f:
        f.write("# source document: every other fortune\n"
                + "".join(f"2 {d}\n" for d in range(0, fortunes["documents"], 2)))
    return [(0, c // 2, ["--change", f"{c // 2}:0.3,0.3,0.4"]),
            (0, c - 1, ["--append", f"{c - 1}:3=python_more",
                        "--change", f"{c - 1}:0.3,0.2,0.2,0.3"]),
            (1, ramp[0], ["--ramp", f"{ramp[0]}:{ramp[1]}:0.1,0.3,0.3,0.3"]),
            (2, skip, ["--skip", f"{skip}:{skips}"])]


def declared(schedule, attempt):
    """The edit flags launch `attempt` declares (the uninterrupted run: all of them)."""
    return [flag for first, _, flags in schedule if first <= attempt for flag in flags]


def check_edits_change_stream(args, schedule):
    """Each edit must change the stream from its step on, and no step before it (else the run
    would pass without it): the schedule's first i + 1 edits against its first i, in this
    process."""
    sys.path.insert(0, EXAMPLES)
    import train_gpt
    steps = []
    for i in range(len(schedule) + 1):
        stream = local_stream(args, [f for _, _, flags in schedule[:i] for f in flags])
        batches = iter(stream.loader(num_workers=0))
        steps.append([train_gpt.row_hashes(next(batches)) for _ in range(args.steps)])
    for i, (_, step, flags) in enumerate(schedule):
        before, after = steps[i], steps[i + 1]
        differ = [t for t in range(args.steps) if before[t] != after[t]]
        assert differ and differ[0] >= step, (f"{' '.join(flags)}: the steps it changes are "
                                              f"{differ[:8]}, not from step {step} on")
        print(f"{' '.join(flags)}: changes the stream from step {differ[0]} on", flush=True)


def main():
    p = argparse.ArgumentParser(description="The token-stream run killed and resumed on W=2, 3, 1")
    p.add_argument("package_dir")
    p.add_argument("--steps", type=int, default=36)
    p.add_argument("--checkpoint-every", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--packing", choices=["concat", "best-fit"], default="concat")
    p.add_argument("--micro-batch", type=int, help="train_gpt.py's (gradient accumulation)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the kills' random choices")
    p.add_argument("--chart", help="PNG: both runs' loss")
    p.add_argument("--work", help="keep everything here (default: a temporary folder, removed)")
    p.add_argument("--no-broken", action="store_true",
                   help="skip the late-resume run that must fail the check")
    p.add_argument("--edits", action="store_true",
                   help="every run with a schedule of edits (edit_schedule), some declared only "
                   "at a resume; and a resume that drops one must be refused")
    args = p.parse_args()
    sys.path.insert(0, args.package_dir)
    rng = random.Random(args.seed)
    began = time.time()
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    try:
        run(args, rng, work)
    except BaseException:
        print(f"(kept {work})", flush=True)
        raise
    if not args.work:
        shutil.rmtree(work)
    print(f"tokens kill-and-resume: passed ({time.time() - began:.0f} s)", flush=True)


def run(args, rng, work):
    args.corpus = os.path.join(work, "corpus")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "prepare_corpus.py"), args.corpus],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"prepare_corpus.py failed:\n{r.stdout}{r.stderr}"
    print(r.stdout.strip(), flush=True)
    args.stream = ["--packing", args.packing]  # the stream's configuration beside L and B
    common = ["--data", args.corpus, "--steps", str(args.steps), "--seq-len", str(args.seq_len),
              "--global-batch", str(GLOBAL_BATCH), "--checkpoint-every",
              str(args.checkpoint_every)] + args.stream
    if args.micro_batch:
        common += ["--micro-batch", str(args.micro_batch)]
    s, c = args.steps, args.checkpoint_every
    worlds = [2, 3, 1]
    schedule = edit_schedule(args, work) if args.edits else []
    if schedule:
        check_edits_change_stream(args, schedule)

    ref = os.path.join(work, "uninterrupted")
    began = time.time()
    r = torchrun(args.package_dir, 1, common + declared(schedule, len(worlds)), ref, timeout=300)
    assert r.returncode == 0, f"the uninterrupted run failed:\n{r.stdout}"
    print(f"uninterrupted: W=1, {s} steps ({time.time() - began:.0f} s)"
          + (", every edit declared from the start" if schedule else ""), flush=True)

    resumed = os.path.join(work, "resumed")
    launches, late, dropped = [], None, None
    for attempt, world in enumerate(worlds):
        start = checkpoint_step(resumed) if attempt else 0
        argv = (common + declared(schedule, attempt) + ["--attempt", str(attempt)]
                + (["--resume"] if attempt else []))
        killed = attempt + 1 < len(worlds)
        where = f"attempt {attempt}: W={world} from step {start}, "
        if killed:
            kill_step = kill_step_of(rng, start, c, kill_windows(s)[attempt])
            kill_rank = rng.randrange(world)
            argv += ["--kill-rank", str(kill_rank), "--kill-step", str(kill_step)]
            where += f"rank {kill_rank} killed at step {kill_step}"
        else:
            where += f"to step {s}"
            if not args.no_broken:  # the late resume's launch starts from this checkpoint
                late = os.path.join(work, "late")
                shutil.copytree(resumed, late)
                if schedule:  # and so does the one that drops an edit
                    dropped = os.path.join(work, "dropped")
                    shutil.copytree(resumed, dropped)
        began = time.time()
        r = torchrun(args.package_dir, world, argv, resumed, timeout=300)
        if killed:
            assert r.returncode != 0, f"attempt {attempt} was not killed:\n{r.stdout}"
            assert "Signal 9 (SIGKILL)" in r.stdout, r.stdout
        else:
            assert r.returncode == 0, f"attempt {attempt} failed:\n{r.stdout}"
        print(f"{where} ({time.time() - began:.0f} s)", flush=True)
        launches.append((start, read_log(resumed, attempt)))

    reference, _, problems = counted([(0, read_log(ref, 0))], s)
    kept, rolled_back, order = counted(launches, s)
    problems += order + check(reference, kept, s, GLOBAL_BATCH)
    assert not problems, "\n".join(problems)
    assert stream_hash(kept) == stream_hash(reference)
    print(f"the same global token stream: {s * GLOBAL_BATCH} sequences of {args.seq_len} tokens, "
          f"each once, sha256 {stream_hash(kept)}; {rolled_back} sequences trained "
          "after a checkpoint and rolled back", flush=True)

    # The check must be able to fail.
    v = len(kept) // 2
    changed = kept[:v] + [(kept[v][0], kept[v][1], "0" * 64)] + kept[v + 1:]
    for name, broken in [("a sequence left out", kept[:v] + kept[v + 1:]),
                         ("a sequence repeated", kept[:v + 1] + kept[v:]),
                         ("a sequence changed", changed)]:
        assert check(reference, broken, s, GLOBAL_BATCH), f"the check passed {name}"
    # The last launch also training the step before its checkpoint's (a stream that restarted
    # earlier than its model): those lines are not counted, but the launch's order is wrong.
    start, ranks = launches[-1]
    again = {rank: [(start - 1, k, h) for _, k, h in lines[:GLOBAL_BATCH // len(ranks)]] + lines
             for rank, lines in ranks.items()}
    assert counted(launches[:-1] + [(start, again)], s)[2], "the check passed a step trained again"
    if late:
        advance_one_step(late, args, declared(schedule, 2))
        start = launches[-1][0]
        r = torchrun(args.package_dir, 1,
                     common + declared(schedule, 2) + ["--attempt", "2", "--resume"], late,
                     timeout=300)
        assert r.returncode == 0, f"the late resume's launch failed:\n{r.stdout}"
        broken, _, problems = counted(launches[:-1] + [(start, read_log(late, 2))], s)
        problems += check(reference, broken, s, GLOBAL_BATCH)
        assert problems, "the check passed a resume one step late"
        print(f"the check fails a resume one step late: {problems[0]}", flush=True)
    if dropped:
        # The last resume without the latest edit its checkpoint records (the ramp that the
        # first resume declared, when that launch's checkpoint came after the ramp's step).
        start = launches[-1][0]
        drop = max((e for e in schedule if e[1] < start), key=lambda e: e[1])
        argv = [f for e in schedule if e[0] <= 2 and e is not drop for f in e[2]]
        r = torchrun(args.package_dir, 1, common + argv + ["--attempt", "2", "--resume"],
                     dropped, timeout=300)
        refused = [line for line in r.stdout.splitlines() if "ValueError" in line]
        assert r.returncode != 0 and refused and "edits" in refused[-1], (
            f"a resume from step {start} without {' '.join(drop[2])} was not refused:\n"
            f"{r.stdout}")
        assert not read_log(dropped, 2), "the resume that dropped an edit trained a step"
        print(f"a resume from step {start} without {' '.join(drop[2])} is refused: "
              f"{refused[-1].strip()[:300]}", flush=True)
    print("the check fails a log with a sequence left out, repeated or changed, and a launch that "
          "trained a step before its checkpoint's again", flush=True)

    if args.chart:
        sys.path.insert(0, EXAMPLES)
        import train_gpt
        train_gpt.plot_loss([("uninterrupted, W=1", ref),
                             (train_gpt.run_label(resumed) + ", killed twice", resumed)],
                            args.chart)
        print(f"chart: {args.chart}", flush=True)


if __name__ == "__main__":
    main()
