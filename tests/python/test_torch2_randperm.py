"""The default torch order against a real PyTorch >= 2.6 where its torch.randperm takes the
inside-out algorithm (upstream PR 143875, n >= 214,748,364): equal sha256 digests of the int64
permutation, ours from DistributedSampler(randperm="auto").indices(epoch) with one replica, theirs
from torch.randperm(n, generator=g) with g.manual_seed(seed + epoch), as PyTorch's
DistributedSampler draws it. On an older torch (Debian 12's 1.13) it is skipped: that torch has
only the classic algorithm, which the other parity tests and tests/golden cover.

The case holds one permutation at a time (1.7 GB) and takes one to two minutes of CPU.
"""
import hashlib

import numpy as np
import pytest

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)

from distsampler.torch import DistributedSampler  # noqa: E402

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = pytest.mark.skipif(
    TORCH_VERSION < (2, 6),
    reason=f"torch {torch.__version__} < 2.6: its torch.randperm is the classic algorithm at every "
           "size; the inside-out one (n >= 214,748,364) ships from torch 2.6")

THRESHOLD = 214_748_364  # floor((2^32 - 1) / 20): PyTorch's switch to the inside-out algorithm


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest()


def theirs(size: int, seed: int, epoch: int) -> str:
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    perm = torch.randperm(size, generator=generator)
    assert perm.dtype == torch.int64
    return sha256(perm.numpy())


def ours(size: int, seed: int, epoch: int) -> str:
    sampler = DistributedSampler(range(size), num_replicas=1, rank=0, seed=seed)
    assert sampler.state_dict()["randperm"] == "current"  # "auto" picked this torch's algorithm
    return sha256(sampler.indices(epoch))


# One case (each takes one to two minutes of CPU on the 2-core test machine, torch.randperm most of
# it): just above the threshold, where the inside-out algorithm starts (it has no other size
# branch below 2^32), at epoch 1 with seed -2, so that seed + epoch = -1 reaches the generator
# (taken as its two's complement): a sampler that forgot the epoch (seed -2) or mishandled a
# negative seed draws another permutation.
@pytest.mark.parametrize("size,seed,epoch", [(THRESHOLD + 1, -2, 1)])
def test_default_torch_order_equals_torch_randperm_above_the_threshold(size, seed, epoch):
    assert ours(size, seed, epoch) == theirs(size, seed, epoch)
