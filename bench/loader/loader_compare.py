#!/usr/bin/python3
"""distsampler's DataLoader against torch.utils.data.DataLoader, samples per second, one run.

Both read Fashion-MNIST's 60000 training images (uint8, 28x28, decoded into memory first) with
their labels, through PyTorch's DistributedSampler semantics (world size 2, rank 0, shuffle,
epoch advancing), batch size 64, and yield batches of one uint8 tensor/buffer plus int64 labels.
PyTorch: a map-style Dataset over in-memory tensors (torchvision's FashionMNIST without its PIL
transform), num_workers 0 and 2 (2 also with persistent_workers). distsampler: bench/loader's
loader_throughput with 0, 1 and 2 threads. Prints a table and the ratio of distsampler's best to
PyTorch's best.

Usage: /usr/bin/python3 bench/loader/loader_compare.py BUILD/bin/loader_throughput [--seconds S]
"""
import argparse
import gzip
import re
import subprocess
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class FashionMnist(Dataset):
    def __init__(self, data_dir):
        self.images = torch.from_numpy(read_idx(f"{data_dir}/train-images-idx3-ubyte.gz").copy())
        self.labels = torch.from_numpy(
            read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz").astype(np.int64))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def torch_rate(dataset, num_workers, persistent, seconds, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                        persistent_workers=persistent)
    samples, epoch, start = 0, 0, time.perf_counter()
    while True:
        sampler.set_epoch(epoch)
        for images, labels in loader:
            samples += len(labels)
        epoch += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return samples / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("loader_throughput")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    out = subprocess.run(
        [args.loader_throughput, "--data", args.data, "--batch-size", str(args.batch_size),
         "--threads", "0,1,2", "--seconds", str(args.seconds)],
        check=True, capture_output=True, text=True).stdout
    ours = {f"distsampler threads={m[0]}": float(m[1])
            for m in re.findall(r"threads=(\d+) samples_per_s=([\d.]+)", out)}

    dataset = FashionMnist(args.data)
    theirs = {}
    for workers, persistent in [(0, False), (2, False), (2, True)]:
        name = f"torch num_workers={workers}" + (" persistent" if persistent else "")
        theirs[name] = torch_rate(dataset, workers, persistent, args.seconds, args.batch_size)

    best_theirs = max(theirs.values())
    print(f"Fashion-MNIST train, DistributedSampler(world 2, rank 0), batch {args.batch_size}, "
          f"torch {torch.__version__}, >= {args.seconds:g} s per setting")
    print(f"{'loader':34s} {'samples/s':>12s} {'vs torch best':>14s}")
    for name, rate in {**theirs, **ours}.items():
        print(f"{name:34s} {rate:12.0f} {rate / best_theirs:13.1f}x")
    best_ours = max(ours.values())
    print(f"ratio: distsampler best / torch best = {best_ours / best_theirs:.1f}x")


if __name__ == "__main__":
    main()
