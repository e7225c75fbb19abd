"""Sampling policies as PyTorch samplers: duplicate-free evaluation, weighted, blended, batched,
bucketed, shard-aware, and a wrapper that distributes any deterministic sampler.

    from distsampler.policies import DistributedEvalSampler, WeightedDistributedSampler, ...

Every sampler here follows ``torch.utils.data.DistributedSampler``'s conventions:
``num_replicas``/``rank`` default to the process group's, ``set_epoch(e)`` picks the epoch,
``len()`` is this rank's count, and (``auto_epoch=True``, as ``distsampler.torch``) iterating
again without ``set_epoch`` advances the epoch by one and warns once. Each rank's output is a pure
function of (configuration, epoch, rank, position) computed by the C++ core (policies/*.h); the
global stream is the same for every world size where docs/design.md says so. Bad parameters are
the C++ library's errors: ValueError naming the parameter (IndexError for a window out of range).
"""
import operator
import warnings
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, Sampler

from . import _core
from .torch import _CoreArgs, _default_randperm

__all__ = ["DistributedEvalSampler", "MaskedDataset", "WeightedDistributedSampler",
           "class_balanced_weights", "BlendedDistributedSampler", "DistributedBatchSampler",
           "BucketedBatchSampler", "ShardedDistributedSampler", "DistributedSamplerWrapper"]

_CHUNK = 1 << 16  # indices computed per call into C++ (512 KiB of uint64)
_EPOCH_MAX = 2**64 - 1


def _uint(name: str, value) -> int:
    """An integer parameter for a uint64 field: integers only (floats are TypeErrors, as
    operator.index makes them; a bool is a ValueError, as PyTorch's BatchSampler and
    WeightedRandomSampler reject it), negative values a ValueError naming `name`."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} = {value!r} is a bool; allowed: an integer >= 0")
    value = operator.index(value)
    if value < 0:
        raise ValueError(f"{name} = {value} is out of range; allowed: {name} >= 0")
    return value


def _uint_array(name: str, values) -> np.ndarray:
    """A sequence of non-negative integers as a uint64 array; a ValueError names the first bad
    element (the C++ core cannot see a negative or fractional value once converted)."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} has shape {array.shape}; allowed: a 1-D sequence of integers")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{name} has dtype {array.dtype}; allowed: integers")
    if array.dtype.kind == "i" and array.size and array.min() < 0:
        first = int(np.argmax(array < 0))
        raise ValueError(f"{name}[{first}] = {array[first]} is out of range; allowed: >= 0")
    return np.ascontiguousarray(array, dtype=np.uint64)


def _world(num_replicas: Optional[int], rank: Optional[int]) -> Tuple[int, int]:
    """num_replicas and rank, from the process group when omitted (PyTorch's rule and errors)."""
    if num_replicas is None or rank is None:
        if not dist.is_available():
            raise RuntimeError("Requires distributed package to be available")
        num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        rank = dist.get_rank() if rank is None else rank
    num_replicas, rank = operator.index(num_replicas), operator.index(rank)
    if rank >= num_replicas or rank < 0:
        raise ValueError(f"Invalid rank {rank}, rank should be in the interval"
                         f" [0, {num_replicas - 1}]")
    return num_replicas, rank


def _randperm(randperm: str) -> "_core.RandpermVariant":
    if randperm == "auto":
        randperm = _default_randperm()
    if randperm not in ("current", "classic"):
        raise ValueError(f"randperm = {randperm!r} is not a variant; "
                         "allowed: 'auto', 'current', 'classic'")
    return getattr(_core.RandpermVariant, randperm)


def _identity(size: int) -> "_core.EpochOrder":
    """The identity order of [0, size) (O(1)): views over it have the counts of any order of
    that size, without building a shuffled one."""
    return _core.make_epoch_order(size, 0, False, "feistel", _core.RandpermVariant.current, 0)


def _chunked(total: int, fill) -> Iterator[int]:
    """Yields fill's values for positions [0, total): fill(first, out) writes out[j] for
    position first + j in C++ without the GIL."""
    buffer = np.empty(min(_CHUNK, total), dtype=np.uint64)
    for first in range(0, total, _CHUNK):
        chunk = buffer[: min(_CHUNK, total - first)]
        fill(first, chunk)
        yield from chunk.tolist()


