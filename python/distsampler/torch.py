"""A drop-in for ``torch.utils.data.DistributedSampler`` with the set_epoch pitfall removed.

    from distsampler.torch import DistributedSampler

gives PyTorch's indices bit for bit (``order="torch"``, the default, with ``set_epoch`` called
each epoch). Two differences, both opt-out:

* ``auto_epoch=True``: iterating again without a ``set_epoch`` call advances the epoch by one
  (and warns once), where PyTorch silently repeats the previous epoch's order. Every rank advances
  the same way, so ranks stay consistent. An explicit ``set_epoch(e)`` always wins.
  ``auto_epoch=False`` is PyTorch's behaviour, repeated order included.
* ``state_dict()`` / ``load_state_dict()`` capture the epoch and the position within it, so a
  training loop resumes mid-epoch without replaying data.

Indices are computed in C++ in chunks with the GIL released and handed out through
``itertools.chain`` (no Python code runs per index); no Python list of the dataset is ever built.
``indices(epoch)`` returns a rank's whole share of an epoch as one numpy array.
``order="feistel"`` selects the random-access order: O(1) memory per rank whatever the dataset
size (PyTorch's order needs the whole permutation on every rank).
"""
import itertools
import operator
import warnings
from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from . import _core

__all__ = ["DistributedSampler", "STATE_VERSION"]

# The format of state_dict(); load_state_dict() accepts this version only.
STATE_VERSION = 1

# Indices computed per call into C++ while iterating (128 KiB of uint64; the chunk's list of
# Python ints, about 0.6 MB, stays in cache, which larger chunks measurably lose).
_CHUNK = 1 << 14
_EPOCH_MAX = 2**64 - 1
# The configuration fields a state carries; a state is only loaded by a sampler that has the same.
_CONFIG_FIELDS = ("size", "world_size", "seed", "shuffle", "drop_last", "order", "randperm")


