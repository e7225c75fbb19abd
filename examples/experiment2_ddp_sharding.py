"""The seed's experiment 2: 8 items, batch size 4, 2 epochs of DDP training, with our sampler
versus a plain shuffling DataLoader (no distributed sampler).

Run under torchrun (gloo, CPU):
    PYTHONPATH=build/python /usr/bin/python3 -m distsampler.torchrun --nproc_per_node=2 \
        examples/experiment2_ddp_sharding.py

Every rank prints `exp2 VARIANT rank=R epoch=E batch=V,...` per batch (item i holds i + 1) and
`exp2 VARIANT rank=R epoch=E samples=N` per epoch. With the distributed sampler each of the W
ranks reads n / W items an epoch and together they read the dataset once; with a shuffling
DataLoader every rank reads all n, so the job reads it W times an epoch.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from distsampler.launch import destroy_distributed
from distsampler.torch import DistributedSampler

SIZE, BATCH, EPOCHS = 8, 4, 2


def say(line):
    """Writes one whole line in a single write(2): the ranks share torchrun's stdout, and a line
    written in pieces (print writes the text and the newline separately when unbuffered) can be
    split by another rank's output."""
    os.write(sys.stdout.fileno(), (line + "\n").encode())


class Items(Dataset):
    """Item i is the value i + 1 (a 1-vector)."""

    def __len__(self):
        return SIZE

    def __getitem__(self, index):
        return torch.tensor([float(index + 1)])


def run(variant, loader, sampler):
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    rank = dist.get_rank()
    for epoch in range(EPOCHS):
        if sampler is not None:
            sampler.set_epoch(epoch)
        samples = 0
        for batch in loader:
            optimizer.zero_grad()
            model(batch).pow(2).mean().backward()  # gradients all-reduced across ranks
            optimizer.step()
            samples += len(batch)
            values = ",".join(str(int(v)) for v in batch[:, 0])
            say(f"exp2 {variant} rank={rank} epoch={epoch} batch={values}")
        say(f"exp2 {variant} rank={rank} epoch={epoch} samples={samples}")
    dist.barrier()


def main():
    dist.init_process_group("gloo")
    dataset = Items()
    sampler = DistributedSampler(dataset)
    run("distsampler", DataLoader(dataset, batch_size=BATCH, sampler=sampler), sampler)
    run("shuffle", DataLoader(dataset, batch_size=BATCH, shuffle=True), None)
    destroy_distributed()


if __name__ == "__main__":
    main()
