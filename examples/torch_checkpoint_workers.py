"""Data-parallel training under torchrun with DataLoader workers and prefetching, checkpointing
the loader and resuming mid-epoch on any number of processes: the pattern to copy, and the
program the workers kill-and-resume test runs (tests/dist/torchrun_kill_resume.py --workers).

    PYTHONPATH=build/python /usr/bin/python3 -m distsampler.torchrun --nproc_per_node=3 \\
        --redirects 2 --tee 2 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \\
        examples/torch_checkpoint_workers.py \\
        --sampler blended --checkpoint ckpt.pt --log-dir logs
    (stopped; later, on 2 processes, the same command with --nproc_per_node=2 --attempt 1)

The loader is distsampler.data.DataLoader (torch's DataLoader, same arguments, plus
state_dict/load_state_dict) with --num-workers workers fetching --prefetch-factor batches ahead,
or with --loader torchdata torchdata's StatefulDataLoader over the same samplers (they are
torchdata Stateful objects). Its state_dict() counts the batches the training loop received, not
what the workers fetched, so a checkpoint taken after k batches resumes at batch k+1, on any
world size. The state is the
same on every rank: rank 0 saves {"loader", "model", "optimizer"} every --checkpoint-every steps
and at each epoch's end, atomically (torch.save to a temporary name, then os.replace).

--sampler picks what the loader reads:
  distributed  distsampler.torch.DistributedSampler over --size samples (--order)
  blended      BlendedDistributedSampler: three datasets of --size samples in all, weights
               0.5/0.3/0.2, --samples-per-epoch stream positions an epoch
  weighted     WeightedDistributedSampler: weight 1 + i % 4 for sample i, --samples-per-epoch
               draws with replacement an epoch
  bucketed     BucketedBatchSampler (as batch_sampler=): lengths 1 + 37 i % 50, batches of
               --batch-size samples of similar length, windows of 4 batches
Each keeps exactly-once over the job's global positions of an epoch (samples, stream
positions, draws, or batches): rank r of W, in a pass that starts at global position C, reads
positions C + r, C + r + W, ...

Log: each rank appends one line per batch received to <log-dir>/run<R>.rank<r>.log:
"epoch start world rank b consumed i_1 ... i_k": the pass's epoch and start position C, the
world size W, the rank, the batch's number b in this pass, the loader's consumed position after
it (what a checkpoint taken now resumes at), and the batch's dataset indices in order. Rank 0
writes <log-dir>/run<R>.start ("epoch consumed world": the checkpoint it resumed from).
--kill-rank/--kill-step make that rank SIGKILL itself on receiving that step's batch (counted
from this run's start), as a crash would. --rank-checkpoint R=PATH makes rank R load PATH
instead: every rank then stops with CheckpointMismatch before the first batch.
"""
import argparse
import importlib
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import ConcatDataset, Dataset

from distsampler.data import DataLoader
from distsampler.launch import destroy_distributed
from distsampler.policies import (BlendedDistributedSampler, BucketedBatchSampler,
                                  WeightedDistributedSampler)
from distsampler.torch import CheckpointMismatch, ConfigurationMismatch, DistributedSampler

BLEND_WEIGHTS = (0.5, 0.3, 0.2)
WINDOW_BATCHES = 4


class Indices(Dataset):
    """Item i is offset + i (a real dataset returns a sample): the batches show what was read."""

    def __init__(self, size, offset=0):
        self.size, self.offset = size, offset

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.offset + index


