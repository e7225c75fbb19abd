"""Sampling policies as PyTorch samplers: duplicate-free evaluation, weighted, blended, batched,
bucketed, shard-aware, and a wrapper that distributes any deterministic sampler.

    from distsampler.policies import DistributedEvalSampler, WeightedDistributedSampler, ...

Every sampler here follows ``torch.utils.data.DistributedSampler``'s conventions:
``num_replicas``/``rank`` default to the process group's, ``set_epoch(e)`` picks the epoch,
``len()`` is this rank's count, and, as in ``distsampler.torch``, a pass started without a
``set_epoch`` call since the previous one replays its epoch (a shuffled sampler warns once) or,
with ``auto_epoch=True``, advances the epoch by one (and warns once). A pass's epoch is
decided at its first ``next()``, so DataLoader workers (which call
``iter()`` twice) change nothing. Every sampler has ``state_dict()``/``load_state_dict()``: the
epoch and the global position consumed, resumable on any number of ranks (every stream here is
the same for every world size), and read exactly through distsampler.data.DataLoader. The
samplers that shard by rank are ``torch.utils.data.distributed.DistributedSampler`` instances, so
frameworks that check for one leave them in place. Each rank's output is a pure
function of (configuration, epoch, rank, position) computed by the C++ core (policies/*.h); the
global stream is the same for every world size where docs/design.md says so. Bad parameters are
the C++ library's errors: ValueError naming the parameter (IndexError for a window out of range).
"""
import operator
from typing import Any, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
import torch.utils.data.distributed
from torch.utils.data import Dataset, Sampler

from . import _core
from ._passes import (CheckpointMismatch, PlainShell, Shell, check_uint64, randperm_variant,
                      resolve_world)

__all__ = ["DistributedEvalSampler", "MaskedDataset", "WeightedDistributedSampler",
           "class_balanced_weights", "BlendedDistributedSampler", "DistributedBatchSampler",
           "BucketedBatchSampler", "ShardedDistributedSampler", "DistributedSamplerWrapper",
           "CheckpointMismatch"]

_TorchDistributedSampler = torch.utils.data.distributed.DistributedSampler
# What the weights and lengths arguments take: a sequence, a tensor or a numpy array.
_Numbers = Union[Sequence[float], torch.Tensor, "np.ndarray[Any, Any]"]
_Integers = Union[Sequence[int], torch.Tensor, "np.ndarray[Any, Any]"]


class _Policy(Shell):
    """A policy sampler: the world resolved as PyTorch does, the counts from the policy."""

    def _init_world(self, num_replicas: Optional[int], rank: Optional[int], drop_last: bool,
                    seed: int = 0) -> None:
        self.num_replicas, self.rank = resolve_world(num_replicas, rank)
        # PyTorch's attributes; a policy's randomness is its own (shuffle: it always shuffles).
        self.drop_last, self.shuffle, self.seed = bool(drop_last), True, seed


class _OrderCut(_Policy, _TorchDistributedSampler):
    """An epoch order cut like DistributedSampler's: PyTorch's count attributes, live."""

    num_samples = property(lambda self: len(self))
    total_size = property(lambda self: len(self) * self.num_replicas)


# ---- Duplicate-free evaluation ------------------------------------------------------------------

