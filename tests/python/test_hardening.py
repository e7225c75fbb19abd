"""Issue 12's Python defects, each caught: errors of one line naming the parameter, its value
and what is allowed (no pybind11 overload dump), PyTorch's refusals, and the randperm variant
counted only where it changes the order."""
import numpy as np
import pytest

from distsampler import _core
from distsampler.data import DistributedIterableDataset
from distsampler.policies import (BucketedBatchSampler, DistributedBatchSampler,
                                  DistributedEvalSampler, DistributedSamplerWrapper,
                                  WeightedDistributedSampler)
from distsampler.torch import DistributedSampler


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and "incompatible" not in message, message
    return message


@pytest.mark.parametrize("make,match", [
    (lambda: DistributedSampler(range(5), 2**64, 0),
     r"num_replicas = 18446744073709551616 is out of range; allowed: 1 <= num_replicas"),
    (lambda: DistributedSampler(range(5), 2, 0, order=None),
     r"order = None is not an order; allowed: 'torch', 'feistel'"),
    (lambda: DistributedEvalSampler(range(5), 2, 0, order=3), r"order = 3 is not an order"),
    (lambda: DistributedBatchSampler(range(5), 2, 1, 0, order=None), r"order = None"),
    (lambda: DistributedIterableDataset(range(5), 2, 2**64, 0), r"num_replicas = 1844"),
    (lambda: DistributedBatchSampler(range(10), -1, 1, 0),
     r"batch_size = -1 is out of range; allowed: 1 <= batch_size <= 2\^64 - 1"),
    (lambda: BucketedBatchSampler([1, 2], 2, 1, 0, window_batches=-2),
     r"window_batches = -2 is out of range; allowed: 1 <= window_batches"),
    (lambda: WeightedDistributedSampler([[1.0, 2.0], [3.0, 4.0]], 5, 1, 0),
     r"weights has shape \(2, 2\); allowed: a 1-D sequence"),
    (lambda: WeightedDistributedSampler([1.0, 2.0], 0, 1, 0),
     r"num_samples = 0 is out of range; allowed: 1 <= num_samples"),
    (lambda: _core.make_epoch_order(2**63, 0, False, "feistel", _core.RandpermVariant.current,
                                    0).array(),
     r"size = 9223372036854775808 is too large for one array; allowed: size <= 2\^60"),
])
def test_bad_arguments_are_one_line_value_errors_naming_the_parameter(make, match):
    with pytest.raises(ValueError, match=match) as error:
        make()
    one_line(error)


def test_the_wrapper_length_is_what_it_yields():
    for world in (1, 3, 4):
        for rank in range(world):
            wrapper = DistributedSamplerWrapper(list(range(10)), world, rank)
            assert len(wrapper) == len(list(wrapper)) == -(-10 // world)


def test_a_state_entry_of_another_type_is_named_with_its_type():
    state = DistributedSampler(range(10), 1, 0).state_dict()
    state["epoch"] = np.int64(0)
    # The value as repr() writes it: 0 with numpy 1 (Debian 12), np.int64(0) with numpy 2.
    with pytest.raises(ValueError, match=r"state epoch = (0|np\.int64\(0\)) has type int64; "
                                         "allowed: int") as error:
        DistributedSampler(range(10), 1, 0).load_state_dict(state)
    one_line(error)


@pytest.mark.parametrize("size", [100, 214_748_363])
def test_randperm_counts_only_where_it_changes_the_order(size):
    class Sized:
        def __len__(self):
            return size

    state = DistributedSampler(Sized(), 2, 0, randperm="current").state_dict()
    DistributedSampler(Sized(), 2, 0, randperm="classic").load_state_dict(state)


def test_randperm_still_counts_from_the_threshold_on():
    class Sized:
        def __len__(self):
            return 214_748_364

    state = DistributedSampler(Sized(), 2, 0, randperm="current").state_dict()
    with pytest.raises(ValueError, match="randperm"):
        DistributedSampler(Sized(), 2, 0, randperm="classic").load_state_dict(state)
