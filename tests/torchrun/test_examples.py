"""The examples under the real launcher (torchrun, gloo, CPU) with 2 and 4 processes: what each
rank printed is checked against the samplers' own indices. Run by ctest (`torchrun_examples`);
DISTSAMPLER_PYTHON_DIR names the built package folder."""
import collections
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.environ.get("DISTSAMPLER_PYTHON_DIR", os.path.join(ROOT, "build", "python"))
sys.path.insert(0, PYTHON_DIR)

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)
import torch.utils.data as tud  # noqa: E402

from distsampler.torch import DistributedSampler  # noqa: E402


def torchrun(nproc, script, *args):
    """Runs `script` under torchrun; returns what the ranks wrote to stdout, rank by rank.

    Each rank's stdout is read from the file torchrun redirects it to: the processes share one
    console pipe, where a line of one rank can end up glued to another's (seen once in CI)."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as logs:
        # localhost:0: the rendezvous takes a free port, so parallel runs never collide.
        # --redirects/--tee 1: stdout to per-rank files (and the console, prefixed); 3 (both)
        # and the default 0 crash Debian's torchrun (see run_demos.sh).
        # --monitor_interval 0.1, torch 2's default: Debian's 1.13 checks its workers every 5 s, so
        # each launch outlived its ranks by up to 5 s.
        proc = subprocess.run(
            [sys.executable, "-m", "distsampler.torchrun", "--nnodes=1",
             f"--nproc_per_node={nproc}", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
             "--redirects", "1", "--tee", "1", "--monitor_interval", "0.1", "--log_dir", logs,
             os.path.join(ROOT, "examples", script), *args],
            env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        files = sorted(glob.glob(os.path.join(logs, "**", "stdout.log"), recursive=True))
        assert len(files) == nproc, (files, proc.stdout + proc.stderr)
        out = []
        for path in files:
            with open(path) as f:
                out.append(f.read())
    return "".join(out)


LINE = re.compile(r"^(exp\d) (\S+) rank=(\d+) epoch=(\d+) (batch|samples)=(\S+)$")


def parse(stdout):
    """{(variant, rank, epoch): [batch of indices, ...]} and {(variant, rank, epoch): samples}."""
    batches, samples = collections.defaultdict(list), {}
    for line in stdout.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        _, variant, rank, epoch, kind, value = match.groups()
        key = (variant, int(rank), int(epoch))
        if kind == "batch":
            batches[key].append([int(v) - 1 for v in value.split(",")])  # item i holds i + 1
        else:
            samples[key] = int(value)
    return batches, samples


def indices(cls, size, world_size, rank, epoch):
    sampler = cls(range(size), num_replicas=world_size, rank=rank)
    sampler.set_epoch(epoch)
    return list(sampler)


def batched(xs, size):
    return [xs[i:i + size] for i in range(0, len(xs), size)]


@pytest.mark.parametrize("nproc", [2, 4])
def test_experiment1_set_epoch(nproc):
    stdout = torchrun(nproc, "experiment1_set_epoch.py")
    batches, _ = parse(stdout)
    expected_variants = {"torch-forgot-set-epoch": (0, 0), "torch-set-epoch": (0, 1),
                         "distsampler-forgot-set-epoch": (0, 0),
                         "distsampler-auto-epoch": (0, 1)}
    assert {key[0] for key in batches} == set(expected_variants)
    for variant, epochs in expected_variants.items():
        for rank in range(nproc):
            for epoch, effective in enumerate(epochs):
                ours = indices(DistributedSampler, 16, nproc, rank, effective)
                assert ours == indices(tud.DistributedSampler, 16, nproc, rank, effective)
                assert batches[(variant, rank, epoch)] == batched(ours, 2), (variant, rank, epoch)
        for epoch in (0, 1):  # the ranks together read every item once
            read = sorted(i for r in range(nproc) for b in batches[(variant, r, epoch)] for i in b)
            assert read == list(range(16))
    # Forgetting set_epoch: PyTorch and ours repeat epoch 0 (ours warns); auto_epoch advances.
    assert batches[("torch-forgot-set-epoch", 0, 1)] == batches[("torch-forgot-set-epoch", 0, 0)]
    assert batches[("distsampler-forgot-set-epoch", 0, 1)] == \
        batches[("distsampler-forgot-set-epoch", 0, 0)]
    assert batches[("distsampler-auto-epoch", 0, 1)] != batches[("distsampler-auto-epoch", 0, 0)]
    for variant, says in (("distsampler-forgot-set-epoch", "replays epoch 0's order"),
                          ("distsampler-auto-epoch", "advances to epoch 1")):
        warnings = [line for line in stdout.splitlines()
                    if line.startswith(f"exp1 warning: {variant} ")]
        assert len(warnings) == 1, warnings
        assert "UserWarning" in warnings[0] and "set_epoch" in warnings[0] and says in warnings[0]


@pytest.mark.parametrize("nproc", [2, 4])
def test_experiment2_ddp_sharding(nproc):
    batches, samples = parse(torchrun(nproc, "experiment2_ddp_sharding.py"))
    for rank in range(nproc):
        for epoch in (0, 1):
            ours = indices(DistributedSampler, 8, nproc, rank, epoch)
            assert batches[("distsampler", rank, epoch)] == batched(ours, 4)
            assert samples[("distsampler", rank, epoch)] == 8 // nproc
            # Without a distributed sampler every rank reads the whole dataset.
            read = [i for b in batches[("shuffle", rank, epoch)] for i in b]
            assert sorted(read) == list(range(8))
            assert samples[("shuffle", rank, epoch)] == 8


def test_fashion_mnist_ddp_small():
    with tempfile.TemporaryDirectory() as out:
        stdout = torchrun(2, "fashion_mnist_ddp.py", "--out", out, "--train-size", "1200",
                          "--epochs", "3", "--batch-size", "50")
        with open(os.path.join(out, "fashion_mnist_loss.csv")) as f:
            rows = list(csv.DictReader(f))
        assert os.path.getsize(os.path.join(out, "fashion_mnist_loss.png")) > 10000
    steps = collections.Counter(row["variant"] for row in rows)
    # 1200 items, 2 ranks, batch 50: 12 steps an epoch with a distributed sampler, 24 without.
    assert steps == {"advancing": 36, "not-advancing": 36, "no-sampler": 72}
    last = {row["variant"]: int(row["samples"]) for row in rows}
    assert last == {"advancing": 3600, "not-advancing": 3600, "no-sampler": 7200}
    accuracy = {m.group(1): float(m.group(2)) for m in
                re.finditer(r"fashion-mnist (\S+): .*test_accuracy=([\d.]+)", stdout)}
    assert set(accuracy) == set(steps) and all(0.3 < a <= 1 for a in accuracy.values()), stdout


def test_token_stream_resume_demo(tmp_path):
    """examples/tokens/resume_demo.py, as scripts/demo.sh runs it: 2 ranks for 6 steps, a
    checkpoint, 3 ranks for 6 more; its --check against the one-rank stream passes, and fails
    when a sequence it read is not the stream's."""
    sys.path.insert(0, os.path.join(ROOT, "examples", "tokens"))
    from write_indexed import main as write_demo
    folder = str(tmp_path / "tokens")
    argv = sys.argv
    try:
        sys.argv = ["write_indexed.py", folder, "--sources", "2", "--documents", "300",
                    "--seed", "2"]
        write_demo()
    finally:
        sys.argv = argv
    ckpt = os.path.join(folder, "ckpt.pt")
    out = torchrun(2, "tokens/resume_demo.py", folder, "--steps", "0:6", "--save", ckpt)
    assert "steps 0..5 on 2 ranks: sequences 0..71" in out
    out = torchrun(3, "tokens/resume_demo.py", folder, "--steps", "6:12", "--resume", ckpt,
                   "--check")
    assert "steps 6..11 on 3 ranks: sequences 72..143" in out
    assert "sequences 0..143: each read once across the runs, token for token the one-rank " \
        "stream: OK" in out
    # A row read wrong (its hash changed in what the first run recorded) fails the check.
    seen_path = os.path.join(folder, "seen.json")
    with open(seen_path) as f:
        seen = json.load(f)[:72]
    seen[5][1] = "0" * 16
    with open(seen_path, "w") as f:
        json.dump(seen, f)
    with pytest.raises(AssertionError, match="MISMATCH"):
        torchrun(3, "tokens/resume_demo.py", folder, "--steps", "6:12", "--resume", ckpt,
                 "--check")
