"""Hugging Face Transformers' Trainer on a token stream, killed and resumed on other world sizes
(issue 39): examples/hf/train_llama.py (a tiny Llama from a config, distsampler.hf's
TokenStreamTrainer) over the corpus of docs/tokens_run.md, under torchrun (gloo, CPU).

- uninterrupted: W=1 for --steps S steps;
- resumed: W=2, a random rank SIGKILLed at a random step past a checkpoint; resumed with the
  Trainer's own train(resume_from_checkpoint=...) from its last checkpoint on W=3, killed the same
  way later; resumed on W=1 to step S.

The check is tokens_kill_resume.py's ledger (its functions, imported): every global sequence of
[0, S x B) trained exactly once, in its step, with the uninterrupted run's bytes, each launch's
ranks training the steps from their checkpoint's on, in order. Then the Trainer's own counters:
the last launch ends at global step S, and its log history (the checkpoints' included) has the
uninterrupted run's learning rate at every step (a resume that restarted the schedule or repeated
steps would not). Then the broken variant must fail it: the same last resume with the stream's
state left out of the checkpoint (train_llama.py --no-stream-state), where the Trainer's own
resume takes over.

usage: hf_kill_resume.py PYTHON_PACKAGE_DIR [--steps S] [--checkpoint-every N] [--seed N]
                         [--work DIR] [--no-broken]
Run with the PyTorch 2 venv's interpreter (transformers, megatron-core for the corpus).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokens_kill_resume import (EXAMPLES, GLOBAL_BATCH, check, counted,  # noqa: E402
                                kill_step_of, kill_windows, read_log, stream_hash, torchrun)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "hf", "train_llama.py")
DEFAULT_SEED = 20261205


def last_checkpoint(out):
    steps = [int(n.split("-")[1]) for n in os.listdir(out) if n.startswith("checkpoint-")]
    return max(steps)


def done(out, attempt):
    with open(os.path.join(out, f"done-{attempt}.json")) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description="HF Trainer on a token stream killed and resumed")
    p.add_argument("package_dir")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--checkpoint-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the kills' random choices")
    p.add_argument("--work", help="keep everything here (default: a temporary folder, removed)")
    p.add_argument("--no-broken", action="store_true")
    args = p.parse_args()
    began = time.time()
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    try:
        run(args, random.Random(args.seed), work)
    except BaseException:
        print(f"(kept {work})", flush=True)
        raise
    if not args.work:
        shutil.rmtree(work)
    print(f"hf trainer kill-and-resume: passed ({time.time() - began:.0f} s)", flush=True)


def run(args, rng, work):
    corpus = os.path.join(work, "corpus")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "prepare_corpus.py"), corpus],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"prepare_corpus.py failed:\n{r.stdout}{r.stderr}"
    s, c = args.steps, args.checkpoint_every
    common = ["--data", corpus, "--steps", str(s), "--save-steps", str(c),
              "--global-batch", str(GLOBAL_BATCH)]
    import transformers
    print(f"transformers {transformers.__version__}", flush=True)

    ref = os.path.join(work, "uninterrupted")
    t = time.time()
    r = torchrun(args.package_dir, 1, common, ref, timeout=300, script=TRAIN)
    assert r.returncode == 0, f"the uninterrupted run failed:\n{r.stdout}"
    print(f"uninterrupted: W=1, {s} steps ({time.time() - t:.0f} s)", flush=True)

    resumed = os.path.join(work, "resumed")
    worlds, launches, broken = [2, 3, 1], [], None
    for attempt, world in enumerate(worlds):
        start = last_checkpoint(resumed) if attempt else 0
        argv = common + ["--attempt", str(attempt)] + (["--resume"] if attempt else [])
        killed = attempt + 1 < len(worlds)
        where = f"attempt {attempt}: W={world} from step {start}, "
        if killed:
            kill_step = kill_step_of(rng, start, c, kill_windows(s)[attempt])
            kill_rank = rng.randrange(world)
            argv += ["--kill-rank", str(kill_rank), "--kill-step", str(kill_step)]
            where += f"rank {kill_rank} killed at step {kill_step}"
        else:
            where += f"to step {s}"
            if not args.no_broken:
                broken = os.path.join(work, "broken")
                shutil.copytree(resumed, broken)
        t = time.time()
        r = torchrun(args.package_dir, world, argv, resumed, timeout=300, script=TRAIN)
        if killed:
            assert r.returncode != 0 and "Signal 9 (SIGKILL)" in r.stdout, r.stdout
        else:
            assert r.returncode == 0, f"attempt {attempt} failed:\n{r.stdout}"
        print(f"{where} ({time.time() - t:.0f} s)", flush=True)
        launches.append((start, read_log(resumed, attempt)))

    reference, _, problems = counted([(0, read_log(ref, 0))], s)
    kept, rolled_back, order = counted(launches, s)
    problems += order + check(reference, kept, s, GLOBAL_BATCH)
    ref_done, last = done(ref, 0), done(resumed, len(worlds) - 1)
    problems += trainer_problems(ref_done, last, s)
    assert not problems, "\n".join(problems)
    assert stream_hash(kept) == stream_hash(reference)
    gap = max(abs(last["loss"][k] - v) for k, v in ref_done["loss"].items())
    print(f"the same global token stream: {s * GLOBAL_BATCH} sequences, each once, sha256 "
          f"{stream_hash(kept)}; {rolled_back} sequences trained after a checkpoint and rolled "
          f"back; the Trainer ends at global step {last['global_step']} with the uninterrupted "
          f"run's learning rate at every step; largest loss difference {gap:.1e}", flush=True)

    if broken:
        start = launches[-1][0]
        r = torchrun(args.package_dir, 1, common + ["--attempt", "2", "--resume",
                                                     "--no-stream-state"], broken, timeout=300,
                     script=TRAIN)
        assert r.returncode == 0, f"the broken variant's launch failed:\n{r.stdout}"
        bad, _, problems = counted(launches[:-1] + [(start, read_log(broken, 2))], s)
        problems += check(reference, bad, s, GLOBAL_BATCH)
        assert problems, "the check passed a resume without the stream's state"
        print(f"the check fails the stream's state left out (the Trainer's own resume from "
              f"step {start} on W=1): {problems[0]}", flush=True)


def trainer_problems(ref, last, steps):
    """The Trainer's own counters: the final global step, and the learning rate of every step."""
    problems = []
    if last["global_step"] != steps:
        problems.append(f"the last launch ended at global step {last['global_step']}, not {steps}")
    for step, lr in ref["lr"].items():
        if last["lr"].get(step) != lr:
            problems.append(f"step {step}: learning rate {last['lr'].get(step)}, the "
                            f"uninterrupted run's {lr}")
            break
    return problems


if __name__ == "__main__":
    main()
