"""The import hook that runs PyTorch's and torchdata's own test suites against distsampler
(tests/upstream/run.py puts this folder first on PYTHONPATH, so every Python process the suites
start, DataLoader workers and `python -c` children included, loads it at start-up).

DISTSAMPLER_UPSTREAM_MODE selects what is replaced; unset, this module does nothing:
  ours      torchdata's StatefulDataLoader by distsampler.data.DataLoader (taking and ignoring
            torchdata's snapshot_every_n_steps), and the samplers as below;
  samplers  torchdata's own StatefulDataLoader kept; torch's DistributedSampler and torchdata's
            StatefulDistributedSampler by distsampler.torch.DistributedSampler, and
            torch.utils.data.RandomSampler(dataset, generator=g) by our
            DistributedSampler(dataset, 1, 0, shuffle=True, seed=g.initial_seed()).
In "ours" the DistributedSamplers are replaced too. DISTSAMPLER_UPSTREAM_SABOTAGE=drop-last
replaces them instead by ours minus each pass's last index: a check that the tally can show
failures (docs/upstream-suites.md).

The replacement happens when `torch` and `torchdata.stateful_dataloader` finish importing, so a
process that never imports torch pays nothing. A wrong setting ends the process, and a
replacement that cannot be made fails the import of torch: a hook that silently did nothing
would test torch's classes and report them as ours.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

MODES = ("ours", "samplers")
SABOTAGES = ("drop-last",)


def _distributed_sampler():
    from distsampler.torch import DistributedSampler
    if os.environ.get("DISTSAMPLER_UPSTREAM_SABOTAGE") != "drop-last":
        return DistributedSampler

    class DropLastIndexSampler(DistributedSampler):
        """Deliberately wrong: each pass's last index is never read."""

        def __iter__(self):
            return iter(list(super().__iter__())[:-1])

    DropLastIndexSampler.__qualname__ = "DropLastIndexSampler"
    return DropLastIndexSampler


def _patch_torch(mode: str) -> None:
    import torch.utils.data
    import torch.utils.data.distributed
    ours = _distributed_sampler()
    torch.utils.data.distributed.DistributedSampler = ours
    torch.utils.data.DistributedSampler = ours
    if mode == "samplers":
        torch.utils.data.RandomSampler = _seeded_random_sampler(ours)


def _seeded_random_sampler(ours):
    """torch's RandomSampler, except that RandomSampler(dataset, generator=g) (no replacement,
    no num_samples: one shuffled pass) is our sampler seeded with g's seed. A subclass, so
    isinstance checks against torch's class keep working."""
    import torch.utils.data

    class RandomSampler(torch.utils.data.RandomSampler):
        def __new__(cls, data_source, replacement=False, num_samples=None, generator=None):
            if generator is not None and not replacement and num_samples is None:
                return ours(data_source, 1, 0, shuffle=True, seed=generator.initial_seed())
            return super().__new__(cls)

    RandomSampler.__qualname__ = "RandomSampler"
    return RandomSampler


def _patch_torchdata(mode: str) -> None:
    import torchdata.stateful_dataloader as stateful
    import torchdata.stateful_dataloader.sampler as stateful_sampler
    stateful_sampler.StatefulDistributedSampler = _distributed_sampler()
    if mode == "ours":
        stateful.StatefulDataLoader = _stateful_data_loader()


def _stateful_data_loader():
    from typing import TypeVar

    from distsampler.data import DataLoader
    T_co = TypeVar("T_co", covariant=True)

    class StatefulDataLoader(DataLoader[T_co]):
        """distsampler.data.DataLoader under torchdata's name. snapshot_every_n_steps is how
        often torchdata's workers snapshot their state; ours is exact at every batch."""

        def __init__(self, *args, snapshot_every_n_steps=1, **kwargs):
            super().__init__(*args, **kwargs)

    StatefulDataLoader.__qualname__ = "StatefulDataLoader"
    return StatefulDataLoader


_PATCHES = {"torch": _patch_torch, "torchdata.stateful_dataloader": _patch_torchdata}


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of _PATCHES as the path finder does, and patches each after it ran."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.loaders = {}

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        self.loaders[name] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loaders[spec.name].create_module(spec)

    def exec_module(self, module):
        self.loaders[module.__name__].exec_module(module)
        _PATCHES[module.__name__](self.mode)


def _install() -> None:
    # SystemExit, not an Exception: site.py reports those from sitecustomize and carries on.
    mode = os.environ.get("DISTSAMPLER_UPSTREAM_MODE", "")
    if not mode:
        return
    if mode not in MODES:
        raise SystemExit(f"DISTSAMPLER_UPSTREAM_MODE={mode!r}; allowed: {', '.join(MODES)}")
    sabotage = os.environ.get("DISTSAMPLER_UPSTREAM_SABOTAGE", "")
    if sabotage and sabotage not in SABOTAGES:
        raise SystemExit(f"DISTSAMPLER_UPSTREAM_SABOTAGE={sabotage!r}; allowed: "
                           f"{', '.join(SABOTAGES)}")
    sys.meta_path.insert(0, _PatchAfterImport(mode))


def _chain() -> None:
    """Run the sitecustomize this one shadows (Debian's, for instance), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # run.py imports it under another name for MODES
    _install()
    _chain()
