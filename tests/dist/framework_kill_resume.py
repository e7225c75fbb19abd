"""A framework's own trainer on a token stream, killed and resumed on other world sizes (issue 39),
over the corpus of docs/tokens_run.md, on the CPU:
- hf: Hugging Face Transformers' Trainer, examples/hf/train_llama.py (a tiny Llama from a config,
  distsampler.hf's TokenStreamTrainer) under torchrun (gloo), resumed by the Trainer's
  train(resume_from_checkpoint=...);
- olmo_core: OLMo-core's Trainer, examples/olmo_core/train_llama.py (a tiny llama_like Transformer,
  distsampler.olmo_core's TokenStreamDataLoader, OLMo-core's DDP) under torchrun (gloo), resumed
  by the Trainer loading its save folder's latest checkpoint (the same command again);
- litgpt: the real `litgpt pretrain --config examples/litgpt/tiny_llama.yaml` (a tiny Llama-style
  litgpt.Config, distsampler.litgpt's TokenStreamData), resumed by `--resume auto`. LitGPT runs
  more than one device only with FSDP, which Lightning refuses on the CPU: the check asserts that
  refusal (so that it notices when LitGPT can), then runs what LitGPT allows, one process.

- uninterrupted: W=1 for --steps S steps;
- resumed: W=2 (litgpt: 1), a random rank SIGKILLed at a random step past a checkpoint; resumed by
  the framework's own resume from its last checkpoint on W=3 (litgpt: 1), rank 0 SIGKILLed inside
  the save of a later checkpoint (the example's --kill-in-save; the save must be left unfinished,
  and not taken by the resume); resumed on W=1 to step S;
- both runs extended to step S + 4 from their final checkpoint by the framework's own resume, on
  W=2 (litgpt: 1), each from the final checkpoint in another folder (hf: moved out of
  output_dir, --resume-from; olmo_core: every checkpoint moved out of the save folder,
  --load-path; litgpt: final/ copied, --resume). LitGPT runs with gradient accumulation 2.

The check is tokens_kill_resume.py's ledger (its functions, imported): every global sequence of
[0, S x B) trained exactly once, in its step, with the uninterrupted run's bytes, each launch's
ranks training the steps from their checkpoint's on, in order; again to step S + 4 with the
extensions. Then the framework's own counters: the last launch ends at global step S (litgpt: the
final checkpoint's step_count, its iter_num twice that and its stream at that step),
and the learning rate of every step (the Trainer's log history, checkpoints' included; OLMo-core's
scheduler's, recorded after each step; LitGPT's CSV logs, every launch's) is the uninterrupted
run's (a resume that restarted the schedule or repeated steps would not). Then the broken variant
must fail it: the same last resume with the stream's state left out of the checkpoint, where the
framework's own resume takes over.

usage: framework_kill_resume.py {hf,litgpt,olmo_core} PYTHON_PACKAGE_DIR [--steps S] [--seed N]
                                [--work DIR] [--no-broken]
Run with the interpreter of the framework's venv (hf: .venv, requirements/torch2.txt; litgpt and
olmo_core: .venv-llm, requirements/llm.txt), which has megatron-core for the corpus.
"""
import argparse
import csv
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tokens_kill_resume import (EXAMPLES, GLOBAL_BATCH, check, counted,  # noqa: E402
                                kill_step_of, kill_windows, read_log, stream_hash, torchrun)

ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_SEED = 20261205
CHECKPOINT_EVERY = 4  # the examples' --save-steps default, tiny_llama.yaml's save_interval


def done(out, attempt):
    with open(os.path.join(out, f"done-{attempt}.json")) as f:
        return json.load(f)