class _Epochs:
    """set_epoch and auto_epoch, as distsampler.torch.DistributedSampler has them: an explicit
    set_epoch always wins; without one, a new iteration advances the epoch (warning once) when
    auto_epoch is on, and repeats it (PyTorch's behaviour) when off."""

    def __init__(self, auto_epoch: bool) -> None:
        self._auto_epoch = bool(auto_epoch)
        self._epoch = 0
        self._explicit = True
        self._warned = False

    auto_epoch = property(lambda self: self._auto_epoch)
    epoch = property(lambda self: self._epoch, lambda self, value: self.set_epoch(value))

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration use `epoch`, an integer in [0, 2^64 - 1]."""
        epoch = operator.index(epoch)
        if not 0 <= epoch <= _EPOCH_MAX:
            raise ValueError(f"epoch = {epoch} is out of range; allowed: 0 <= epoch <= 2^64 - 1")
        self._epoch = epoch
        self._explicit = True

    def _next_epoch(self) -> int:
        """The epoch the iteration now starting reads."""
        if self._auto_epoch and not self._explicit:
            if self._epoch == _EPOCH_MAX:
                raise ValueError("epoch = 2^64 - 1 cannot advance; call set_epoch")
            self._epoch += 1
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"{type(self).__name__} iterated again without a set_epoch() call: advancing "
                    f"to epoch {self._epoch} so this pass gets a new order. Call "
                    f"sampler.set_epoch(epoch) before each epoch, or pass auto_epoch=False to "
                    f"repeat the order as PyTorch does. Shown once per sampler.",
                    UserWarning, stacklevel=3)
        self._explicit = False
        return self._epoch


# ---- Duplicate-free evaluation ------------------------------------------------------------------

class DistributedEvalSampler(_CoreArgs, _Epochs, Sampler):
    """Every sample of the dataset exactly once across ranks (PyTorch's DistributedSampler pads
    by repeating samples, so a metric summed over ranks counts some twice).

    Args:
        padded: ``False`` (uneven mode): rank r reads ceil((n - r) / W) samples, so ranks differ
            by at most one step (a loop with a collective per step must allow for that).
            ``True`` (padded-with-mask): every rank reads ceil(n / W), the same steps as
            PyTorch's sampler, and the wrapped-around repeats are flagged: ``mask`` (per
            position) and ``num_real``; with ``with_mask`` the flag travels with each index.
        with_mask: yield ``(index, is_real)`` pairs instead of indices, for ``MaskedDataset``
            so that every DataLoader batch carries its mask.
        shuffle, seed, order, randperm: as distsampler.torch.DistributedSampler (``shuffle``
            defaults to False for evaluation); with the same arguments and ``padded=True`` the
            indices are that sampler's.
    """

    def __init__(self, dataset, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shuffle: bool = False, seed: int = 0, *, padded: bool = False,
                 with_mask: bool = False, order: str = "torch", auto_epoch: bool = True,
                 randperm: str = "auto") -> None:
        super().__init__(auto_epoch)
        num_replicas, rank = _world(num_replicas, rank)
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.padded, self.with_mask = bool(shuffle), bool(padded), bool(with_mask)
        self._make_core(
            _core.DistributedSampler, len(dataset), num_replicas, rank, operator.index(seed),
            self.shuffle, False, order, _randperm(randperm), uneven=not self.padded)
        self.seed = self._core.seed
        # The same for every epoch and order: counted on the identity order.
        self.num_real = _core.rank_view(_identity(len(dataset)), num_replicas, rank, False,
                                        not self.padded).num_real

    def __len__(self) -> int:
        return self._core.num_samples

    @property
    def mask(self) -> torch.Tensor:
        """A bool tensor, one per position of an iteration: True for a real sample, False for a
        wrapped-around repeat that a metric must skip. The same for every epoch: the first
        ``num_real`` positions are real, the padding (at most one) is last."""
        mask = torch.zeros(len(self), dtype=torch.bool)
        mask[: self.num_real] = True
        return mask

    def __iter__(self):
        view = self._core.epoch(self._next_epoch())
        indices = _chunked(len(view), view.fill)
        if not self.with_mask:
            return indices
        real = view.num_real
        return ((index, i < real) for i, index in enumerate(indices))


class MaskedDataset(Dataset):
    """Wraps a dataset for DistributedEvalSampler(with_mask=True): item ``(index, is_real)``
    is ``(dataset[index], is_real)``, so a DataLoader batch is ``(samples, mask)`` with the mask
    a bool tensor. A plain integer index is a real sample."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        index, is_real = key if isinstance(key, tuple) else (key, True)
        return self.dataset[index], bool(is_real)


