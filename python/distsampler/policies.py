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
from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from . import _core
from ._order_samplers import DistributedSamplerWrapper, ShardedDistributedSampler
from ._passes import (CheckpointMismatch, CoreArgs, check_feistel_version, check_order,
                      feistel_version_entry, fill_chunks)
from ._policy_base import (_BATCH_CHUNK, _CHUNK, _Base, _Positions, _TorchDistributedSampler,
                           _digest, _identity, _randperm, _uint, _uint_array)

__all__ = ["DistributedEvalSampler", "MaskedDataset", "WeightedDistributedSampler",
           "class_balanced_weights", "BlendedDistributedSampler", "DistributedBatchSampler",
           "BucketedBatchSampler", "ShardedDistributedSampler", "DistributedSamplerWrapper",
           "CheckpointMismatch"]

# ---- Duplicate-free evaluation ------------------------------------------------------------------

class DistributedEvalSampler(CoreArgs, _Base, _TorchDistributedSampler):
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

    def __init__(self, dataset, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shuffle: bool = False, seed: int = 0, *, padded: bool = False,
                 with_mask: bool = False, order: str = "torch", auto_epoch: bool = False,
                 randperm: str = "auto", check_agreement: bool = True,
                 process_group=None, feistel_version: int = 2) -> None:
        self._init_world(num_replicas, rank, auto_epoch, check_agreement, process_group)
        self.dataset = dataset
        self.shuffle, self.padded, self.with_mask = bool(shuffle), bool(padded), bool(with_mask)
        self.drop_last = False
        self._size = len(dataset)
        self._make_core(
            _core.DistributedSampler, self._size, self.num_replicas, self.rank,
            operator.index(seed), self.shuffle, False, check_order(order), _randperm(randperm),
            uneven=not self.padded, feistel_version=check_feistel_version(feistel_version))
        self.seed = self._core.seed
        self.num_samples = self._core.num_samples
        self.total_size = self._core.total_size
        # The same for every epoch and order: counted on the identity order.
        self.num_real = _core.rank_view(_identity(self._size), self.num_replicas, self.rank,
                                        False, not self.padded).num_real

    @property
    def mask(self) -> torch.Tensor:
        """A bool tensor, one per position of a whole pass: True for a real sample, False for a
        wrapped-around repeat that a metric must skip. The same for every epoch: the first
        ``num_real`` positions are real, the padding (at most one) is last."""
        mask = torch.zeros(self.num_samples, dtype=torch.bool)
        mask[: self.num_real] = True
        return mask

    def _remaining(self, start: int) -> int:
        return self._core.remaining(start)

    def _chunks(self, epoch: int, start: int):
        view = self._core.epoch(epoch, start)
        chunks = fill_chunks(len(view), view.fill, _CHUNK)
        if not self.with_mask:
            return chunks
        return self._masked(chunks, view.num_real)

    @staticmethod
    def _masked(chunks, real: int):
        first = 0
        for chunk in chunks:
            yield [(index, first + j < real) for j, index in enumerate(chunk)]
            first += len(chunk)

    def _dataset_size(self):
        return len(self.dataset), self._size

    def _config(self) -> Dict[str, Any]:
        config = _core.fingerprint(self._core)
        return {**{key: getattr(config, key) for key in (
            "algorithm_version", "size", "seed", "shuffle", "uneven", "order", "randperm",
            "feistel_rounds")}, **feistel_version_entry(config.feistel_version)}


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


