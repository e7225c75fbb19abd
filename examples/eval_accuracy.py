"""Distributed evaluation that counts every test sample once: Fashion-MNIST test accuracy under
torchrun, four ways.

  single-process     rank 0 alone over the whole test set (the reference)
  distsampler-uneven distsampler.policies.DistributedEvalSampler: rank r reads ceil((n - r) / W)
                     samples, no repeats
  distsampler-mask   the same sampler with padded=True, with_mask=True and MaskedDataset: every
                     rank takes the same steps (as PyTorch's sampler), each batch carries a mask
                     and the padded repeats are left out of the counts
  torch-padded       torch.utils.data.DistributedSampler: pads every rank to ceil(n / W) by
                     repeating the first samples, which the counts then include

Each distributed variant sums (correct, count) over ranks with all_reduce. With n = 10,000 test
images and 3 ranks, PyTorch's sampler evaluates 10,002 predictions, so its accuracy is not the
single-process one; both of distsampler's modes give it exactly.

The model is a nearest-class-mean classifier (deterministic, no training loop): the mean image of
each class over the first --train-size training images, in float64.

Run under torchrun (gloo, CPU), from the repository root after the build:
    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 -m distsampler.torchrun \
        --nproc_per_node=3 --redirects 2 --tee 2 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \
        examples/eval_accuracy.py

Rank 0 prints `eval VARIANT correct=C count=N accuracy=A steps=MIN..MAX` per variant (steps: the
fewest and most batches a rank took).
"""
import argparse
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler as TorchSampler

from distsampler.launch import destroy_distributed
from distsampler.policies import DistributedEvalSampler, MaskedDataset

import fashion_mnist_ddp  # examples/, beside this script


def load(prefix, limit):
    """Fashion-MNIST images (flattened, in [0, 1], float64) and labels, from the DDP example's
    reader of Debian's IDX files."""
    x, y = fashion_mnist_ddp.load(prefix, limit).tensors
    return TensorDataset(x.double(), y)


class NearestMean(torch.nn.Module):
    """argmin_c |x - mean_c|^2 = argmax_c (x . mean_c - |mean_c|^2 / 2): a linear layer."""

    def __init__(self, train):
        super().__init__()
        x, y = train.tensors
        means = torch.stack([x[y == c].mean(0) for c in range(10)])
        self.weight, self.bias = means, -0.5 * (means * means).sum(1)

    def forward(self, x):
        return x @ self.weight.T + self.bias


def counts(model, loader, masked):
    """(correct, count, steps) over this rank's batches; with `masked`, each batch is
    ((images, labels), mask) and only the real samples count."""
    correct = count = steps = 0
    with torch.no_grad():
        for batch in loader:
            (x, y), mask = batch if masked else (batch, torch.ones(len(batch[1]), dtype=torch.bool))
            right = model(x).argmax(1) == y
            correct += int(right[mask].sum())
            count += int(mask.sum())
            steps += 1
    return correct, count, steps


def write(line):
    """One write(2) per line: under torchrun the ranks may share the console."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def report(variant, correct, count, steps):
    if dist.get_rank() == 0:
        write(f"eval {variant} correct={correct} count={count} accuracy={correct / count:.6f} "
              f"steps={steps[0]}..{steps[1]}")


def distributed(variant, model, loader, masked=False):
    correct, count, steps = counts(model, loader, masked)
    totals = torch.tensor([correct, count], dtype=torch.int64)
    dist.all_reduce(totals)  # sum over ranks
    fewest, most = torch.tensor([steps]), torch.tensor([steps])
    dist.all_reduce(fewest, op=dist.ReduceOp.MIN)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    report(variant, int(totals[0]), int(totals[1]), (int(fewest), int(most)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-size", type=int, default=10000)
    parser.add_argument("--test-size", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = NearestMean(load("train", args.train_size))
    test = load("t10k", args.test_size)
    if dist.get_rank() == 0:
        write(f"eval: {dist.get_world_size()} ranks, {len(test)} test images, batch "
              f"{args.batch_size}")
        correct, count, steps = counts(model, DataLoader(test, batch_size=args.batch_size), False)
        report("single-process", correct, count, (steps, steps))

    uneven = DistributedEvalSampler(test)
    distributed("distsampler-uneven", model,
                DataLoader(test, batch_size=args.batch_size, sampler=uneven))
    masked = DistributedEvalSampler(test, padded=True, with_mask=True)
    distributed("distsampler-mask", model,
                DataLoader(MaskedDataset(test), batch_size=args.batch_size, sampler=masked),
                masked=True)
    padded = TorchSampler(test, shuffle=False)
    distributed("torch-padded", model,
                DataLoader(test, batch_size=args.batch_size, sampler=padded))
    destroy_distributed()


if __name__ == "__main__":
    main()
