"""Every sampler and batch sampler of the package through torch.utils.data.DataLoader, the way
users run them: workers, persistent workers, batch_size None and 4, pin_memory, prefetch_factor,
three epochs with set_epoch. The batches must be the sampler's own indices (those of a fresh
sampler of the same configuration), hence equal to num_workers=0's, and equal PyTorch's own
sampler where one exists; no warning may be raised."""
import warnings

import pytest
import torch
import torch.utils.data as tud
from torch.utils.data.distributed import DistributedSampler as TorchDistributedSampler

import loader_helpers
import distsampler.data
from distsampler.policies import (BlendedDistributedSampler, BucketedBatchSampler,
                                  DistributedBatchSampler, DistributedEvalSampler,
                                  DistributedSamplerWrapper, ShardedDistributedSampler,
                                  WeightedDistributedSampler)
from distsampler.torch import DistributedSampler

N, W, RANK, EPOCHS = 37, 3, 1, 3


def no_accelerator_warning():
    """torch 2.x warns that pin_memory=True does nothing without an accelerator (CPU here): not
    one of ours, so not an error in the tests that make every warning one."""
    warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true but no "
                            "accelerator is found")


def Indices(size: int = N) -> loader_helpers.Indices:
    return loader_helpers.Indices(size)


# name -> a function building the sampler (a new one each call, same configuration).
# auto_epoch=True where a test counts on it; the drop-in's default is tested as torch-no-auto.
SAMPLERS = {
    "torch": lambda: DistributedSampler(Indices(), W, RANK, seed=4, auto_epoch=True),
    "torch-no-auto": lambda: DistributedSampler(Indices(), W, RANK, seed=4, auto_epoch=False),
    "feistel": lambda: DistributedSampler(Indices(), W, RANK, seed=4, order="feistel",
                                          auto_epoch=True),
    "eval-uneven": lambda: DistributedEvalSampler(Indices(), W, RANK, shuffle=True, seed=2,
                                                  auto_epoch=True),
    "eval-padded": lambda: DistributedEvalSampler(Indices(), W, RANK, padded=True,
                                                  auto_epoch=True),
    "weighted": lambda: WeightedDistributedSampler([1.0 + i % 5 for i in range(N)], 50, W, RANK,
                                                   auto_epoch=True),
    "blended": lambda: BlendedDistributedSampler([20, N - 20], [0.3, 0.7], 45, W, RANK, seed=1,
                                                 auto_epoch=True),
    "sharded": lambda: ShardedDistributedSampler([10, 9, 8, 10], W, RANK, seed=5, window=2,
                                                 auto_epoch=True),
    "wrapper": lambda: DistributedSamplerWrapper(
        tud.RandomSampler(range(N), generator=torch.Generator().manual_seed(0)), W, RANK,
        auto_epoch=True),
}
BATCH_SAMPLERS = {
    "batches": lambda: DistributedBatchSampler(Indices(), 4, W, RANK, seed=3, auto_epoch=True),
    "batches-drop-last": lambda: DistributedBatchSampler(Indices(), 4, W, RANK, drop_last=True,
                                                         auto_epoch=True),
    "bucketed": lambda: BucketedBatchSampler([(7 * i) % 11 for i in range(N)], 4, W, RANK,
                                             seed=9, window_batches=2, auto_epoch=True),
}
# (num_workers, persistent_workers, prefetch_factor, pin_memory): every worker count with
# persistence on and off, both prefetch factors, pinning on and off.
LOADERS = [(0, False, None, False), (0, False, None, True), (1, False, 1, False),
           (1, True, 4, True), (2, False, 4, False), (2, True, 1, False), (2, True, 4, True),
           (2, False, 1, True)]


def loader_kwargs(num_workers, persistent, prefetch, pin):
    kwargs = dict(num_workers=num_workers, persistent_workers=persistent, pin_memory=pin)
    if prefetch is not None:
        kwargs["prefetch_factor"] = prefetch
    return kwargs


def as_lists(batches):
    return [b.tolist() if isinstance(b, torch.Tensor) else
            [x.tolist() if isinstance(x, torch.Tensor) else x for x in b] if isinstance(b, list)
            else b for b in batches]


def expected_passes(make, epochs=EPOCHS):
    """What a fresh sampler yields for each epoch after set_epoch (iterated directly)."""
    sampler = make()
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def run_epochs(loader, sampler, epochs=EPOCHS):
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(as_lists(list(loader)))
    return out


@pytest.mark.parametrize("config", LOADERS, ids=lambda c: "w{}-p{}-f{}-pin{}".format(*c))
@pytest.mark.parametrize("batch_size", [None, 4])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
@pytest.mark.parametrize("loader_class", [tud.DataLoader, distsampler.data.DataLoader],
                         ids=["torch-loader", "distsampler-loader"])
