"""Every sampler survives copy.deepcopy and pickle (as PyTorch's do): the copy yields what the
original yields from the same point, mid-epoch included, and its state is the original's."""
import copy
import itertools
import pickle
import warnings

import pytest

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)

from distsampler import policies  # noqa: E402
from distsampler.torch import DistributedSampler  # noqa: E402

COPIES = {"deepcopy": copy.deepcopy, "pickle": lambda s: pickle.loads(pickle.dumps(s))}


def samplers():
    data = list(range(23))
    return [
        DistributedSampler(data, num_replicas=3, rank=1, seed=5),
        DistributedSampler(data, num_replicas=2, rank=0, seed=-9, order="feistel"),
        policies.DistributedEvalSampler(data, 3, 2, shuffle=True, seed=4),
        policies.WeightedDistributedSampler([float(i % 5) for i in data], 40, 3, 1, seed=2),
        policies.BlendedDistributedSampler([7, 11], [0.25, 0.75], 30, 2, 1, seed=3),
        policies.DistributedBatchSampler(data, 4, 2, 1, seed=1),
        policies.BucketedBatchSampler([i % 6 for i in data], 3, 2, 0, window_batches=2),
        policies.ShardedDistributedSampler([5, 8, 10], 2, 1, window=2),
        policies.DistributedSamplerWrapper(list(range(9)), 2, 1),
    ]


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("which", range(len(samplers())))
def test_copy_yields_what_the_original_yields(how, which):
    original = samplers()[which]
    original.set_epoch(3)
    clone = COPIES[how](original)
    assert type(clone) is type(original) and len(clone) == len(original)
    assert list(clone) == list(original)
    with warnings.catch_warnings():  # both replay the epoch the same way (and warn)
        warnings.simplefilter("ignore")
        assert list(clone) == list(original)


@pytest.mark.parametrize("how", sorted(COPIES))
def test_copy_mid_epoch_keeps_the_position(how):
    sampler = DistributedSampler(list(range(100)), num_replicas=2, rank=1, seed=8)
    sampler.set_epoch(2)
    first = list(itertools.islice(iter(sampler), 13))
    clone = COPIES[how](sampler)
    assert clone.state_dict() == sampler.state_dict()
    resumed = DistributedSampler(list(range(100)), num_replicas=2, rank=1, seed=8)
    resumed.load_state_dict(clone.state_dict())
    assert first + list(resumed) == sampler.indices(2).tolist()