# ---- Weighted sampling with replacement ---------------------------------------------------------

def class_balanced_weights(labels) -> torch.Tensor:
    """Per-sample weights 1 / count(label) (a float64 tensor), so that every class present is
    drawn equally often by WeightedDistributedSampler or torch's WeightedRandomSampler.
    Labels are integers (a sequence, numpy array or tensor)."""
    if isinstance(labels, torch.Tensor):
        labels = labels.cpu().numpy()
    array = np.asarray(labels)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iub"):
        raise ValueError(f"labels has shape {array.shape} and dtype {array.dtype}; allowed: a "
                         "1-D sequence of integers")
    return torch.from_numpy(_core.class_balanced_weights(array.astype(np.int64)))


class WeightedDistributedSampler(_CoreArgs, _Epochs, Sampler):
    """``torch.utils.data.WeightedRandomSampler(weights, num_samples, replacement=True)``
    distributed: ``num_samples`` draws per epoch for all ranks together, draw g of epoch e a
    pure function of (weights, seed, e, g) (alias method, O(1) per draw), rank r reading draws
    r, r + W, ... So the job's stream of draws is the same for every world size.

    ``len()`` is ceil(num_samples / W) (floor with ``drop_last``); ``dataset``, when given, must
    have one weight per sample. Weights that are negative, NaN, infinite or all zero are a
    ValueError naming the first bad one.
    """

    def __init__(self, weights: Sequence[float], num_samples: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, dataset=None, auto_epoch: bool = True) -> None:
        super().__init__(auto_epoch)
        num_replicas, rank = _world(num_replicas, rank)
        if isinstance(weights, torch.Tensor):
            weights = weights.detach().cpu().numpy()
        weights = np.ascontiguousarray(weights, dtype=np.float64).reshape(-1)
        size = len(dataset) if dataset is not None else len(weights)
        self.num_replicas, self.rank, self.drop_last = num_replicas, rank, bool(drop_last)
        self.num_samples = _uint("num_samples", num_samples)  # all ranks, as torch names it
        self.weights = torch.from_numpy(weights)
        self._make_core(_core.WeightedSampler, weights, size, self.num_samples, num_replicas,
                        rank, operator.index(seed), self.drop_last)
        self.seed = seed

    def __len__(self) -> int:
        return self._core.num_samples

    def __iter__(self) -> Iterator[int]:
        epoch = self._next_epoch()
        return _chunked(len(self), lambda first, out: self._core.fill(epoch, first, out))


# ---- Blended datasets ---------------------------------------------------------------------------

