"""A synchronous data-parallel training loop under torchrun that checkpoints its sampler and
resumes on any number of processes: the pattern to copy, and the program the torchrun
kill-and-resume test runs (tests/dist/torchrun_kill_resume.py). The Python twin of
examples/mpi_checkpoint.cc, writing the same logs.

    PYTHONPATH=build/python /usr/bin/python3 -m distsampler.torchrun --nproc_per_node=4 \\
        --redirects 2 --tee 2 examples/torch_checkpoint.py --checkpoint ckpt.pt --log-dir logs
    (killed; later, on 3 processes, the same command with --nproc_per_node=3 --attempt 1)

Each step every rank takes a batch from a DataLoader over the sampler (num_workers=0, so the
sampler hands out exactly what training took), then all ranks meet in an all-reduce (the
gradient exchange). With DataLoader workers, which fetch batches ahead of the loop, checkpoint
the loader instead: examples/torch_checkpoint_workers.py (distsampler.data.DataLoader, whose
state_dict() counts the batches the loop received; also for the policy samplers). Every --checkpoint-every steps and at each epoch's end rank 0 saves
{"sampler": sampler.state_dict()} with torch.save, atomically. Each rank appends
"epoch consumed_after_step world_size index" lines to <log-dir>/run<R>.rank<r>.log; rank 0
writes <log-dir>/run<R>.start ("epoch consumed world_size", the state it resumed from).
--kill-rank/--kill-step make that rank SIGKILL itself before that step (counted from this run's
start), as a crash would. --rank-seed R=S starts rank R with seed S (a misconfigured rank: every
rank then stops before the first batch with ConfigurationMismatch).
"""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from distsampler.launch import destroy_distributed
from distsampler.torch import ConfigurationMismatch, DistributedSampler


class Indices(Dataset):
    """Item i is i: the batches show which indices were read."""

    def __init__(self, size):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return index


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=1001)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--order", default="torch", choices=["torch", "feistel"])
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--batch", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--checkpoint", default="checkpoint.pt")
    p.add_argument("--log-dir", default=".")
    p.add_argument("--attempt", default="0", help="this run's number in the logs' names")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--rank-seed", default=None, help="R=S: rank R uses seed S")
    return p.parse_args()


def save(path, sampler):
    """Write to a temporary name, then rename: a crash mid-write leaves the previous one."""
    tmp = path + ".tmp"
    torch.save({"sampler": sampler.state_dict()}, tmp)
    os.replace(tmp, path)


def train(args, rank, world):
    seed = args.seed
    if args.rank_seed is not None:
        bad_rank, bad_seed = (int(x) for x in args.rank_seed.split("="))
        seed = bad_seed if rank == bad_rank else seed
    sampler = DistributedSampler(Indices(args.size), seed=seed, order=args.order,
                                 drop_last=args.drop_last)  # world size and rank from dist
    loader = DataLoader(Indices(args.size), batch_size=args.batch, sampler=sampler)
    start_epoch, consumed = 0, 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)["sampler"]
        sampler.load_state_dict(state)  # saved by any number of ranks
        start_epoch, consumed = state["epoch"], state["consumed"]
    if rank == 0:
        with open(os.path.join(args.log_dir, f"run{args.attempt}.start"), "w") as f:
            f.write(f"{start_epoch} {consumed} {world}\n")
    log = open(os.path.join(args.log_dir, f"run{args.attempt}.rank{rank}.log"), "w")
    step = 0
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # the loaded epoch keeps its position; later ones start at 0
        # Iterating checks, once, that every rank runs the same sampler configuration.
        for batch in loader:
            if rank == args.kill_rank and step == args.kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            done = sampler.state_dict()["consumed"]  # the job's positions consumed after this
            log.write("".join(f"{epoch} {done} {world} {int(i)}\n" for i in batch))
            log.flush()
            gradient = torch.tensor([float(len(batch))])
            dist.all_reduce(gradient)  # the synchronous step
            step += 1
            if rank == 0 and step % args.checkpoint_every == 0:
                save(args.checkpoint, sampler)
        if rank == 0:
            save(args.checkpoint, sampler)  # the epoch complete: a resume moves to the next
    log.close()


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    code = 0
    try:
        train(args, rank, world)
    except ConfigurationMismatch as error:
        # Every rank gets the same verdict: report it, each line tagged with the rank.
        sys.stderr.write("".join(f"rank {rank}: error: {line}\n"
                                 for line in str(error).splitlines()))
        sys.stderr.flush()
        code = 1
    destroy_distributed()
    return code


if __name__ == "__main__":
    sys.exit(main())
