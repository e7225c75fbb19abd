"""Orders cut like DistributedSampler (private; exported by distsampler.policies): the
shard-aware order, and a wrapper that distributes any deterministic sampler."""
import operator
from typing import Any, Dict, Optional, Sequence

from . import _core
from ._passes import fill_chunks
from ._policy_base import (_CHUNK, _Base, _Positions, _TorchDistributedSampler, _digest, _uint,
                           _uint_array)


# ---- Orders cut like DistributedSampler: shard-aware, and any user sampler ----------------------

class _OrderSampler(_Base, _TorchDistributedSampler):
    """A rank's share of an epoch order, cut by DistributedSampler's rule (interleaved, padded by
    wrap-around, or drop_last); subclasses say what the order is."""

    def __init__(self, num_replicas, rank, drop_last: bool, auto_epoch: bool, check_agreement,
                 process_group) -> None:
        self._init_world(num_replicas, rank, auto_epoch, check_agreement, process_group)
        self.drop_last, self.shuffle = bool(drop_last), True

    @property
    def num_samples(self) -> int:
        return self._remaining(0)

    @property
    def total_size(self) -> int:
        return self.num_samples * self.num_replicas

    def _remaining(self, start: int) -> int:
        return _Positions(self._size(), self.num_replicas, self.rank, self.drop_last).count(start)

    def _chunks(self, epoch: int, start: int):
        order = self._order(epoch)
        view = _core.rank_view(order, self.num_replicas, self.rank, self.drop_last, False, epoch,
                               start)
        return fill_chunks(len(view), view.fill, _CHUNK)


class ShardedDistributedSampler(_OrderSampler):
    """A shard-aware order for I/O locality: the dataset is stored in shards of
    ``shard_sizes`` (shard s = the next shard_sizes[s] indices); each epoch shuffles the shard
    order, then shuffles the samples of each window of ``window`` consecutive shards together.
    Consecutive samples of a rank touch about ``window`` shards (a full shuffle touches nearly
    one shard per sample); the epoch's order does not depend on the world size."""

    def __init__(self, shard_sizes: Sequence[int], num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, seed: int = 0, drop_last: bool = False, *,
                 window: int = 4, auto_epoch: bool = False, check_agreement: bool = True,
                 process_group=None) -> None:
        super().__init__(num_replicas, rank, drop_last, auto_epoch, check_agreement,
                         process_group)
        self.shard_sizes = _uint_array("shard_sizes", shard_sizes)
        self.window = _uint("window", window)
        self.seed = seed
        self._order(0)  # validates the options

    def _size(self) -> int:
        return int(self.shard_sizes.sum())

    def _order(self, epoch: int):
        return _core.make_shard_order(self.shard_sizes, self.window, operator.index(self.seed),
                                      epoch)

    def _config(self) -> Dict[str, Any]:
        return {"shard_sizes": _digest(self.shard_sizes), "shards": len(self.shard_sizes),
                "window": self.window, "seed": operator.index(self.seed),
                "drop_last": self.drop_last}


class DistributedSamplerWrapper(_OrderSampler):
    """Distributes any deterministic sampler (pytorch#23430): each epoch the wrapped sampler's
    whole output (the same list on every rank: seed it identically) is cut among ranks by
    DistributedSampler's rule: rank r reads its positions r, r + W, ..., padded by wrap-around
    (or drop_last). ``set_epoch`` is forwarded to the wrapped sampler when it has one, including
    the epoch auto_epoch advances to. Holds one epoch of the wrapped sampler's output."""

    def __init__(self, sampler, num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 drop_last: bool = False, *, auto_epoch: bool = False,
                 check_agreement: bool = True, process_group=None) -> None:
        super().__init__(num_replicas, rank, drop_last, auto_epoch, check_agreement,
                         process_group)
        self.sampler = sampler
        self.seed = 0  # torch's attribute; the randomness is the wrapped sampler's own

    def _size(self) -> int:
        return len(self.sampler)

    def _order(self, epoch: int):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        order = _uint_array("sampler output", list(self.sampler))
        if len(order) != len(self.sampler):
            raise ValueError(f"the wrapped sampler yielded {len(order)} indices but its len() is "
                             f"{len(self.sampler)}")
        return _core.make_sequence_order(order)

    def _config(self) -> Dict[str, Any]:
        return {"sampler": type(self.sampler).__qualname__, "size": self._size(),
                "drop_last": self.drop_last}