class BlendedDistributedSampler(_CoreArgs, _Epochs, Sampler):
    """Several datasets blended by weight into one stream: after any i positions dataset k has
    been taken within QuotaSchedule.error_bound (<= 1 up to 4 datasets, reported otherwise) of
    i * w_k times, each dataset read in its own shuffled order that cycles through its own
    epochs. An epoch is ``samples_per_epoch`` stream positions for all ranks together, cut among
    ranks as DistributedSampler does, so the stream is the same for every world size.

    Yields indices into ``torch.utils.data.ConcatDataset(datasets)`` (``flat=True``) or
    ``(dataset_id, index)`` pairs (``flat=False``). ``datasets`` are the datasets (or their
    sizes, as ints).
    """

    def __init__(self, datasets, weights: Sequence[float], samples_per_epoch: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, flat: bool = True, auto_epoch: bool = True) -> None:
        super().__init__(auto_epoch)
        num_replicas, rank = _world(num_replicas, rank)
        sizes = [_uint("sizes", d) if isinstance(d, (int, np.integer)) else len(d)
                 for d in datasets]
        self.num_replicas, self.rank, self.flat = num_replicas, rank, bool(flat)
        self._make_core(
            _core.BlendedSampler, np.asarray(sizes, dtype=np.uint64),
            np.asarray(weights, dtype=np.float64), _uint("samples_per_epoch", samples_per_epoch),
            num_replicas, rank, operator.index(seed), bool(drop_last))
        self.sizes = sizes

    schedule = property(lambda self: self._core.schedule)

    def __len__(self) -> int:
        return self._core.num_samples

    def __iter__(self):
        return self._samples(self._next_epoch())

    def _samples(self, epoch: int):
        total = len(self)
        datasets = np.empty(min(_CHUNK, total), dtype=np.uint64)
        indices = np.empty(min(_CHUNK, total), dtype=np.uint64)
        for first in range(0, total, _CHUNK):
            count = min(_CHUNK, total - first)
            self._core.fill(epoch, first, datasets[:count], indices[:count], flat=self.flat)
            if self.flat:
                yield from indices[:count].tolist()
            else:
                yield from zip(datasets[:count].tolist(), indices[:count].tolist())


# ---- Batches ------------------------------------------------------------------------------------

class _BatchSamplerBase(_Epochs, Sampler):
    """Batches cut from one epoch's global order (batch b = positions [bB, (b + 1)B)), dealt to
    ranks b = r, r + W, ...; without drop_last the last round wraps around to batch 0."""

    def __init__(self, batch_size: int, num_replicas, rank, drop_last: bool,
                 auto_epoch: bool) -> None:
        super().__init__(auto_epoch)
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.batch_size = _uint("batch_size", batch_size)
        self.drop_last = bool(drop_last)

    def _view(self, epoch: int) -> "_core.BatchView":
        return _core.BatchView(self._order(epoch), self.batch_size, self.num_replicas, self.rank,
                               self.drop_last)

    def __len__(self) -> int:
        # The counts do not depend on the order: the identity order of the same size has them.
        return len(_core.BatchView(_identity(self._size()), self.batch_size, self.num_replicas,
                                   self.rank, self.drop_last))

    def __iter__(self) -> Iterator[List[int]]:
        view = self._view(self._next_epoch())
        return (view[j] for j in range(len(view)))


class DistributedBatchSampler(_BatchSamplerBase):
    """A distributed ``BatchSampler``: the epoch's global order (PyTorch's ``order="torch"`` or
    the random-access ``"feistel"``) is cut into batches of ``batch_size`` and the batches are
    dealt to ranks, so the list of batches does not depend on the world size. Each rank gets
    ceil(batches / W) batches (the last round wrapping around to the first batches), or with
    ``drop_last`` floor(full batches / W). Use as ``DataLoader(dataset, batch_sampler=...)``."""

    def __init__(self, dataset, batch_size: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, *, order: str = "torch", auto_epoch: bool = True,
                 randperm: str = "auto") -> None:
        super().__init__(batch_size, num_replicas, rank, drop_last, auto_epoch)
        self.dataset, self.shuffle, self.seed, self.order = dataset, bool(shuffle), seed, order
        self._randperm = _randperm(randperm)
        # Validates seed, order and sizes now, without building a shuffled order.
        _core.make_epoch_order(len(dataset), operator.index(seed), False, order, self._randperm, 0)
        len(self)

    def _size(self) -> int:
        return len(self.dataset)

    def _order(self, epoch: int):
        return _core.make_epoch_order(len(self.dataset), operator.index(self.seed), self.shuffle,
                                      self.order, self._randperm, epoch)