def blend_sizes(size):
    """The three blended datasets' sizes, `size` samples in all."""
    return [size // 2, size // 3, size - size // 2 - size // 3]


def bucket_lengths(size):
    """Sequence lengths for the bucketed sampler (a real job reads them from its dataset)."""
    return [1 + (37 * i) % 50 for i in range(size)]


def make_loader_parts(args, num_replicas, rank):
    """(dataset, sampler, is_batch_sampler) for --sampler, on rank `rank` of `num_replicas`.
    The test builds the same with one replica to compute each epoch's global order."""
    kind, size, seed, drop_last = args.sampler, args.size, args.seed, args.drop_last
    if kind == "distributed":
        dataset = Indices(size)
        return dataset, DistributedSampler(dataset, num_replicas, rank, seed=seed,
                                           drop_last=drop_last, order=args.order), False
    if kind == "blended":
        parts, offset = [], 0
        for part_size in blend_sizes(size):
            parts.append(Indices(part_size, offset))
            offset += part_size
        # Indices into ConcatDataset(parts): sample i of dataset k is offset_k + i.
        sampler = BlendedDistributedSampler(parts, BLEND_WEIGHTS, args.samples_per_epoch,
                                            num_replicas, rank, seed, drop_last)
        return ConcatDataset(parts), sampler, False
    if kind == "weighted":
        dataset = Indices(size)
        weights = [1.0 + i % 4 for i in range(size)]
        return dataset, WeightedDistributedSampler(weights, args.samples_per_epoch, num_replicas,
                                                   rank, seed, drop_last, dataset=dataset), False
    if kind == "bucketed":
        return Indices(size), BucketedBatchSampler(bucket_lengths(size), args.batch_size,
                                                   num_replicas, rank, seed, drop_last,
                                                   window_batches=WINDOW_BATCHES), True
    raise ValueError(f"--sampler {kind!r}")


def loader_class(name):
    """distsampler.data.DataLoader, or torchdata's StatefulDataLoader (--loader torchdata)."""
    if name == "torchdata":
        return importlib.import_module("torchdata.stateful_dataloader").StatefulDataLoader
    return DataLoader


def sampler_position(loader_state):
    """The sampler's state ({"epoch", "consumed", ...}) inside a loader's state_dict(): ours
    keeps it under "sampler"; torchdata's nests it in its snapshot of the batch sampler."""
    if isinstance(loader_state, dict):
        if "epoch" in loader_state and "consumed" in loader_state:
            return loader_state
        for value in loader_state.values():
            found = sampler_position(value)
            if found is not None:
                return found
    return None


def make_model():
    torch.manual_seed(0)  # the same initial weights on every rank
    return torch.nn.Linear(4, 1)


def features(indices):
    """A toy regression problem on the sample indices: (inputs, targets)."""
    t = indices.double().unsqueeze(1) * 0.01
    x = torch.cat([torch.sin(t), torch.cos(t), torch.sin(3 * t), torch.cos(5 * t)], 1).float()
    return x, (x[:, :1] * 2 - x[:, 1:2]).detach()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--loader", default="distsampler", choices=["distsampler", "torchdata"])
    p.add_argument("--sampler", default="distributed",
                   choices=["distributed", "blended", "weighted", "bucketed"])
    p.add_argument("--size", type=int, default=1000, help="samples in the dataset(s)")
    p.add_argument("--samples-per-epoch", type=int, default=1000,
                   help="blended: stream positions, weighted: draws, per epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--order", default="torch", choices=["torch", "feistel"])
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--checkpoint", default="checkpoint.pt")
    p.add_argument("--log-dir", default=".")
    p.add_argument("--attempt", default="0", help="this run's number in the logs' names")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--rank-checkpoint", default=None, help="R=PATH: rank R loads PATH")
    return p.parse_args(argv)


def save(path, loader, model, optimizer):
    """Write to a temporary name, then rename: a crash mid-write leaves the previous one."""
    tmp = path + ".tmp"
    torch.save({"loader": loader.state_dict(), "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)


def checkpoint_path(args, rank):
    if args.rank_checkpoint is not None:
        other_rank, path = args.rank_checkpoint.split("=", 1)
        if rank == int(other_rank):
            return path
    return args.checkpoint


def train(args, rank, world):
    dataset, sampler, batched = make_loader_parts(args, world, rank)
    options = dict(num_workers=args.num_workers, persistent_workers=args.persistent_workers)
    if args.num_workers:
        options["prefetch_factor"] = args.prefetch_factor
    make_loader = loader_class(args.loader)
    if batched:
        loader = make_loader(dataset, batch_sampler=sampler, **options)
    else:
        loader = make_loader(dataset, batch_size=args.batch_size, sampler=sampler, **options)
    model = make_model()
    path = checkpoint_path(args, rank)
    checkpoint = torch.load(path) if os.path.exists(path) else None
    if checkpoint is not None:
        # Collective: the ranks compare what they load; any difference stops every rank.
        loader.load_state_dict(checkpoint["loader"])  # saved by any number of ranks
        model.load_state_dict(checkpoint["model"])
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
    # Where this run starts (the loader's own state_dict() would do too, but torchdata's
    # starts its workers, and the pass, when asked before the first iter()).
    position = sampler_position(checkpoint["loader"] if checkpoint else sampler.state_dict())
    if rank == 0:
        with open(os.path.join(args.log_dir, f"run{args.attempt}.start"), "w") as f:
            f.write(f"{position['epoch']} {position['consumed']} {world}\n")
    first_epoch = position["epoch"]
    if checkpoint is not None and checkpoint["loader"].get("_iterator_finished"):
        # torchdata's state after an epoch's last batch: its next iter() starts a new epoch.
        # (Ours resumes that epoch's empty rest; the loop below then moves on.)
        first_epoch += 1
    log = open(os.path.join(args.log_dir, f"run{args.attempt}.rank{rank}.log"), "w")
    step = 0
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)  # the loaded epoch keeps its position; later ones start at 0
        start = position["consumed"] if epoch == position["epoch"] else 0  # this pass's start
        for b, batch in enumerate(loader):
            if rank == args.kill_rank and step == args.kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            # A checkpoint taken now resumes here.
            consumed = sampler_position(loader.state_dict())["consumed"]
            log.write(f"{epoch} {start} {world} {rank} {b} {consumed} "
                      + " ".join(str(int(i)) for i in batch) + "\n")
            log.flush()
            x, y = features(batch)
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()  # the gradient all-reduce: the ranks step together
            optimizer.step()
            step += 1
            if rank == 0 and step % args.checkpoint_every == 0:
                save(args.checkpoint, loader, model, optimizer)
        if rank == 0:
            save(args.checkpoint, loader, model, optimizer)  # complete: a resume moves on
    log.close()


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    code = 0
    try:
        train(args, rank, world)
    except (CheckpointMismatch, ConfigurationMismatch) as error:
        # Every rank gets the same verdict: report it, each line tagged with the rank.
        sys.stderr.write("".join(f"rank {rank}: error: {line}\n"
                                 for line in str(error).splitlines()))
        sys.stderr.flush()
        code = 1
    destroy_distributed()
    return code


if __name__ == "__main__":
    sys.exit(main())