class DistributedEvalSampler(PlainShell, _TorchDistributedSampler):
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
        shuffle, seed, order, randperm, feistel_version: as
            distsampler.torch.DistributedSampler (``shuffle``
            defaults to False for evaluation); with the same arguments and ``padded=True`` the
            indices are that sampler's.
    """

    def __init__(self, dataset: Any, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = False, seed: int = 0, *,
                 padded: bool = False, with_mask: bool = False, order: str = "torch",
                 auto_epoch: bool = False, randperm: str = "auto", check_agreement: bool = True,
                 process_group: Any = None, feistel_version: int = 2) -> None:
        self.padded = bool(padded)
        self._init_plain(dataset, num_replicas, rank, seed, shuffle, False, order, randperm,
                         feistel_version, auto_epoch, check_agreement, process_group,
                         uneven=not self.padded, with_mask=bool(with_mask))
        # The same for every epoch and order: counted on the unshuffled order (O(1)).
        unshuffled = _core.plain_policy("eval", **{**self._options, "shuffle": False})
        self.num_real = unshuffled.sampler.epoch(0, 0).num_real

    _kind = "eval"

    @property
    def with_mask(self) -> bool:
        return bool(self._options["with_mask"])

    @with_mask.setter
    def with_mask(self, value: bool) -> None:  # the next pass yields (index, is_real) pairs
        self._options["with_mask"] = bool(value)
        self._core = _core.PassSampler(self._policy(), self._core.cursor)

    @property
    def mask(self) -> torch.Tensor:
        """A bool tensor, one per position of a whole pass: True for a real sample, False for a
        wrapped-around repeat that a metric must skip. The same for every epoch: the first
        ``num_real`` positions are real, the padding (at most one) is last."""
        mask = torch.zeros(self.num_samples, dtype=torch.bool)
        mask[: self.num_real] = True
        return mask



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

def class_balanced_weights(labels: _Integers) -> torch.Tensor:
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


class WeightedDistributedSampler(_Policy, _TorchDistributedSampler):
    """``torch.utils.data.WeightedRandomSampler(weights, num_samples, replacement=True)``
    distributed: ``num_samples`` draws per epoch for all ranks together, draw g of epoch e a
    pure function of (weights, seed, e, g) (alias method, O(1) per draw), rank r reading draws
    r, r + W, ... So the job's stream of draws is the same for every world size, and a resumed
    job reads the draws after the consumed ones, each once.

    ``len()`` is ceil(num_samples / W) (floor with ``drop_last``); ``dataset``, when given, must
    have one weight per sample. Weights that are negative, NaN, infinite or all zero are a
    ValueError naming the first bad one.
    """

    def __init__(self, weights: _Numbers, num_samples: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, dataset: Any = None, auto_epoch: bool = False,
                 check_agreement: bool = True, process_group: Any = None) -> None:
        self._init_world(num_replicas, rank, drop_last, seed)
        if isinstance(weights, torch.Tensor):
            weights = weights.detach().cpu().numpy()
        array = np.ascontiguousarray(weights, dtype=np.float64)
        if array.ndim != 1:  # PyTorch's WeightedRandomSampler refuses it too
            raise ValueError(f"weights has shape {tuple(array.shape)}; allowed: a 1-D sequence")
        self.dataset, self.weights = dataset, torch.from_numpy(array)
        self._built_size = len(dataset) if dataset is not None else len(array)
        # All ranks, as torch names it; >= 1 as torch's WeightedRandomSampler requires.
        self.num_samples = check_uint64("num_samples", num_samples, 1)
        self._init_shell(auto_epoch, check_agreement, process_group)
        self.total_size = len(self) * self.num_replicas

    def _policy(self) -> Any:
        return _core.weighted_policy(self.weights.numpy(), self._built_size, self.num_samples,
                                     self.num_replicas, self.rank, operator.index(self.seed),
                                     self.drop_last)


# ---- Blended datasets ---------------------------------------------------------------------------

class BlendedDistributedSampler(_Policy, _TorchDistributedSampler):
    """Several datasets blended by weight into one stream: after any i < 2^64 positions dataset k
    has been taken within ``schedule.error_bound`` (< 1 up to 4 datasets, < 1.68 for any number)
    of i * W_k / T times, exactly, where W_k / T (``schedule.quota_weights``,
    ``schedule.quota_total``) is the normalized weight itself when ``schedule.quota_exact`` and
    otherwise its rounding to T <= 2^62 (docs/design.md, "Blending"); each dataset is read in its
    own shuffled order that cycles through its own epochs. An epoch is ``samples_per_epoch``
    stream positions for all ranks together, cut among ranks as DistributedSampler does, so the
    stream is the same for every world size. Sizes summing past 2^64 - 1 are refused (flat
    indices would wrap).

    Yields indices into ``torch.utils.data.ConcatDataset(datasets)`` (``flat=True``) or
    ``(dataset_id, index)`` pairs (``flat=False``). ``datasets`` are the datasets (or their
    sizes, as ints).
    """

    def __init__(self, datasets: Sequence[Any], weights: _Numbers, samples_per_epoch: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, flat: bool = True, auto_epoch: bool = False,
                 check_agreement: bool = True, process_group: Any = None) -> None:
        self._init_world(num_replicas, rank, drop_last, seed)
        self.sizes = [check_uint64("sizes", d) if isinstance(d, (int, np.integer)) else len(d)
                      for d in datasets]
        self.flat = bool(flat)
        self.samples_per_epoch = check_uint64("samples_per_epoch", samples_per_epoch)
        self._weights = [float(w) for w in np.asarray(weights, dtype=np.float64).reshape(-1)]
        self._init_shell(auto_epoch, check_agreement, process_group)
        self.num_samples, self.total_size = len(self), len(self) * self.num_replicas

    @property
    def schedule(self) -> Any:
        return _core.QuotaSchedule(np.asarray(self._weights, dtype=np.float64))

    def _policy(self) -> Any:
        return _core.blended_policy(np.asarray(self.sizes, dtype=np.uint64),
                                    np.asarray(self._weights, dtype=np.float64),
                                    self.samples_per_epoch, self.num_replicas, self.rank,
                                    operator.index(self.seed), self.drop_last, self.flat)


# ---- Orders cut like DistributedSampler: shard-aware, and any user sampler ----------------------

class ShardedDistributedSampler(_OrderCut):
    """A shard-aware order for I/O locality: the dataset is stored in shards of
    ``shard_sizes`` (shard s = the next shard_sizes[s] indices); each epoch shuffles the shard
    order, then shuffles the samples of each window of ``window`` consecutive shards together.
    Consecutive samples of a rank touch about ``window`` shards (a full shuffle touches nearly
    one shard per sample); the epoch's order does not depend on the world size."""

    def __init__(self, shard_sizes: _Integers, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, seed: int = 0, drop_last: bool = False, *,
                 window: int = 4, auto_epoch: bool = False, check_agreement: bool = True,
                 process_group: Any = None) -> None:
        self._init_world(num_replicas, rank, drop_last, seed)
        self.shard_sizes = _core.uint_array("shard_sizes", shard_sizes)
        self.window = check_uint64("window", window)
        self._init_shell(auto_epoch, check_agreement, process_group)

    def _policy(self) -> Any:
        return _core.sharded_policy(self.shard_sizes, self.window, operator.index(self.seed),
                                    self.num_replicas, self.rank, self.drop_last)


