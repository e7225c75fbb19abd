"""Loader-level pieces: a DataLoader whose checkpoint counts what the training loop received, and
an IterableDataset adapter that splits a rank's share again across DataLoader workers.

    from distsampler.data import DataLoader, DistributedIterableDataset

``DataLoader`` is ``torch.utils.data.DataLoader`` with ``state_dict()``/``load_state_dict()``
(torchdata's StatefulDataLoader protocol): with any ``num_workers``, ``prefetch_factor``,
``persistent_workers`` or ``pin_memory``, a checkpoint taken after the loop received k batches
resumes at batch k, on any number of ranks.

``DistributedIterableDataset`` serves a map-style dataset as an ``IterableDataset``: rank r reads
its share of one global order (distsampler.torch.DistributedSampler's), and DataLoader worker w
of K reads the share's batches w, w + K, ...; the DataLoader hands batches out round-robin from
its workers, so the loop receives the share's batches in order, each sample exactly once across
ranks and workers, and the loader's checkpoint is exact.
"""
from typing import Any, Dict, Iterator, Optional

import torch
from torch.utils.data import IterableDataset, get_worker_info

from . import _core
from ._loader import DataLoader
from ._passes import CheckpointMismatch, PlainShell, SeedOverflowError, Shell, check_uint64

__all__ = ["DataLoader", "DistributedIterableDataset", "CheckpointMismatch"]


class DistributedIterableDataset(PlainShell, IterableDataset):  # type: ignore[type-arg]
    """A map-style ``dataset`` as an IterableDataset for data-parallel training: this rank's
    share of the epoch's global order (the same order, padding and arguments as
    ``distsampler.torch.DistributedSampler(dataset, num_replicas, rank, shuffle, seed,
    drop_last, order=...)``), split across DataLoader workers by batches of ``batch_size``.

    Use it with ``distsampler.data.DataLoader(adapter, batch_size=batch_size, num_workers=K)``:
    that loader decides each pass's epoch (``set_epoch``, or ``auto_epoch`` advancing it) in the
    main process and hands it to the workers, persistent or not, and its ``state_dict()``
    resumes exactly. A plain torch DataLoader with workers cannot tell its workers a new epoch
    or report progress: call ``set_epoch`` before each epoch there; its checkpoints are not
    exact. ``batch_size`` must equal the DataLoader's (1 for ``batch_size=None``).

    Yields ``dataset[index]``; ``len()`` is the number of samples this rank reads in the pass.
    """

    _kind = "iterable"
    _seed_overflow = SeedOverflowError

    def __init__(self, dataset: Any, batch_size: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, *, order: str = "torch", auto_epoch: bool = False,
                 randperm: str = "auto", check_agreement: bool = True,
                 process_group: Any = None, feistel_version: int = 2) -> None:
        self.batch_size = check_uint64("batch_size", batch_size, 1)  # the DataLoader's
        self._init_plain(dataset, num_replicas, rank, seed, shuffle, drop_last, order, randperm,
                         feistel_version, auto_epoch, check_agreement, process_group)
        # The pass the main process decided, for the workers: epoch (two's complement), start,
        # and whether a distsampler DataLoader armed it. Shared memory reaches workers forked or
        # spawned, persistent or not.
        self._shared = torch.zeros(3, dtype=torch.int64).share_memory_()

    # ---- the loader protocol of an iterable dataset (main process): distsampler's DataLoader
    # checks the adapter, starts each pass here and reports the batches the loop received.

    def check_loader(self, loader: Any) -> None:
        expected = 1 if loader.batch_size is None else loader.batch_size
        if expected != self.batch_size:
            raise ValueError(
                f"DistributedIterableDataset batch_size = {self.batch_size} but the DataLoader's "
                f"batch_size = {loader.batch_size}: they must be equal (1 for batch_size=None) so "
                "that the workers' batches arrive in the share's order")

    def _publish(self, epoch: int, start: int, armed: bool) -> None:
        self._shared.copy_(torch.tensor([epoch - 2**64 if epoch >= 2**63 else epoch, start,
                                         int(armed)]))

    def progress_start(self) -> None:
        chunks = self._start_pass()
        self._core.receive(chunks.serial, 0)
        self._publish(chunks.epoch, chunks.start, True)

    def set_epoch(self, epoch: int) -> None:
        Shell.set_epoch(self, epoch)
        self._publish(self._core.epoch, self._core.resume_at, False)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        Shell.load_state_dict(self, state)
        self._publish(self._core.epoch, self._core.resume_at, False)

    # ---- iteration (a worker, or the main process) --------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        # In a worker, the pass the main process decided (or set_epoch did).
        epoch, start, armed = (int(value) for value in self._shared.tolist())
        epoch, own, info = epoch % 2**64, None, get_worker_info()
        if info is None and armed:  # a distsampler DataLoader with num_workers=0 started it
            self._shared[2] = 0
        elif info is None:  # used alone in the main process: a pass of its own, counted as read
            chunks = self._start_pass()
            self._core.receive(chunks.serial, 0)
            epoch, start, own = chunks.epoch, chunks.start, chunks.serial
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        # torchdata's StatefulDataLoader keeps each worker's iterator state: a worker of the
        # same world size, rank and num_workers resumes where it stood (bind_policy.cc).
        where = {"num_replicas": self.num_replicas, "rank": self.rank, "worker": worker,
                 "num_workers": workers, "config": self._plain.config}
        return _core.WorkerShare(self._plain.sampler, self.batch_size, worker, workers, epoch,
                                 start, self.dataset, where, self._core, own)

    def state_dict(self) -> Optional[Dict[str, Any]]:  # type: ignore[override]
        """The adapter's state (the shell's state_dict) in the main process. In a DataLoader
        worker None: there the iterator holds the worker's state (torchdata's
        StatefulDataLoader saves each worker's iterator state)."""
        if get_worker_info() is not None:
            return None
        return Shell.state_dict(self)
