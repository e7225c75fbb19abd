"""The seed's experiment 1: 16 items, batch size 2, 2 epochs, with and without set_epoch.

Run under torchrun (gloo, CPU):
    PYTHONPATH=build/python /usr/bin/python3 -m distsampler.torchrun --nproc_per_node=2 \
        examples/experiment1_set_epoch.py

Every rank prints one line per batch: `exp1 VARIANT rank=R epoch=E batch=V,V` where V are the
items' values (item i holds i + 1, as in the seed). Variants:
  torch-forgot-set-epoch      PyTorch's sampler, set_epoch never called: epoch 1 repeats epoch 0
  torch-set-epoch             PyTorch's sampler, set_epoch(e) each epoch
  distsampler-forgot-set-epoch  ours, set_epoch never called: PyTorch's behaviour, epoch 1
                                repeats epoch 0, and one warning naming set_epoch
  distsampler-auto-epoch      ours with auto_epoch=True, set_epoch never called: epoch 1 is
                                epoch 1's order (one warning)
Rank 0 prints each warning of our variants as `exp1 warning: VARIANT Category: message`.
"""
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler as TorchSampler

from distsampler.launch import destroy_distributed
from distsampler.torch import DistributedSampler

SIZE, BATCH, EPOCHS = 16, 2, 2


def say(line):
    """Writes one whole line in a single write(2): the ranks share torchrun's stdout, and a line
    written in pieces (print writes the text and the newline separately when unbuffered) can be
    split by another rank's output."""
    os.write(sys.stdout.fileno(), (line + "\n").encode())


class Items(Dataset):
    """Item i is a 5-vector of the value i + 1."""

    def __len__(self):
        return SIZE

    def __getitem__(self, index):
        return torch.full((5,), float(index + 1))


def run(variant, sampler, call_set_epoch):
    loader = DataLoader(Items(), batch_size=BATCH, sampler=sampler)
    for epoch in range(EPOCHS):
        if call_set_epoch:
            sampler.set_epoch(epoch)
        for batch in loader:
            values = ",".join(str(int(v)) for v in batch[:, 0])
            say(f"exp1 {variant} rank={dist.get_rank()} epoch={epoch} "
                f"batch={values}")
    dist.barrier()


def main():
    dist.init_process_group("gloo")
    dataset = Items()
    run("torch-forgot-set-epoch", TorchSampler(dataset), call_set_epoch=False)
    run("torch-set-epoch", TorchSampler(dataset), call_set_epoch=True)
    for variant, sampler in (("distsampler-forgot-set-epoch", DistributedSampler(dataset)),
                             ("distsampler-auto-epoch",
                              DistributedSampler(dataset, auto_epoch=True))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(variant, sampler, call_set_epoch=False)
        if dist.get_rank() == 0:
            for warning in caught:
                say(f"exp1 warning: {variant} {warning.category.__name__}: {warning.message}")
    destroy_distributed()


if __name__ == "__main__":
    main()