class DistributedSamplerWrapper(_OrderCut):
    """Distributes any deterministic sampler (pytorch#23430): each epoch the wrapped sampler's
    whole output (the same list on every rank: seed it identically) is cut among ranks by
    DistributedSampler's rule: rank r reads its positions r, r + W, ..., padded by wrap-around
    (or drop_last). ``set_epoch`` is forwarded to the wrapped sampler when it has one, including
    the epoch auto_epoch advances to. Holds one epoch of the wrapped sampler's output."""

    def __init__(self, sampler: Any, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, drop_last: bool = False, *,
                 auto_epoch: bool = False, check_agreement: bool = True,
                 process_group: Any = None) -> None:
        self._init_world(num_replicas, rank, drop_last)  # the randomness is the sampler's own
        self.sampler = sampler
        self._init_shell(auto_epoch, check_agreement, process_group)

    def _policy(self) -> Any:
        return _core.wrapper_policy(self.sampler, self.num_replicas, self.rank, self.drop_last)


# ---- Batches ------------------------------------------------------------------------------------

class _EpochForwarder:
    """A batch sampler's ``sampler`` attribute: frameworks that call
    ``loader.batch_sampler.sampler.set_epoch`` (PyTorch Lightning) reach the batch sampler."""

    def __init__(self, owner: "_Batches", size: int) -> None:
        self._owner, self._size = owner, size

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)

    def __len__(self) -> int:
        return self._size