class Torchrun:
    """A framework whose example script runs under torchrun, one rank per process."""
    worlds = [2, 3, 1]
    resume = ["--resume"]
    killed = "Signal 9 (SIGKILL)"  # in torchrun's output

    def __init__(self, package_dir, work, steps):
        self.package_dir, self.work, self.steps = package_dir, work, steps

    def preflight(self):
        pass

    def launch(self, out, world, attempt, resume=False, kill=None, broken=False, steps=None,
               extra=(), kill_in_save=None):
        argv = ["--data", os.path.join(self.work, "corpus"), "--steps", str(steps or self.steps),
                "--save-steps", str(CHECKPOINT_EVERY), "--global-batch", str(GLOBAL_BATCH),
                "--attempt", str(attempt)] + (self.resume if resume else []) + list(extra)
        if kill:
            argv += ["--kill-rank", str(kill[0]), "--kill-step", str(kill[1])]
        if kill_in_save is not None:
            argv += ["--kill-in-save", str(kill_in_save)]
        if broken:
            argv.append("--no-stream-state")
        return torchrun(self.package_dir, world, argv, os.path.join(self.work, out),
                        timeout=300, script=self.script)

    def kill_in_save(self, out, world, attempt, start, window):
        """A launch whose rank 0 is killed inside the save of the first checkpoint of `window`
        past this launch's first (--kill-in-save), or None where the framework's example has no
        such kill: (the CompletedProcess, what happened). The save must be left unfinished
        (interrupted()), and the harness's last_checkpoint, as the framework's resume, must not
        take it."""
        if self.interrupted is None:
            return None
        step = max(start + 2 * CHECKPOINT_EVERY, (window[0] + CHECKPOINT_EVERY - 1)
                   // CHECKPOINT_EVERY * CHECKPOINT_EVERY)
        r = self.launch(out, world, attempt, resume=True, kill_in_save=step)
        folder = os.path.join(self.work, out)
        assert self.interrupted(folder, step), (
            f"the save of step {step} was not interrupted: {sorted(os.listdir(folder))}\n"
            f"{r.stdout[-3000:]}")
        assert self.last_checkpoint(folder) < step
        return r, f"rank 0 killed inside the save of step {step}"

    interrupted = None  # (folder, step) -> whether step's save was left unfinished there

    def extend(self, out, world, attempt, steps):
        """The run in `out`, ended at self.steps, extended from its final checkpoint to `steps`
        by the framework's own resume."""
        return self.launch(out, world, attempt, resume=True, steps=steps)

    def was_killed(self, r):
        return r.returncode != 0 and self.killed in r.stdout


class HF(Torchrun):
    script = os.path.join(ROOT, "examples", "hf", "train_llama.py")
    package = "transformers"

    @staticmethod
    def last_checkpoint(out):
        """The newest checkpoint the Trainer's state was written to (written last by the
        Trainer: a save killed before it is not resumed from)."""
        return max(int(n.split("-")[1]) for n in os.listdir(out) if n.startswith("checkpoint-")
                   and os.path.isfile(os.path.join(out, n, "trainer_state.json")))

    @staticmethod
    def interrupted(folder, step):
        """checkpoint-N holds the model (and the stream's state), not the Trainer's state."""
        checkpoint = os.path.join(folder, f"checkpoint-{step}")
        return os.path.isdir(checkpoint) and not os.path.exists(
            os.path.join(checkpoint, "trainer_state.json"))

    def extend(self, out, world, attempt, steps):
        """From the final checkpoint moved out of output_dir (as a run moved to another machine
        or bucket), by --resume-from."""
        final = os.path.join(self.work, out, f"checkpoint-{self.steps}")
        moved = os.path.join(self.work, f"moved-{out}", f"checkpoint-{self.steps}")
        os.makedirs(os.path.dirname(moved))
        shutil.move(final, moved)
        return self.launch(out, world, attempt, steps=steps, extra=["--resume-from", moved])

    @staticmethod
    def counters(out, attempt):
        """(the last launch's global step, {step: learning rate}) of the Trainer's log history."""
        d = done(out, attempt)
        return d["global_step"], {int(k): v for k, v in d["lr"].items()}


class OLMoCore(Torchrun):
    script = os.path.join(ROOT, "examples", "olmo_core", "train_llama.py")
    package = "ai2-olmo-core"
    resume = []  # the Trainer loads its save folder's latest checkpoint by itself

    @staticmethod
    def last_checkpoint(out):
        return max(int(n[4:]) for n in os.listdir(out)
                   if n.startswith("step") and n[4:].isdigit())

    def extend(self, out, world, attempt, steps):
        """From the final checkpoint moved out of the save folder with the others (as a run moved
        to another machine), by the Trainer's load_path (--load-path)."""
        folder, moved = os.path.join(self.work, out), os.path.join(self.work, f"moved-{out}")
        os.makedirs(moved)
        for name in os.listdir(folder):
            if name.startswith("step") and name[4:].isdigit():
                shutil.move(os.path.join(folder, name), os.path.join(moved, name))
        return self.launch(out, world, attempt, resume=True, steps=steps,
                           extra=["--load-path", os.path.join(moved, f"step{self.steps}")])

    @staticmethod
    def interrupted(folder, step):
        """OLMo-core's Checkpointer writes stepN-tmp and renames it stepN: killed before."""
        return os.path.isdir(os.path.join(folder, f"step{step}-tmp")) and not os.path.exists(
            os.path.join(folder, f"step{step}"))

    @staticmethod
    def counters(out, attempt):
        """(the last launch's global step, {step: learning rate}), every launch's rates, the later
        launches' over the earlier's."""
        rates = {}
        for a in range(attempt + 1):
            with open(os.path.join(out, f"lr.a{a}.tsv")) as f:
                rates.update({int(k): float(v) for k, v in (line.split() for line in f)})
        return done(out, attempt)["global_step"], rates


class LitGPT(Torchrun):
    """`litgpt pretrain` run in the work folder (the config names corpus/ relative to it), its
    ledger written by litgpt_ledger.log (the config's batch_log, given on the command line), which
    reads the attempt, the kill and the broken variant from the environment."""
    package = "litgpt"
    worlds = [1, 1, 1]
    resume = ["--resume", "auto"]
    config = os.path.join(ROOT, "examples", "litgpt", "tiny_llama.yaml")
    seq_len = 64  # the config's block_size
    accumulation = 2  # micro-batches a step (the config's own is 1)
    fsdp_refusal = "FSDP is only available on GPU"

    def preflight(self):
        r = self.litgpt("two-devices", 0, ["--devices", "2"], {}, timeout=120)
        assert r.returncode != 0 and self.fsdp_refusal in r.stdout, (
            f"LitGPT on 2 CPU devices did not fail with {self.fsdp_refusal!r}: it may now run "
            f"more than one device here, which this check should then do:\n{r.stdout[-3000:]}")
        refusal = next(line for line in r.stdout.splitlines() if self.fsdp_refusal in line)
        print(f"2 devices: LitGPT refuses on the CPU: {refusal.strip()}", flush=True)

    def launch(self, out, world, attempt, resume=False, kill=None, broken=False, steps=None,
               extra=(), kill_in_save=None):
        assert world == 1
        env = {"KILL_RANK": str(kill[0]), "KILL_STEP": str(kill[1])} if kill else {}
        if kill_in_save is not None:
            env["KILL_IN_SAVE"] = str(kill_in_save)
        if broken:
            env["LEDGER_NO_STREAM_STATE"] = "1"
        return self.litgpt(out, attempt, (self.resume if resume else []) + list(extra), env,
                           steps=steps)

    def extend(self, out, world, attempt, steps):
        """From final/lit_model.pth copied to another folder (as a run moved to another machine)
        and given to --resume there, with a larger train.max_tokens."""
        moved = os.path.join(f"moved-{out}", "final")
        shutil.copytree(os.path.join(self.work, out, "final"), os.path.join(self.work, moved))
        return self.launch(out, world, attempt, steps=steps,
                           extra=["--resume", os.path.join(moved, "lit_model.pth")])

    def litgpt(self, out, attempt, extra, env, timeout=300, steps=None):
        """A CompletedProcess (stdout and stderr together); the process group is killed
        afterwards (a DataLoader worker left behind). LitGPT accumulates gradients over
        ACCUMULATION micro-batches a step."""
        os.makedirs(os.path.join(self.work, out), exist_ok=True)
        cmd = [os.path.join(os.path.dirname(sys.executable), "litgpt"), "pretrain",
               "--config", self.config, "--out_dir", out,
               "--train.max_tokens", str((steps or self.steps) * GLOBAL_BATCH * self.seq_len),
               "--train.micro_batch_size", str(GLOBAL_BATCH // self.accumulation),
               "--data.init_args.batch_log", "litgpt_ledger.log"] + list(extra)
        e = dict(os.environ, PYTHONPATH=f"{self.package_dir}{os.pathsep}{HERE}",
                 OMP_NUM_THREADS="1", LEDGER_DIR=os.path.join(self.work, out),
                 LEDGER_ATTEMPT=str(attempt), **env)
        p = subprocess.Popen(cmd, cwd=self.work, env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = p.communicate(timeout=timeout)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        return subprocess.CompletedProcess(cmd, p.returncode, output)

    def was_killed(self, r):
        return r.returncode == -signal.SIGKILL

    @staticmethod
    def last_checkpoint(out):
        """The newest step-N holding lit_model.pth (what `--resume auto` takes)."""
        return max(int(n.split("-")[1]) for n in os.listdir(out) if n.startswith("step-")
                   and os.path.isfile(os.path.join(out, n, "lit_model.pth")))

    @staticmethod
    def interrupted(folder, step):
        """Fabric writes lit_model.pth to a temporary file and moves it in place: killed
        before, step-N has no lit_model.pth."""
        checkpoint = os.path.join(folder, f"step-{step:08d}")
        return os.path.isdir(checkpoint) and not os.path.exists(
            os.path.join(checkpoint, "lit_model.pth"))

    @classmethod
    def counters(cls, out, attempt):
        """(the final checkpoint's step_count if its iter_num is accumulation times that, and
        its stream at that step, {step: learning rate}) from every launch's CSV log, the
        later launches' over the earlier's."""
        import torch
        state = torch.load(os.path.join(out, "final", "lit_model.pth"), weights_only=False)
        stream = state["train_dataloader"]["stream"]
        at = stream.get("consumed", -1) // GLOBAL_BATCH
        step = state["step_count"] if state["iter_num"] == cls.accumulation * state[
            "step_count"] and at == state["step_count"] else (
            f"iter_num {state['iter_num']}, step_count {state['step_count']}, the stream at "
            f"step {at} ({stream.get('consumed')} sequences consumed)")
        rates = {}
        versions = glob.glob(os.path.join(out, "logs", "csv", "version_*", "metrics.csv"))
        for path in sorted(versions, key=lambda v: int(v.split("version_")[1].split(os.sep)[0])):
            with open(path) as f:
                for row in csv.DictReader(f):
                    if row.get("learning_rate"):
                        rates[int(row["iter"]) // cls.accumulation] = float(row["learning_rate"])
        return step, rates


FRAMEWORKS = {"hf": HF, "litgpt": LitGPT, "olmo_core": OLMoCore}


def main():
    p = argparse.ArgumentParser(description="A framework's trainer on a token stream killed and "
                                "resumed")
    p.add_argument("framework", choices=sorted(FRAMEWORKS))
    p.add_argument("package_dir")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the kills' random choices")
    p.add_argument("--work", help="keep everything here (default: a temporary folder, removed)")
    p.add_argument("--no-broken", action="store_true")
    args = p.parse_args()
    args.package_dir = os.path.abspath(args.package_dir)  # LitGPT runs in the work folder
    began = time.time()
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    try:
        run(args, FRAMEWORKS[args.framework](args.package_dir, work, args.steps),
            random.Random(args.seed), work)
    except BaseException:
        print(f"(kept {work})", flush=True)
        raise
    if not args.work:
        shutil.rmtree(work)
    print(f"{args.framework} kill-and-resume: passed ({time.time() - began:.0f} s)", flush=True)


def run(args, fw, rng, work):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "prepare_corpus.py"),
                        os.path.join(work, "corpus")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"prepare_corpus.py failed:\n{r.stdout}{r.stderr}"
    s, c = args.steps, CHECKPOINT_EVERY
    from importlib.metadata import version
    print(f"{fw.package} {version(fw.package)}", flush=True)
    fw.preflight()

    t = time.time()
    r = fw.launch("uninterrupted", 1, 0)
    assert r.returncode == 0, f"the uninterrupted run failed:\n{r.stdout[-5000:]}"
    print(f"uninterrupted: W=1, {s} steps ({time.time() - t:.0f} s)", flush=True)

    resumed = os.path.join(work, "resumed")
    launches, broken = [], None
    for attempt, world in enumerate(fw.worlds):
        start = fw.last_checkpoint(resumed) if attempt else 0
        killed = attempt + 1 < len(fw.worlds)
        where, kill, r = f"attempt {attempt}: W={world} from step {start}, ", None, None
        t = time.time()
        if killed and attempt == 1:  # the second kill inside a save, where the check has one
            in_save = fw.kill_in_save("resumed", world, attempt, start, kill_windows(s)[attempt])
            if in_save:
                r, what = in_save
                where += what
        if killed and r is None:
            kill_step = kill_step_of(rng, start, c, kill_windows(s)[attempt])
            kill = (rng.randrange(world), kill_step)
            where += f"rank {kill[0]} killed at step {kill_step}"
        elif not killed:
            where += f"to step {s}"
            if not args.no_broken:
                broken = os.path.join(work, "broken")
                shutil.copytree(resumed, broken)
        if r is None:
            r = fw.launch("resumed", world, attempt, resume=attempt > 0, kill=kill)
        if killed:
            assert fw.was_killed(r), f"attempt {attempt}:\n{r.stdout[-5000:]}"
        else:
            assert r.returncode == 0, f"attempt {attempt} failed:\n{r.stdout[-5000:]}"
        print(f"{where} ({time.time() - t:.0f} s)", flush=True)
        launches.append((start, read_log(resumed, attempt)))

    ref = os.path.join(work, "uninterrupted")
    reference, _, problems = counted([(0, read_log(ref, 0))], s)
    kept, rolled_back, order = counted(launches, s)
    problems += order + check(reference, kept, s, GLOBAL_BATCH)
    problems += counter_problems(fw.counters(ref, 0), fw.counters(resumed, len(fw.worlds) - 1), s)
    assert not problems, "\n".join(problems)
    assert stream_hash(kept) == stream_hash(reference)
    print(f"the same global token stream: {s * GLOBAL_BATCH} sequences, each once, sha256 "
          f"{stream_hash(kept)}; {rolled_back} sequences trained after a checkpoint and rolled "
          f"back; the trainer ends at global step {s} with the uninterrupted run's learning rate "
          "at every step", flush=True)

    # Each run extended from its final checkpoint by the framework's own resume: the steps
    # past it must continue the stream (a final checkpoint a step ahead skips that step's
    # sequences; one a step behind trains them twice).
    more, last = s + c, len(fw.worlds)
    t = time.time()
    for out in ("uninterrupted", "resumed"):
        r = fw.extend(out, fw.worlds[0], last, more)
        assert r.returncode == 0, f"{out}: the extension failed:\n{r.stdout[-5000:]}"
    reference, _, problems = counted([(0, read_log(ref, 0)), (s, read_log(ref, last))], more)
    kept, _, order = counted(launches + [(s, read_log(resumed, last))], more)
    problems += order + check(reference, kept, more, GLOBAL_BATCH)
    assert not problems, "\n".join(problems)
    print(f"each run extended from its final checkpoint to step {more} (W={fw.worlds[0]}): "
          f"the same global token stream, {more * GLOBAL_BATCH} sequences, each once "
          f"({time.time() - t:.0f} s)", flush=True)

    if broken:
        start, last = launches[-1][0], len(fw.worlds) - 1
        r = fw.launch("broken", fw.worlds[-1], last, resume=True, broken=True)
        assert r.returncode == 0, f"the broken variant's launch failed:\n{r.stdout[-5000:]}"
        bad, _, problems = counted(launches[:-1] + [(start, read_log(broken, last))], s)
        problems += check(reference, bad, s, GLOBAL_BATCH)
        assert problems, "the check passed a resume without the stream's state"
        print(f"the check fails the stream's state left out (the trainer's own resume from "
              f"step {start} on W={fw.worlds[-1]}): {problems[0]}", flush=True)


def counter_problems(ref, last, steps):
    """The trainer's own counters, (global step, {step: learning rate}) of the uninterrupted run
    and of the resumed run's last launch: the final global step, and every step's rate."""
    problems = []
    if last[0] != steps:
        problems.append(f"the last launch ended at global step {last[0]}, not {steps}")
    if sorted(ref[1]) != list(range(1, steps + 1)):
        problems.append(f"the uninterrupted run recorded steps {sorted(ref[1])[:8]}...")
    for step, lr in sorted(ref[1].items()):
        if last[1].get(step) != lr:
            problems.append(f"step {step}: learning rate {last[1].get(step)}, the "
                            f"uninterrupted run's {lr}")
            break
    return problems


if __name__ == "__main__":
    main()