class BucketedBatchSampler(_BatchSamplerBase):
    """Length-bucketed distributed batches for variable-length sequences: the epoch's shuffled
    order is cut into windows of ``window_batches * batch_size`` samples, each window sorted by
    (length, index) and cut into batches, and the batches shuffled; then dealt to ranks as
    DistributedBatchSampler does. Batches hold samples of similar length, so padding waste falls
    (docs/design.md measures it); every sample is in exactly one batch each epoch."""

    def __init__(self, lengths: Sequence[int], batch_size: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, window_batches: int = 64,
                 auto_epoch: bool = True) -> None:
        super().__init__(batch_size, num_replicas, rank, drop_last, auto_epoch)
        if isinstance(lengths, torch.Tensor):
            lengths = lengths.cpu().numpy()
        self.lengths = _uint_array("lengths", lengths)
        self.window_batches = _uint("window_batches", window_batches)
        self.seed = seed
        # Validates batch_size, window_batches and seed now (on no samples: cheap), and the rest.
        _core.make_bucketed_order(np.zeros(0, dtype=np.uint64), self.batch_size,
                                  self.window_batches, operator.index(seed), 0)
        len(self)

    def _size(self) -> int:
        return len(self.lengths)

    def _order(self, epoch: int):
        return _core.make_bucketed_order(self.lengths, self.batch_size, self.window_batches,
                                         operator.index(self.seed), epoch)


# ---- Orders cut like DistributedSampler: shard-aware, and any user sampler ----------------------

class _OrderSampler(_Epochs, Sampler):
    """A rank's share of an epoch order, cut by DistributedSampler's rule (interleaved, padded by
    wrap-around, or drop_last); subclasses say what the order is."""

    def __init__(self, num_replicas, rank, drop_last: bool, auto_epoch: bool) -> None:
        super().__init__(auto_epoch)
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.drop_last = bool(drop_last)

    def _view(self, order, epoch: int):
        return _core.rank_view(order, self.num_replicas, self.rank, self.drop_last, False, epoch)

    def __len__(self) -> int:
        return len(_core.rank_view(_identity(self._size()), self.num_replicas, self.rank,
                                   self.drop_last))

    def __iter__(self) -> Iterator[int]:
        epoch = self._next_epoch()
        view = self._view(self._order(epoch), epoch)
        return _chunked(len(view), view.fill)


class ShardedDistributedSampler(_OrderSampler):
    """A shard-aware order for I/O locality: the dataset is stored in shards of
    ``shard_sizes`` (shard s = the next shard_sizes[s] indices); each epoch shuffles the shard
    order, then shuffles the samples of each window of ``window`` consecutive shards together.
    Consecutive samples of a rank touch about ``window`` shards (a full shuffle touches nearly
    one shard per sample); the epoch's order does not depend on the world size."""

    def __init__(self, shard_sizes: Sequence[int], num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, seed: int = 0, drop_last: bool = False, *,
                 window: int = 4, auto_epoch: bool = True) -> None:
        super().__init__(num_replicas, rank, drop_last, auto_epoch)
        self.shard_sizes = _uint_array("shard_sizes", shard_sizes)
        self.window = _uint("window", window)
        self.seed = seed
        self._order(0)  # validates the options

    def _size(self) -> int:
        return int(self.shard_sizes.sum())

    def _order(self, epoch: int):
        return _core.make_shard_order(self.shard_sizes, self.window, operator.index(self.seed),
                                      epoch)


class DistributedSamplerWrapper(_OrderSampler):
    """Distributes any deterministic sampler (pytorch#23430): each epoch the wrapped sampler's
    whole output (the same list on every rank: seed it identically) is cut among ranks by
    DistributedSampler's rule: rank r reads its positions r, r + W, ..., padded by wrap-around
    (or drop_last). ``set_epoch`` is forwarded to the wrapped sampler when it has one, including
    the epoch auto_epoch advances to. Holds one epoch of the wrapped sampler's output."""

    def __init__(self, sampler, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 drop_last: bool = False, *, auto_epoch: bool = True) -> None:
        super().__init__(num_replicas, rank, drop_last, auto_epoch)
        self.sampler = sampler

    def _size(self) -> int:
        return len(self.sampler)

    def _order(self, epoch: int):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        return _core.make_sequence_order(_uint_array("sampler output", list(self.sampler)))