def test_samplers_read_the_same_batches_with_any_loader_configuration(
        loader_class, name, batch_size, config):
    make = SAMPLERS[name]
    sampler = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # set_epoch is called: no warning may be raised
        no_accelerator_warning()
        got = run_epochs(loader_class(Indices(), sampler=sampler, batch_size=batch_size,
                                      **loader_kwargs(*config)), sampler)
    expected = expected_passes(make)
    if batch_size is None:
        assert got == expected
    else:
        assert got == [chunk(items, batch_size) for items in expected]
    # Three different epochs, not one epoch three times (a forgotten or doubled epoch).
    if name not in ("eval-padded",):
        assert got[0] != got[1] != got[2]


@pytest.mark.parametrize("config", LOADERS, ids=lambda c: "w{}-p{}-f{}-pin{}".format(*c))
@pytest.mark.parametrize("name", sorted(BATCH_SAMPLERS))
@pytest.mark.parametrize("loader_class", [tud.DataLoader, distsampler.data.DataLoader],
                         ids=["torch-loader", "distsampler-loader"])
def test_batch_samplers_read_the_same_batches_with_any_loader_configuration(
        loader_class, name, config):
    make = BATCH_SAMPLERS[name]
    batch_sampler = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        no_accelerator_warning()
        got = run_epochs(loader_class(Indices(), batch_sampler=batch_sampler,
                                      **loader_kwargs(*config)), batch_sampler)
    assert got == expected_passes(make)
    assert got[0] != got[1] != got[2]


@pytest.mark.parametrize("config", LOADERS, ids=lambda c: "w{}-p{}-f{}-pin{}".format(*c))
@pytest.mark.parametrize("batch_size", [None, 4])
def test_the_drop_in_equals_pytorchs_sampler_in_every_loader_configuration(batch_size, config):
    ours = DistributedSampler(Indices(), W, RANK, seed=4, auto_epoch=False)
    theirs = TorchDistributedSampler(Indices(), W, RANK, seed=4)
    kwargs = loader_kwargs(*config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        no_accelerator_warning()
        got = run_epochs(distsampler.data.DataLoader(Indices(), sampler=ours,
                                                     batch_size=batch_size, **kwargs), ours)
    expected = run_epochs(tud.DataLoader(Indices(), sampler=theirs, batch_size=batch_size,
                                         **kwargs), theirs)
    assert got == expected


def test_eval_padded_and_the_wrapper_equal_pytorchs_sampler_through_a_loader():
    for ours, theirs in [
            (DistributedEvalSampler(Indices(), W, RANK, padded=True, auto_epoch=False),
             TorchDistributedSampler(Indices(), W, RANK, shuffle=False)),
            (DistributedSamplerWrapper(tud.SequentialSampler(range(N)), W, RANK,
                                       auto_epoch=False),
             TorchDistributedSampler(Indices(), W, RANK, shuffle=False))]:
        got = run_epochs(tud.DataLoader(Indices(), sampler=ours, batch_size=4, num_workers=2),
                         ours)
        assert got == run_epochs(tud.DataLoader(Indices(), sampler=theirs, batch_size=4,
                                                num_workers=2), theirs)


@pytest.mark.parametrize("config", [(2, False, 2, False), (2, True, 2, False), (1, True, 4, True)])
@pytest.mark.parametrize("name", sorted(SAMPLERS) + sorted(BATCH_SAMPLERS))
def test_auto_epoch_counts_passes_not_iter_calls(name, config):
    """Without set_epoch, auto_epoch gives each DataLoader pass the next epoch (one warning),
    whatever the number of iter() calls the loader makes on the sampler."""
    make = {**SAMPLERS, **BATCH_SAMPLERS}[name]
    if name == "torch-no-auto":
        return
    sampler = make()
    batch = name in BATCH_SAMPLERS
    loader = tud.DataLoader(Indices(), **({"batch_sampler": sampler} if batch else
                                          {"sampler": sampler, "batch_size": None}),
                            **loader_kwargs(*config))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [as_lists(list(loader)) for _ in range(EPOCHS)]
    assert got == expected_passes(make)
    assert len([w for w in caught if "set_epoch" in str(w.message)]) == 1


def test_iter_without_next_changes_nothing():
    sampler = DistributedSampler(Indices(), W, RANK, seed=4)
    for _ in range(5):
        iter(sampler)
    assert sampler.epoch == 0 and list(sampler) == expected_passes(SAMPLERS["torch"])[0]
    for _ in range(3):
        iter(sampler)
    with pytest.warns(UserWarning, match="replays epoch 0.*set_epoch"):
        assert list(sampler) == expected_passes(SAMPLERS["torch"])[0]
