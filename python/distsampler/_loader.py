"""A torch DataLoader whose checkpoint counts what the training loop received (private; public
as distsampler.data.DataLoader and distsampler.torch.DataLoader).

torchdata's StatefulDataLoader protocol: the sampler's state is snapshotted as each batch's
indices are dispatched (to the fetcher, or to a worker), and when the loop receives batch k the
checkpoint becomes batch k's snapshot, so prefetching, workers and pinning change nothing. Beyond
torch's public surface it reads ``_index_sampler`` (the same in torch 1.13 to 2.13), returned
wrapped so that each draw is a dispatch; the iterator ``__iter__`` returns is wrapped so that each
batch is a receipt (``in_order=True`` only: the k-th receipt is the k-th dispatch). Nothing
refers back to the loader, so a loader held only by its own iterator is freed normally. The
bookkeeping is C++ (receipts.h, ``_core.LoaderTracker``); a foreign sampler without
``state_dict`` is fast-forwarded on resume (exact for deterministic samplers only).
"""
from typing import TYPE_CHECKING, Any, Dict, TypeVar

import torch.multiprocessing
import torch.utils.data
from torch.utils.data import dataloader as _torch_loader

from . import _core
from ._workers import GUARDS_WORKERS, GuardedContext

_T_co = TypeVar("_T_co", covariant=True)
# torch's property, whose getter and setter DataLoader.multiprocessing_context extends.
_TORCH_CONTEXT: Any = torch.utils.data.DataLoader.multiprocessing_context


class DataLoader(torch.utils.data.DataLoader[_T_co]):
    """``torch.utils.data.DataLoader`` (a subclass, same arguments) with ``state_dict()`` and
    ``load_state_dict()`` that count what the training loop received, whatever ``num_workers``,
    ``prefetch_factor``, ``persistent_workers`` or ``pin_memory``: a checkpoint taken after the
    loop received k batches of a pass resumes at batch k, on any number of ranks.

    The state is the sampler's (``sampler=``, or ``batch_sampler=``: any sampler of this
    package, or one with ``state_dict``/``load_state_dict``), or the dataset's for
    distsampler.data.DistributedIterableDataset. Other samplers, and other IterableDatasets,
    are resumed by reading and discarding the batches already received, which is exact for
    deterministic ones only.
    ``sampler.state_dict()`` of a package sampler read by this loader is exact too.
    ``in_order=False`` (torch >= 2.6) with workers is refused: batches would reach the loop in
    another order than their indices were drawn, and no checkpoint could name what it received.
    On Linux its worker processes end when the process that started them dies, also during their
    start-up (where PyTorch's would wait forever): see _workers.py.
    """

    if not TYPE_CHECKING:  # a type checker takes torch's own signature (that torch's arguments)
        def __init__(self, *args, **kwargs) -> None:
            self._init(*args, **kwargs)

    def _init(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.num_workers > 0 and getattr(self, "in_order", True) is False:
            raise ValueError("in_order = False is not supported by distsampler.data.DataLoader: "
                             "batches out of order cannot be matched to the positions a "
                             "checkpoint records; allowed: in_order=True")
        adapter = self.dataset if hasattr(self.dataset, "progress_start") else None
        if adapter is not None:
            adapter.check_loader(self)
        self._tracker = _core.LoaderTracker(self._source(), adapter,
                                            1 if self.batch_size is None else self.batch_size)

    def _source(self) -> Any:
        """The object whose state is the loader's: the batch sampler the user passed, else the
        sampler, else None (an iterable dataset)."""
        if self._dataset_kind == _torch_loader._DatasetKind.Iterable:
            return None
        user_batch_sampler = self.batch_sampler is not None and not (
            type(self.batch_sampler) is torch.utils.data.BatchSampler
            and self.batch_sampler.sampler is self.sampler)
        return self.batch_sampler if user_batch_sampler else self.sampler

    @property
    def _index_sampler(self) -> Any:
        index_sampler = super()._index_sampler
        tracker = self.__dict__.get("_tracker")
        return index_sampler if tracker is None else tracker.dispatching(index_sampler)

    @property
    def multiprocessing_context(self) -> Any:
        # torch's multi-process iterator reads it once, in its constructor, to start the workers:
        # there (only) it gets the context with guarded worker processes.
        context = _TORCH_CONTEXT.fget(self)
        if not (GUARDS_WORKERS and self.__dict__.get("_starting_workers")):
            return context
        return GuardedContext(torch.multiprocessing if context is None else context)

    @multiprocessing_context.setter
    def multiprocessing_context(self, context: Any) -> None:
        _TORCH_CONTEXT.fset(self, context)

    def _get_iterator(self) -> Any:
        # torch's multi-process iterator calls iter() on the index sampler in its constructor and
        # again in its first _reset: one pass.
        self._tracker.set_opening(True)
        self.__dict__["_starting_workers"] = True
        try:
            return super()._get_iterator()
        finally:
            self._tracker.set_opening(False)
            self.__dict__["_starting_workers"] = False

    def __iter__(self) -> Any:  # torch's iterator, each batch a receipt
        return self._tracker.receiving(super().__iter__())

    # ---- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """``{"version", "sampler" or "dataset", "batches"}``: the sampler's (or the iterable
        dataset's) state as of the last batch the loop received, and how many batches of the
        current pass that is (counting those before a resume). The same on every rank for the
        package's samplers, so rank 0 can save it. Right after load_state_dict it is the loaded
        state."""
        state: Dict[str, Any] = self._tracker.state_dict()
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict(): the next pass starts after the batches already received
        (for the package's samplers on any number of ranks). Raises ValueError for a state that
        does not fit this loader, changing nothing."""
        self._tracker.load_state_dict(state)  # state_dict.h's format