class _Batches(_Policy, Sampler[List[int]]):
    """Batches cut from one epoch's order (batch b = positions [bB, (b + 1)B)), dealt to ranks
    b = r, r + W, ...; without drop_last the last round wraps around to batch 0. The checkpoint
    counts global batches."""

    def _init_batches(self, batch_size: int, num_replicas: Optional[int], rank: Optional[int],
                      drop_last: bool, size: int, seed: int) -> None:
        self._init_world(num_replicas, rank, drop_last, seed)
        self.batch_size = check_uint64("batch_size", batch_size, 1)
        self.sampler = _EpochForwarder(self, size)

    def __iter__(self) -> Iterator[List[int]]:  # Shell's, typed as a batch sampler's
        return Shell.__iter__(self)


class DistributedBatchSampler(_Batches):
    """A distributed ``BatchSampler``: the epoch's global order (PyTorch's ``order="torch"`` or
    the random-access ``"feistel"``) is cut into batches of ``batch_size`` and the batches are
    dealt to ranks, so the list of batches does not depend on the world size. Each rank gets
    ceil(batches / W) batches (the last round wrapping around to the first batches), or with
    ``drop_last`` floor(full batches / W). Use as ``DataLoader(dataset, batch_sampler=...)``.
    ``feistel_version``: as distsampler.torch.DistributedSampler's."""

    def __init__(self, dataset: Any, batch_size: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, *, order: str = "torch", auto_epoch: bool = False,
                 randperm: str = "auto", check_agreement: bool = True,
                 process_group: Any = None, feistel_version: int = 2) -> None:
        self._init_batches(batch_size, num_replicas, rank, drop_last, len(dataset), seed)
        self.dataset, self.shuffle = dataset, bool(shuffle)
        self.order, self.feistel_version = order, feistel_version
        self._built_size, self._randperm = len(dataset), randperm_variant(randperm)
        self._init_shell(auto_epoch, check_agreement, process_group)

    def _policy(self) -> Any:
        return _core.batch_policy(self._built_size, operator.index(self.seed), self.shuffle,
                                  self.order, self._randperm, self.feistel_version,
                                  self.batch_size, self.num_replicas, self.rank, self.drop_last)


class BucketedBatchSampler(_Batches):
    """Length-bucketed distributed batches for variable-length sequences: the epoch's shuffled
    order is cut into windows of ``window_batches * batch_size`` samples, each window sorted by
    (length, index) and cut into batches, and the batches shuffled; then dealt to ranks as
    DistributedBatchSampler does. Batches hold samples of similar length, so padding waste falls
    (docs/design.md measures it); every sample is in exactly one batch each epoch."""

    def __init__(self, lengths: _Integers, batch_size: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, window_batches: int = 64,
                 auto_epoch: bool = False, check_agreement: bool = True,
                 process_group: Any = None) -> None:
        if isinstance(lengths, torch.Tensor):
            lengths = lengths.cpu().numpy()
        self.lengths = _core.uint_array("lengths", lengths)
        self._init_batches(batch_size, num_replicas, rank, drop_last, len(self.lengths), seed)
        self.window_batches = check_uint64("window_batches", window_batches, 1)
        self._init_shell(auto_epoch, check_agreement, process_group)

    def _policy(self) -> Any:
        return _core.bucketed_policy(self.lengths, self.batch_size, self.window_batches,
                                     operator.index(self.seed), self.num_replicas, self.rank,
                                     self.drop_last)
