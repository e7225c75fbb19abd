"""The token stream from libtorch, C++ only (include/distsampler/libtorch/tokens.h, through
examples/libtorch_tokens: torch::data's DataLoader over distsampler::libtorch::TokenStream), equal
to the Python stream (distsampler.tokens.TokenStream) batch for batch: tokens, labels,
loss_mask, position_ids, segment_ids, sequence and step, on the sources tests/dist/s3_tokens.py
writes, in these configurations:

1. W = 2, each rank, micro-batches of 2, concat packing on rank 0, best-fit on rank 1.
2. W = 3, rank 2, the loss masked across documents and after an "EOD" token (the token most
   frequent in those batches, so that both rules mask labels).
3. As 2, the C++ stream saved after 3 steps and a new one loaded from the state: the same
   batches as the Python stream read straight through.
4. --train: the example trains its model on the stream (a finite loss each step).
5. A micro-batch that does not divide the rank's share: one error naming micro_batch.

Usage: libtorch_tokens.py PYTHON_PACKAGE_DIR LIBTORCH_TOKENS_BINARY
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

SEQ_LEN, BATCH, STEPS = 63, 12, 8


def read_batches(path, micro):
    """The example's --out file: per batch its step, then the tensors."""
    raw = open(path, "rb").read()
    width = SEQ_LEN
    layout = [("tokens", np.int64, micro * width), ("labels", np.int64, micro * width),
              ("loss_mask", np.float32, micro * width), ("position_ids", np.int64, micro * width),
              ("segment_ids", np.int32, micro * width), ("sequence", np.int64, micro)]
    out, at = [], 0
    while at < len(raw):
        batch = {"step": int(np.frombuffer(raw, np.int64, 1, at)[0])}
        at += 8
        for name, dtype, count in layout:
            a = np.frombuffer(raw, dtype, count, at)
            at += a.nbytes
            batch[name] = a.reshape(micro, -1) if name != "sequence" else a
        out.append(batch)
    return out


def main(package_dir, binary):
    package_dir = os.path.abspath(package_dir)
    sys.path.insert(0, package_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from s3_tokens import prefixes, write_sources
    from distsampler.tokens import TokenStream
    problems = []
    root = tempfile.mkdtemp(prefix="distsampler-libtorch-tokens-")
    try:
        sources, _ = write_sources(root)
        local = prefixes(sources, root + "/")
        flags = [f"--source={','.join(shards)}={weight}" for shards, weight in local]
        plain = TokenStream(local, seq_len=SEQ_LEN, global_batch=BATCH, seed=5, world_size=3,
                            rank=2, micro_batch=2).loader()
        counts = np.bincount(np.concatenate([next(plain)["tokens"].numpy().ravel()
                                             for _ in range(STEPS * 2)]))
        eod = int(counts.argmax())
        masks = ["--mask-cross-document", "--eod-token", str(eod), "--eod-mask-loss"]
        masked = dict(world_size=3, rank=2, micro_batch=2, mask_cross_document=True,
                      eod_token=eod, eod_mask_loss=True)
        configs = [
            ("W = 2, rank 0", dict(world_size=2, rank=0, micro_batch=2), [], 0),
            ("W = 2, rank 1, best-fit", dict(world_size=2, rank=1, micro_batch=2,
                                             packing="best-fit"), ["--packing", "best-fit"], 0),
            (f"W = 3, rank 2, masks (EOD {eod})", masked, masks, 0),
            (f"W = 3, rank 2, masks (EOD {eod}), resumed after 3 steps", masked, masks, 3),
        ]
        for label, kwargs, extra, resume_at in configs:
            out = os.path.join(root, "batches.bin")
            command = [binary, *flags, "--seq-len", str(SEQ_LEN), "--global-batch", str(BATCH),
                       "--seed", "5", "--world-size", str(kwargs["world_size"]),
                       "--rank", str(kwargs["rank"]), "--micro-batch", str(kwargs["micro_batch"]),
                       "--steps", str(STEPS), "--resume-at", str(resume_at), "--out", out, *extra]
            run = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                problems.append(f"{label}: exit {run.returncode}: {run.stderr[-2000:]}")
                continue
            got = read_batches(out, kwargs["micro_batch"])
            stream = TokenStream(local, seq_len=SEQ_LEN, global_batch=BATCH, seed=5, **kwargs)
            want = stream.loader(num_workers=2)
            per_step = BATCH // kwargs["world_size"] // kwargs["micro_batch"]
            if len(got) != STEPS * per_step:
                problems.append(f"{label}: {len(got)} batches; expected {STEPS * per_step}")
            for i, batch in enumerate(got):
                expected = next(want)
                for key, value in batch.items():
                    theirs = expected[key]
                    theirs = theirs.numpy() if hasattr(theirs, "numpy") else theirs
                    if not np.array_equal(np.asarray(theirs), value):
                        problems.append(f"{label}: batch {i}, {key}: C++ {value!r} against "
                                        f"Python {theirs!r}")
                        break
                else:
                    continue
                break
            zeros = sum(int((b["loss_mask"] == 0).sum()) for b in got)
            print(f"part: {label}: {len(got)} batches of the C++ stream against the Python "
                  f"stream's ({zeros} labels masked): {len(problems)} problems so far")
            if "masks" in label and zeros == 0:
                problems.append(f"{label}: no label masked: the masks were not exercised")

        run = subprocess.run([binary, *flags, "--steps", "4", "--train", "--micro-batch", "4"],
                             capture_output=True, text=True, timeout=300)
        losses = [float(line.split()[-1]) for line in run.stdout.splitlines()
                  if line.startswith("step ")]
        print(f"part 4: --train: exit {run.returncode}, losses {losses}")
        if run.returncode != 0 or len(losses) != 4 or not all(np.isfinite(losses)):
            problems.append(f"--train: exit {run.returncode}: {run.stdout[-1000:]} "
                            f"{run.stderr[-1000:]}")

        run = subprocess.run([binary, *flags, "--micro-batch", "5"], capture_output=True,
                             text=True, timeout=120)
        line = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
        print(f"part 5: --micro-batch 5 of a share of 12: exit {run.returncode}: {line}")
        if run.returncode == 0 or "micro_batch = 5" not in line or "12" not in line:
            problems.append(f"micro_batch 5: exit {run.returncode}: {line!r}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for problem in problems:
        print("FAIL:", problem)
    print("libtorch_tokens:", "passed" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
