"""A token stream resumed on another world size, under torchrun (scripts/demo.sh runs it):

    torchrun --nproc_per_node=2 examples/tokens/resume_demo.py DIR --steps 0:6 --save CKPT
    torchrun --nproc_per_node=3 examples/tokens/resume_demo.py DIR --steps 6:12 --resume CKPT \\
        --check

DIR holds the sources s0 and s1 (.bin/.idx; examples/tokens/write_indexed.py writes a demo pair).
Each rank reads its share of steps [FIRST, LAST) through a DataLoader worker; rank 0 gathers the
global sequences the ranks read, with a hash of each row, into DIR/seen.json. --save writes the
stream's checkpoint after LAST; --resume continues from one, on any number of ranks. --check
compares every sequence read so far with the one-rank stream computed here: each read once,
token for token the same; exit status 1 otherwise.
"""
import argparse
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

from distsampler.launch import destroy_distributed, init_distributed
from distsampler.tokens import TokenStream

SEQ_LEN, GLOBAL_BATCH = 64, 12


def stream(folder, **kwargs):
    return TokenStream([(os.path.join(folder, "s0"), 0.7), (os.path.join(folder, "s1"), 0.3)],
                       seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH, seed=0, packing="best-fit",
                       **kwargs)


def rows(batch):
    """{global sequence: sha256 of its tokens and last label} of a batch."""
    full = torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
    return {int(k): hashlib.sha256(row.numpy().tobytes()).hexdigest()[:16]
            for k, row in zip(batch["sequence"], full)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--steps", required=True, help="FIRST:LAST, the steps to read")
    parser.add_argument("--save", help="the checkpoint to write after LAST")
    parser.add_argument("--resume", help="the checkpoint to continue from")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    first, last = (int(x) for x in args.steps.split(":"))
    rank, world, _ = init_distributed("gloo")
    s = stream(args.folder)
    if args.resume:
        s.load_state_dict(torch.load(args.resume)["stream"])
    if s.step != first:
        sys.exit(f"the stream stands at step {s.step}, not {first}")
    mine = {}
    batches = s.loader(num_workers=1)
    for _ in range(last - first):  # one batch per step: micro_batch is the rank's whole share
        mine.update(rows(next(batches)))
    state = s.state_dict()
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        path = os.path.join(args.folder, "seen.json")
        seen = json.load(open(path)) if args.resume and os.path.exists(path) else []
        seen += [[k, h] for part in gathered for k, h in sorted(part.items())]
        json.dump(seen, open(path, "w"))
        print(f"steps {first}..{last - 1} on {world} ranks: sequences "
              f"{min(min(p) for p in gathered)}..{max(max(p) for p in gathered)}")
        if args.save:
            torch.save({"stream": state}, args.save)
            print(f"checkpoint after step {last - 1}: {args.save}")
        if args.check:
            one = stream(args.folder, rank=0, world_size=1)
            reference = {}
            for batch, _ in zip(one, range(last)):
                reference.update(rows(batch))
            keys = [k for k, _ in seen]
            ok = sorted(keys) == sorted(reference) and len(set(keys)) == len(keys) and \
                all(reference[k] == h for k, h in seen)
            print(f"sequences 0..{len(reference) - 1}: each read once across the runs, token for "
                  f"token the one-rank stream: {'OK' if ok else 'MISMATCH'}")
            if not ok:
                destroy_distributed()
                sys.exit(1)
    destroy_distributed()


if __name__ == "__main__":
    main()
