"""DDP training on Fashion-MNIST three ways, recording the loss of every step:

  advancing      distsampler.torch.DistributedSampler(auto_epoch=True), set_epoch never
                 called: auto_epoch advances the epoch, so every epoch gets a new order
  not-advancing  torch's DistributedSampler, set_epoch never called (the seed's bug): every
                 epoch repeats epoch 0's batches in the same order
  no-sampler     a plain shuffling DataLoader: every rank reads the whole training set, so an
                 epoch costs W times the steps and the ranks' gradients come from the same data

Run under torchrun (gloo, CPU), e.g. from the repository root after the build:
    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 -m distsampler.torchrun \
        --nproc_per_node=2 --redirects 2 --tee 2 examples/fashion_mnist_ddp.py --out build/demo

Rank 0 writes OUT/fashion_mnist_loss.csv (variant, epoch, step, samples, loss: the loss averaged
over ranks, `samples` counting what the whole job has read), OUT/fashion_mnist_loss.png and
prints each variant's test accuracy, wall time, and how much each epoch's step-to-step loss
changes correlate with the previous epoch's (high when the order repeats).
"""
import argparse
import csv
import gzip
import os
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler as TorchSampler

from distsampler.launch import destroy_distributed
from distsampler.torch import DistributedSampler

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    """An IDX file (big-endian header: magic, dimensions; then uint8 data), gzipped."""
    with gzip.open(os.path.join(DATA_DIR, name), "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(prefix, limit):
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz")[:limit]
    labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz")[:limit]
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


def loader_for(variant, train, batch_size):
    if variant == "advancing":
        sampler = DistributedSampler(train, seed=0, auto_epoch=True)
    elif variant == "not-advancing":
        sampler = TorchSampler(train, seed=0)
    else:
        return DataLoader(train, batch_size=batch_size, shuffle=True)
    return DataLoader(train, batch_size=batch_size, sampler=sampler)


def train_one(variant, train, test, args):
    torch.manual_seed(0)  # the same initial model and the same shuffling stream for every variant
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(784, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = loader_for(variant, train, args.batch_size)
    world_size, rows, samples = dist.get_world_size(), [], 0
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # auto_epoch's one warning is the point of "advancing"
        for epoch in range(args.epochs):
            for step, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                mean = loss.detach().clone()
                dist.all_reduce(mean)
                samples += len(x) * world_size
                rows.append((variant, epoch, step, samples, mean.item() / world_size))
    seconds = time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model.module(test.tensors[0]).argmax(1) == test.tensors[1]).float().mean()
    return rows, float(accuracy), seconds


def repeat_correlation(rows, epochs):
    """Mean correlation between consecutive epochs' step-to-step loss changes (epochs >= 1,
    where the loss no longer falls fast)."""
    by_epoch = [np.diff([r[4] for r in rows if r[1] == e]) for e in range(epochs)]
    pairs = [np.corrcoef(by_epoch[e - 1], by_epoch[e])[0, 1] for e in range(2, epochs)]
    return float(np.mean(pairs)) if pairs else float("nan")


def chart(rows, results, epochs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for variant in results:
        mine = [r for r in rows if r[0] == variant]
        axes[0].plot([r[3] for r in mine], [r[4] for r in mine], lw=0.8,
                     label=f"{variant} (test acc {results[variant][0]:.3f})")
    axes[0].set(xlabel="samples read by the job", ylabel="training loss (mean over ranks)",
                title="Loss per step")
    axes[0].legend()
    for ax, variant in zip(axes[1:], ("not-advancing", "advancing")):
        for epoch in range(1, epochs):
            mine = [r for r in rows if r[0] == variant and r[1] == epoch]
            ax.plot([r[2] for r in mine], [r[4] for r in mine], lw=0.8, label=f"epoch {epoch}")
        ax.set(xlabel="step within the epoch", ylabel="training loss",
               title=f"{variant}: epochs overlaid (r = {results[variant][2]:.2f})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="build/demo")
    parser.add_argument("--train-size", type=int, default=12000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    train, test = load("train", args.train_size), load("t10k", None)
    rows, results = [], {}
    for variant in ("advancing", "not-advancing", "no-sampler"):
        mine, accuracy, seconds = train_one(variant, train, test, args)
        rows += mine
        results[variant] = (accuracy, seconds, repeat_correlation(mine, args.epochs))
    if dist.get_rank() == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fashion_mnist_loss.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(("variant", "epoch", "step", "samples", "loss"))
            writer.writerows((v, e, s, n, f"{loss:.6f}") for v, e, s, n, loss in rows)
        chart(rows, results, args.epochs, os.path.join(args.out, "fashion_mnist_loss.png"))
        print(f"fashion-mnist: {dist.get_world_size()} ranks, {len(train)} training items, "
              f"{args.epochs} epochs, batch {args.batch_size} per rank")
        for variant, (accuracy, seconds, r) in results.items():
            steps = sum(1 for row in rows if row[0] == variant)
            print(f"fashion-mnist {variant}: steps={steps} test_accuracy={accuracy:.4f} "
                  f"seconds={seconds:.1f} epoch_to_epoch_loss_correlation={r:.3f}")
        print(f"fashion-mnist: wrote {args.out}/fashion_mnist_loss.csv and .png")
    destroy_distributed()


if __name__ == "__main__":
    main()
