"""Behaviours that PyTorch's and torchdata's own test suites caught in distsampler, run against
our DataLoader and DistributedSampler (docs/upstream-suites.md: what was run, the tally, what
does not apply). Their code is not in this repository; each test here is ours, written from the
fact the upstream test established, and names the upstream test that caught it. Both PyTorch
stacks run this file."""
import warnings

import pytest
import torch
import torch.utils.data as tud

import loader_helpers
from distsampler.data import DataLoader
from distsampler.torch import DistributedSampler

flat = loader_helpers.flat


def Indices(size: int = 40) -> loader_helpers.Indices:
    return loader_helpers.Indices(size)


# ---- torchdata test_sampler.py::test_data_order_with_shuffle ------------------------------------

def test_a_sampler_read_twice_without_set_epoch_repeats_its_order_and_warns_once():
    """torchdata's test lists a shuffled sampler, then reads it through a loader, and expects
    the same order: PyTorch's DistributedSampler replays its epoch until set_epoch. Ours used to
    advance the epoch instead (auto_epoch=True by default). The replay warns once, naming
    set_epoch; set_epoch still gives a new order."""
    sampler = DistributedSampler(Indices(), num_replicas=1, rank=0, shuffle=True)
    first = list(sampler)
    assert sorted(first) == list(range(40)) and first != list(range(40))
    with pytest.warns(UserWarning, match="set_epoch"):
        loaded = flat(DataLoader(Indices(), sampler=sampler, batch_size=7))
    assert loaded == first
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per sampler
        assert list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first
    torch_sampler = tud.DistributedSampler(Indices(), num_replicas=1, rank=0, shuffle=True)
    assert first == list(torch_sampler) == list(torch_sampler)


def test_an_unshuffled_sampler_read_twice_repeats_silently():
    """Nothing to warn about when the replayed order is the identity: torchdata's
    test_data_order_without_shuffle reads an unshuffled sampler twice."""
    sampler = DistributedSampler(Indices(), num_replicas=1, rank=0, shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(sampler) == list(range(40))
        assert flat(DataLoader(Indices(), sampler=sampler, batch_size=32)) == list(range(40))


# ---- every multi-process test of both suites: torch 2.x calls _process_data(data, worker_idx) ----

@pytest.mark.parametrize("persistent", [False, True])
def test_a_loader_with_workers_reads_what_torchs_loader_reads_on_this_torch(persistent):
    """On torch 2.x the loader with num_workers > 0 failed at the first batch (it overrode a
    private method whose signature changed): every multi-process test of torchdata's suites
    failed with a TypeError. Two epochs, with and without persistent workers, over our sampler
    and over the default one, read the same batches as torch's DataLoader."""
    sampler = DistributedSampler(Indices(), num_replicas=2, rank=1, shuffle=True, seed=5)
    reference = tud.DistributedSampler(Indices(), num_replicas=2, rank=1, shuffle=True, seed=5)
    ours = DataLoader(Indices(), sampler=sampler, batch_size=3, num_workers=2,
                      persistent_workers=persistent)
    theirs = tud.DataLoader(Indices(), sampler=reference, batch_size=3, num_workers=2,
                            persistent_workers=persistent)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        reference.set_epoch(epoch)
        assert flat(ours) == flat(theirs)
    plain = DataLoader(Indices(), batch_size=4, num_workers=2, persistent_workers=persistent)
    assert flat(plain) == flat(plain) == list(range(40))


# ---- torchdata test_state_dict.py::TestJsonSerDe_shard3 (an iterable dataset without state) -----

class _Counting(tud.IterableDataset):
    """0, 1, ..., n - 1 from one worker; defines no state_dict."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def test_a_resumed_iterable_dataset_without_state_does_not_read_its_start_again():
    """A checkpoint of a loader over an IterableDataset that has no state of its own says
    "batches": k. torchdata's loader resumes it by skipping the k batches already received (its
    test expects exactly the batches after the cut); ours replayed the dataset from its start,
    silently, so the job trained on the first k batches twice. Ours now skips them too
    (_loader.py): the load must succeed, and the resumed loader read exactly the rest, with and
    without a worker."""
    for workers in (0, 1):
        first = DataLoader(_Counting(20), batch_size=3, num_workers=workers)
        iterator = iter(first)
        head = flat([next(iterator) for _ in range(2)])
        state = first.state_dict()
        del iterator
        second = DataLoader(_Counting(20), batch_size=3, num_workers=workers)
        second.load_state_dict(state)  # a ValueError here fails the test: no refusal accepted
        assert head + flat(second) == list(range(20)), f"num_workers={workers}"