class WeightedDistributedSampler(CoreArgs, _Base, _TorchDistributedSampler):
    """``torch.utils.data.WeightedRandomSampler(weights, num_samples, replacement=True)``
    distributed: ``num_samples`` draws per epoch for all ranks together, draw g of epoch e a
    pure function of (weights, seed, e, g) (alias method, O(1) per draw), rank r reading draws
    r, r + W, ... So the job's stream of draws is the same for every world size, and a resumed
    job reads the draws after the consumed ones, each once.

    ``len()`` is ceil(num_samples / W) (floor with ``drop_last``); ``dataset``, when given, must
    have one weight per sample. Weights that are negative, NaN, infinite or all zero are a
    ValueError naming the first bad one.
    """

    def __init__(self, weights: Sequence[float], num_samples: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, dataset=None, auto_epoch: bool = False,
                 check_agreement: bool = True, process_group=None) -> None:
        self._init_world(num_replicas, rank, auto_epoch, check_agreement, process_group)
        if isinstance(weights, torch.Tensor):
            weights = weights.detach().cpu().numpy()
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        if weights.ndim != 1:  # PyTorch's WeightedRandomSampler refuses it too
            raise ValueError(f"weights has shape {tuple(weights.shape)}; allowed: a 1-D sequence")
        self.dataset = dataset
        self._size = len(dataset) if dataset is not None else len(weights)
        self.drop_last, self.shuffle = bool(drop_last), True
        # All ranks, as torch names it; >= 1 as torch's WeightedRandomSampler requires.
        self.num_samples = _uint("num_samples", num_samples, 1)
        self.weights = torch.from_numpy(weights)
        self._make_core(_core.WeightedSampler, weights, self._size, self.num_samples,
                        self.num_replicas, self.rank, operator.index(seed), self.drop_last)
        self.seed = seed
        self._positions = _Positions(self.num_samples, self.num_replicas, self.rank,
                                     self.drop_last)
        self.total_size = self._core.num_samples * self.num_replicas

    def _remaining(self, start: int) -> int:
        return self._positions.count(start)

    def _chunks(self, epoch: int, start: int):
        # With replacement there is nothing to wrap around: the draws past num_samples continue
        # the stream, so rank r's j-th draw is global draw start + r + j * W.
        first = start + self.rank
        return fill_chunks(
            self._remaining(start),
            lambda j, out: self._core.fill_global(epoch, first + j * self.num_replicas,
                                                  self.num_replicas, out), _CHUNK)

    def _dataset_size(self):
        return None if self.dataset is None else (len(self.dataset), self._size)

    def _config(self) -> Dict[str, Any]:
        return {"weights": _digest(self.weights.numpy()), "size": self._size,
                "num_samples": self.num_samples, "seed": operator.index(self.seed),
                "drop_last": self.drop_last}


# ---- Blended datasets ---------------------------------------------------------------------------

class BlendedDistributedSampler(CoreArgs, _Base, _TorchDistributedSampler):
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

    def __init__(self, datasets, weights: Sequence[float], samples_per_epoch: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, flat: bool = True, auto_epoch: bool = False,
                 check_agreement: bool = True, process_group=None) -> None:
        self._init_world(num_replicas, rank, auto_epoch, check_agreement, process_group)
        sizes = [_uint("sizes", d) if isinstance(d, (int, np.integer)) else len(d)
                 for d in datasets]
        self.flat, self.drop_last, self.shuffle, self.seed = bool(flat), bool(drop_last), True, seed
        self.samples_per_epoch = _uint("samples_per_epoch", samples_per_epoch)
        self._weights = [float(w) for w in np.asarray(weights, dtype=np.float64).reshape(-1)]
        self._make_core(
            _core.BlendedSampler, np.asarray(sizes, dtype=np.uint64),
            np.asarray(weights, dtype=np.float64), self.samples_per_epoch,
            self.num_replicas, self.rank, operator.index(seed), self.drop_last)
        self.sizes = sizes
        self.num_samples = self._core.num_samples
        self.total_size = self.num_samples * self.num_replicas
        self._positions = _Positions(self.samples_per_epoch, self.num_replicas, self.rank,
                                     self.drop_last)

    schedule = property(lambda self: self._core.schedule)

    def _remaining(self, start: int) -> int:
        return self._positions.count(start)

    def _chunks(self, epoch: int, start: int):
        view = self._positions.view(start)
        base = epoch * self.samples_per_epoch  # epoch e is stream positions [e S, (e + 1) S)
        total = len(view)
        positions = np.empty(min(_CHUNK, total), dtype=np.uint64)
        datasets = np.empty_like(positions)
        indices = np.empty_like(positions)
        for first in range(0, total, _CHUNK):
            count = min(_CHUNK, total - first)
            view.fill(first, positions[:count])
            positions[:count] += np.uint64(base)
            self._core.fill_global(positions[:count], datasets[:count], indices[:count],
                                   flat=self.flat)
            if self.flat:
                yield indices[:count].tolist()
            else:
                yield list(zip(datasets[:count].tolist(), indices[:count].tolist()))

    def _config(self) -> Dict[str, Any]:
        return {"sizes": list(self.sizes), "weights": self._weights,
                "samples_per_epoch": self.samples_per_epoch, "seed": operator.index(self.seed),
                "drop_last": self.drop_last}


# ---- Batches ------------------------------------------------------------------------------------

class _EpochForwarder:
    """A batch sampler's ``sampler`` attribute: frameworks that call
    ``loader.batch_sampler.sampler.set_epoch`` (PyTorch Lightning) reach the batch sampler."""

    def __init__(self, owner) -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)

    def __len__(self) -> int:
        return self._owner._size()


