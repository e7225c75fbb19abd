"""distsampler.torch.DistributedSampler(prefetch=True): the next epoch's torch permutation is
built in the background (prefetch.h), with PyTorch's indices unchanged."""
import time

import torch.utils.data as tud

import loader_helpers
from distsampler.data import DataLoader
from distsampler.torch import DistributedSampler

N = 20011


def wait_for_live(prefetcher, count, timeout=20.0):
    deadline = time.monotonic() + timeout
    while prefetcher.live_orders != count and time.monotonic() < deadline:
        time.sleep(0.01)
    return prefetcher.live_orders == count


def test_prefetched_passes_are_pytorchs_and_start_from_the_background_build():
    ours = DistributedSampler(range(N), 4, 2, seed=9)
    theirs = tud.DistributedSampler(range(N), 4, 2, seed=9)
    assert ours.prefetching.prefetching
    for epoch in range(4):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        iterator = iter(ours)
        first = next(iterator)
        # The pass holds its permutation; the next one is built beside it, and no third.
        assert wait_for_live(ours.prefetching, 2)
        assert [first] + list(iterator) == list(theirs)
        # A finished pass releases its permutation: the prefetched one is left.
        assert wait_for_live(ours.prefetching, 1)
    assert ours.prefetching.hits == 3


def test_without_prefetch_or_with_the_feistel_order_nothing_is_built_ahead():
    for sampler in (DistributedSampler(range(N), 2, 0, prefetch=False),
                    DistributedSampler(range(N), 2, 0, order="feistel"),
                    DistributedSampler(range(N), 2, 0, shuffle=False)):
        for epoch in range(2):
            sampler.set_epoch(epoch)
            assert list(sampler) == sampler.indices(epoch).tolist()
        assert not sampler.prefetching.prefetching and sampler.prefetching.hits == 0


def test_loader_workers_forked_while_a_build_runs():
    """DataLoader workers are forked while the background thread may be building: the batches
    are still the sampler's, epoch after epoch."""
    dataset = loader_helpers.Indices(N)
    sampler = DistributedSampler(dataset, 2, 1, seed=3)
    loader = DataLoader(dataset, sampler=sampler, batch_size=512, num_workers=2)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert loader_helpers.flat(loader) == sampler.indices(epoch).tolist()
