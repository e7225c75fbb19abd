"""What every policy sampler shares (private): integer checks, the identity order and
partition.h's positions over it, and the base class that resolves the world and starts the
passes (_passes.py). distsampler.policies and its order samplers import from here."""
import numpy as np
import torch.utils.data.distributed
from torch.utils.data import Sampler

from . import _core
from ._passes import PassSampler, check_uint64, randperm_variant, resolve_world

_CHUNK = 1 << 16  # indices computed per call into C++ (512 KiB of uint64)
_BATCH_CHUNK = 256  # batches built per Python step
_TorchDistributedSampler = torch.utils.data.distributed.DistributedSampler


def _uint(name: str, value, minimum: int = 0) -> int:
    """An integer parameter for a uint64 field: integers only (floats are TypeErrors, as
    operator.index makes them; a bool is a ValueError, as PyTorch's BatchSampler and
    WeightedRandomSampler reject it), values outside [minimum, 2^64 - 1] a ValueError naming
    `name` and the allowed range."""
    return check_uint64(name, value, minimum)


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


def _digest(array: np.ndarray) -> int:
    """CRC-32 of an array's bytes: a checkpoint's stand-in for weights or lengths."""
    return _core.crc32(np.ascontiguousarray(array).tobytes())


_world = resolve_world


def _randperm(randperm: str) -> "_core.RandpermVariant":
    return getattr(_core.RandpermVariant, randperm_variant(randperm))


def _identity(size: int) -> "_core.EpochOrder":
    """The identity order of [0, size) (O(1)): views over it have the counts and the positions
    of any order of that size, without building a shuffled one."""
    return _core.make_epoch_order(size, 0, False, "feistel", _core.RandpermVariant.current, 0)


class _Positions:
    """partition.h's rule over `size` global positions: which positions rank r reads in a pass
    starting at global position `start` (wrapped around without drop_last)."""

    def __init__(self, size: int, num_replicas: int, rank: int, drop_last: bool) -> None:
        self._identity = _identity(size)
        self._args = (num_replicas, rank, drop_last)
        self.size = size

    def view(self, start: int) -> "_core.RankView":
        num_replicas, rank, drop_last = self._args
        return _core.rank_view(self._identity, num_replicas, rank, drop_last, False, 0, start)

    def count(self, start: int) -> int:
        return len(self.view(start))

    def __getstate__(self):  # the C++ identity order does not pickle; it is rebuilt
        return self.size, self._args

    def __setstate__(self, state) -> None:
        self.__init__(state[0], *state[1])


class _Base(PassSampler, Sampler):
    """World, epochs and checkpoint agreement for every sampler here."""

    def _init_world(self, num_replicas, rank, auto_epoch, check_agreement, process_group):
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self._init_passes(auto_epoch, check_agreement, process_group)