def _default_randperm() -> str:
    """The torch.randperm algorithm of the installed PyTorch: newer releases (2.6 is the first
    believed to carry upstream PR 143875) switch to another algorithm for n >= 214,748,364."""
    major, minor = (int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return "classic" if (major, minor) < (2, 6) else "current"


def _checked_epoch(epoch) -> int:
    epoch = operator.index(epoch)
    if not 0 <= epoch <= _EPOCH_MAX:
        raise ValueError(f"epoch = {epoch} is out of range; allowed: 0 <= epoch <= 2^64 - 1")
    return epoch


class _Progress:
    """How far one iteration has gone: its view starts at global position `start`, and `count`
    indices have been yielded (the chunks handed out before the current one, plus what has been
    taken from the current one's list iterator, which knows how much of it is left)."""

    __slots__ = ("start", "_before", "_chunk", "_chunk_size")

    def __init__(self, start: int) -> None:
        self.start = start
        self._before = 0
        self._chunk: Iterator[int] = iter(())
        self._chunk_size = 0

    @property
    def count(self) -> int:
        return self._before + self._chunk_size - operator.length_hint(self._chunk)

    def next_chunk(self, indices: list) -> Iterator[int]:
        self._before += self._chunk_size
        self._chunk, self._chunk_size = iter(indices), len(indices)
        return self._chunk


def _chunks(view: "_core.RankView", progress: _Progress) -> Iterator[Iterator[int]]:
    total = len(view)
    buffer = np.empty(min(_CHUNK, total), dtype=np.uint64)
    first = 0
    while first < total:
        chunk = buffer[: min(_CHUNK, total - first)]
        view.fill(first, chunk)  # C++, GIL released
        first += len(chunk)
        yield progress.next_chunk(chunk.tolist())


def _indices(view: "_core.RankView", progress: _Progress) -> Iterator[int]:
    # chain's next() runs in C; Python code runs once per chunk, not once per index. A chunk is
    # refilled only when chain asks for the next one, after the previous list is exhausted.
    return itertools.chain.from_iterable(_chunks(view, progress))


class DistributedSampler(Sampler[int]):
    """``torch.utils.data.DistributedSampler`` with the same constructor, attributes, errors
    and indices, plus:

    Args:
        order: ``"torch"`` (PyTorch's ``torch.randperm`` order, bit for bit) or ``"feistel"``
            (a keyed random-access permutation: O(1) memory, any size up to 2^63).
        auto_epoch: advance the epoch by one when iterated again without ``set_epoch`` (warns
            once). ``False`` reproduces PyTorch exactly.
        randperm: which ``torch.randperm`` algorithm the torch order reproduces for datasets of
            214,748,364 items or more: ``"classic"`` (PyTorch <= 2.5), ``"current"`` (newer), or
            ``"auto"`` (the installed torch's). Smaller datasets are unaffected.

    ``seed`` is any integer in [-2^63, 2^64 - 1] (what ``torch.Generator.manual_seed`` takes);
    ``set_epoch`` takes an integer in [0, 2^64 - 1].
    """

    def __init__(self, dataset, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, *,
                 order: str = "torch", auto_epoch: bool = True, randperm: str = "auto") -> None:
        # PyTorch's checks and messages, in PyTorch's order.
        if num_replicas is None:
            if not dist.is_available():
                raise RuntimeError("Requires distributed package to be available")
            num_replicas = dist.get_world_size()
        if rank is None:
            if not dist.is_available():
                raise RuntimeError("Requires distributed package to be available")
            rank = dist.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                "Invalid rank {}, rank should be in the interval"
                " [0, {}]".format(rank, num_replicas - 1))
        if randperm == "auto":
            randperm = _default_randperm()
        elif randperm not in ("current", "classic"):
            raise ValueError(f"randperm = {randperm!r} is not a variant; "
                             "allowed: 'auto', 'current', 'classic'")
        self.dataset = dataset
        self._core = _core.DistributedSampler(
            len(dataset), operator.index(num_replicas), operator.index(rank),
            operator.index(seed), bool(shuffle), bool(drop_last), order,
            getattr(_core.RandpermVariant, randperm))
        self._config = {"size": len(dataset), "world_size": int(num_replicas),
                        "seed": self._core.seed, "shuffle": bool(shuffle),
                        "drop_last": bool(drop_last), "order": order, "randperm": randperm}
        self._rank = int(rank)
        self._auto_epoch = bool(auto_epoch)
        self._epoch = 0
        self._explicit = True       # the next iteration uses self._epoch as it is
        self._resume_at = 0         # global position the next iteration starts at
        self._progress: Optional[_Progress] = None  # the latest iteration's
        self._warned = False

    # PyTorch's attributes, read-only: the configuration lives in C++.
    num_replicas = property(lambda self: self._config["world_size"])
    rank = property(lambda self: self._rank)
    shuffle = property(lambda self: self._config["shuffle"])
    seed = property(lambda self: self._config["seed"])
    drop_last = property(lambda self: self._config["drop_last"])
    num_samples = property(lambda self: self._core.num_samples)
    total_size = property(lambda self: self._core.total_size)
    order = property(lambda self: self._config["order"])
    auto_epoch = property(lambda self: self._auto_epoch)

    @property
    def epoch(self) -> int:
        """The epoch of the latest (or, before any, the next) iteration. Assigning it is
        set_epoch."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.set_epoch(value)

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration use `epoch`, always (auto_epoch never overrides it). Setting
        the epoch a loaded state is in keeps the state's position within it."""
        epoch = _checked_epoch(epoch)
        if epoch != self._epoch:
            self._resume_at = 0
        self._epoch = epoch
        self._explicit = True

    def __len__(self) -> int:
        return self._core.num_samples

    def __iter__(self) -> Iterator[int]:
        epoch, start = self._epoch, self._resume_at
        advance = self._auto_epoch and not self._explicit
        if advance:
            if epoch == _EPOCH_MAX:
                raise ValueError("epoch = 2^64 - 1 cannot advance; call set_epoch")
            epoch, start = epoch + 1, 0
        try:
            view = self._core.epoch(epoch, start)
        except IndexError as error:  # seed + epoch beyond 2^64 - 1: PyTorch's RuntimeError
            raise RuntimeError(str(error)) from error
        if advance and not self._warned:
            self._warned = True
            warnings.warn(
                f"DistributedSampler iterated again without a set_epoch() call: advancing to "
                f"epoch {epoch} so this pass gets a new order (PyTorch's sampler would repeat "
                f"epoch {epoch - 1}'s order). Call sampler.set_epoch(epoch) before each epoch, "
                f"or pass auto_epoch=False for PyTorch's behaviour. Shown once per sampler.",
                UserWarning, stacklevel=2)
        self._epoch, self._explicit, self._resume_at = epoch, False, 0
        self._progress = _Progress(start)
        return _indices(view, self._progress)

    def indices(self, epoch: int) -> np.ndarray:
        """This rank's whole share of `epoch` at once, as an int64 numpy array: what iterating
        after ``set_epoch(epoch)`` yields from the epoch's start (``torch.from_numpy`` takes it as
        is). Computed in C++ with the GIL released, into the array only: no Python ints. A pure
        function of the configuration, `epoch` and the rank: the sampler's epoch, position and
        state are neither read nor changed. Costs n / num_replicas * 8 bytes; iterate instead to
        stay in O(1) memory."""
        epoch = _checked_epoch(epoch)
        try:
            view = self._core.epoch(epoch, 0)
        except IndexError as error:  # seed + epoch beyond 2^64 - 1, as when iterating
            raise RuntimeError(str(error)) from error
        out = np.empty(len(view), dtype=np.uint64)
        view.fill(0, out)  # C++, GIL released
        return out.view(np.int64)  # every index is below size <= 2^63

    def state_dict(self) -> Dict[str, Any]:
        """A plain dict (ints, bools, strings) that resumes this sampler's epoch where it stands:

        * ``version``: the format, STATE_VERSION.
        * ``epoch``: the epoch in progress.
        * ``consumed``: global positions of that epoch's order the job has read, all ranks
          together: a view started at C whose iterator handed out k indices on each rank gives
          C + k * world_size (the same on every rank, so rank 0 can save it). Counted from what
          this sampler's iterator yielded; a DataLoader with workers prefetches ahead of training.
        * ``size``, ``world_size``, ``seed``, ``shuffle``, ``drop_last``, ``order``,
          ``randperm``: the configuration, which load_state_dict requires to match.
        """
        if self._progress is not None and not self._explicit:
            consumed = self._progress.start + self._progress.count * self.num_replicas
        else:
            consumed = self._resume_at
        return {"version": STATE_VERSION, "epoch": self._epoch, "consumed": consumed,
                **self._config}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict(): the next iteration yields exactly the indices of the
        state's epoch that were not consumed, none when it is complete (calling set_epoch with
        that same epoch keeps the position; another epoch starts from its beginning). With
        auto_epoch, a complete state without a set_epoch call reads as a finished iteration: the
        next one advances to the following epoch. Raises ValueError, changing nothing, when the
        state is malformed or was saved under another configuration.
        """
        if not isinstance(state, dict):
            raise ValueError(f"state must be a dict from state_dict(), not {type(state).__name__}")
        missing = [key for key in ("version", "epoch", "consumed") + _CONFIG_FIELDS
                   if key not in state]
        if missing:
            raise ValueError(f"state is missing {', '.join(missing)}; expected a state_dict()")
        version = state["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(f"state version = {version!r} is not supported; allowed: "
                             f"{STATE_VERSION}")
        for key in _CONFIG_FIELDS:
            if state[key] != self._config[key] or type(state[key]) is not type(self._config[key]):
                hint = (" (resuming with another world size is not supported yet)"
                        if key == "world_size" else "")
                raise ValueError(f"state {key} = {state[key]!r} does not match this sampler's "
                                 f"{key} = {self._config[key]!r}{hint}")
        epoch, consumed = state["epoch"], state["consumed"]
        if type(epoch) is not int or not 0 <= epoch <= _EPOCH_MAX:
            raise ValueError(f"state epoch = {epoch!r} is out of range; allowed: an int in "
                             "[0, 2^64 - 1]")
        size, world_size = self._config["size"], self._config["world_size"]
        limit = size if self._config["drop_last"] else size + world_size - 1
        if type(consumed) is not int or not 0 <= consumed <= limit:
            raise ValueError(f"state consumed = {consumed!r} is out of range; allowed: an int in "
                             f"[0, {limit}] for size = {size}, world_size = {world_size}")
        complete = self._core.remaining(consumed) == 0
        self._epoch = epoch
        self._resume_at = consumed
        self._explicit = not complete
        # A complete epoch reads as a finished iteration, so state_dict() gives the state back.
        self._progress = _Progress(consumed) if complete else None