class _BatchSamplerBase(_Base):
    """Batches cut from one epoch's global order (batch b = positions [bB, (b + 1)B)), dealt to
    ranks b = r, r + W, ...; without drop_last the last round wraps around to batch 0. The
    checkpoint counts global batches."""

    def __init__(self, batch_size: int, num_replicas, rank, drop_last: bool, auto_epoch: bool,
                 check_agreement: bool, process_group) -> None:
        self._init_world(num_replicas, rank, auto_epoch, check_agreement, process_group)
        self.batch_size = _uint("batch_size", batch_size, 1)
        self.drop_last = bool(drop_last)
        self.sampler = _EpochForwarder(self)
        # The C++ checks of batch_size, world size and rank, on no samples.
        _core.BatchView(_identity(0), self.batch_size, self.num_replicas, self.rank,
                        self.drop_last)

    def _batches(self) -> _Positions:
        # Without drop_last every batch counts (the last may be short); with it, full ones only.
        n, size = self._size(), self.batch_size
        usable = n // size if self.drop_last else -(-n // size)
        return _Positions(usable, self.num_replicas, self.rank, self.drop_last)

    def _remaining(self, start: int) -> int:
        return self._batches().count(start)

    def _chunks(self, epoch: int, start: int):
        view = _core.BatchView(self._order(epoch), self.batch_size, self.num_replicas,
                               self.rank, self.drop_last)
        numbers = self._batches().view(start)
        for first in range(0, len(numbers), _BATCH_CHUNK):
            yield [view.global_indices(numbers[j])
                   for j in range(first, min(first + _BATCH_CHUNK, len(numbers)))]


class DistributedBatchSampler(_BatchSamplerBase):
    """A distributed ``BatchSampler``: the epoch's global order (PyTorch's ``order="torch"`` or
    the random-access ``"feistel"``) is cut into batches of ``batch_size`` and the batches are
    dealt to ranks, so the list of batches does not depend on the world size. Each rank gets
    ceil(batches / W) batches (the last round wrapping around to the first batches), or with
    ``drop_last`` floor(full batches / W). Use as ``DataLoader(dataset, batch_sampler=...)``.
    ``feistel_version``: as distsampler.torch.DistributedSampler's."""

    def __init__(self, dataset, batch_size: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, *, order: str = "torch", auto_epoch: bool = False,
                 randperm: str = "auto", check_agreement: bool = True,
                 process_group=None, feistel_version: int = 2) -> None:
        super().__init__(batch_size, num_replicas, rank, drop_last, auto_epoch, check_agreement,
                         process_group)
        self.dataset, self.shuffle, self.seed = dataset, bool(shuffle), seed
        self.order = check_order(order)
        self.feistel_version = check_feistel_version(feistel_version)
        self._built_size = len(dataset)
        self._randperm = _randperm(randperm)
        # Validates seed, order and sizes now, without building a shuffled order.
        _core.make_epoch_order(len(dataset), operator.index(seed), False, order, self._randperm, 0,
                               feistel_version=self.feistel_version)
        len(self)

    def _size(self) -> int:
        return self._built_size

    def _dataset_size(self):
        return len(self.dataset), self._built_size

    def _order(self, epoch: int):
        return _core.make_epoch_order(self._built_size, operator.index(self.seed), self.shuffle,
                                      self.order, self._randperm, epoch,
                                      feistel_version=self.feistel_version)

    def _config(self) -> Dict[str, Any]:
        # feistel_version only where it is not 1 (feistel_version_entry): older states lack it.
        applies = self.order == "feistel" and self.shuffle
        version = feistel_version_entry(self.feistel_version if applies else 1)
        return {"size": self._built_size, "batch_size": self.batch_size,
                "seed": operator.index(self.seed), "shuffle": self.shuffle,
                "drop_last": self.drop_last, "order": self.order,
                "randperm": self._randperm.name, **version}


class BucketedBatchSampler(_BatchSamplerBase):
    """Length-bucketed distributed batches for variable-length sequences: the epoch's shuffled
    order is cut into windows of ``window_batches * batch_size`` samples, each window sorted by
    (length, index) and cut into batches, and the batches shuffled; then dealt to ranks as
    DistributedBatchSampler does. Batches hold samples of similar length, so padding waste falls
    (docs/design.md measures it); every sample is in exactly one batch each epoch."""

    def __init__(self, lengths: Sequence[int], batch_size: int,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None, seed: int = 0,
                 drop_last: bool = False, *, window_batches: int = 64,
                 auto_epoch: bool = False, check_agreement: bool = True,
                 process_group=None) -> None:
        super().__init__(batch_size, num_replicas, rank, drop_last, auto_epoch, check_agreement,
                         process_group)
        if isinstance(lengths, torch.Tensor):
            lengths = lengths.cpu().numpy()
        self.lengths = _uint_array("lengths", lengths)
        self.window_batches = _uint("window_batches", window_batches, 1)
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

    def _config(self) -> Dict[str, Any]:
        return {"lengths": _digest(self.lengths), "size": len(self.lengths),
                "batch_size": self.batch_size, "window_batches": self.window_batches,
                "seed": operator.index(self.seed), "drop_last": self.drop_last}
