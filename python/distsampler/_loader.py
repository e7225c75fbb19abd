"""A torch DataLoader whose checkpoint counts what the training loop received (private; public
as distsampler.data.DataLoader and distsampler.torch.DataLoader).

The protocol is torchdata's StatefulDataLoader's: the sampler is the state; it is snapshotted as
each batch's indices are dispatched (to the fetcher, or to a worker), and when the loop receives
batch k the checkpoint becomes the snapshot taken when batch k was dispatched. Prefetching,
workers, pinning and persistent workers then change nothing: ``state_dict()`` after the loop
received k batches resumes at batch k.

It rests on torch's public DataLoader surface plus one private property that every supported
torch (1.13 to 2.13) has with the same meaning: ``_index_sampler``, which torch's iterators read
when they are made or reset and then draw each batch's indices from. This loader returns it
wrapped, so that each draw is a dispatch, and wraps the iterator ``__iter__`` returns, so that
each batch it yields is a receipt. Batches arrive in dispatch order (``in_order=True``, the only
order accepted), so the k-th receipt is the k-th dispatch. Nothing here refers back to the
loader, so a loader held only by its own iterator is freed normally.

The package's samplers speak the loader protocol (_passes.py): a mark as each batch is
dispatched (``progress_mark``), reported back at receipt (``progress_received``); a foreign
sampler with ``state_dict`` /
``load_state_dict`` is snapshotted through them; one without is fast-forwarded on resume by
drawing and discarding the batches already received (exact for deterministic samplers only).
"""
import collections
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterator, TypeVar

import torch.multiprocessing
import torch.utils.data
from torch.utils.data import dataloader as _torch_loader

from . import _core
from ._workers import GUARDS_WORKERS, GuardedContext

_T_co = TypeVar("_T_co", covariant=True)
# torch's property, whose getter and setter DataLoader.multiprocessing_context extends.
_TORCH_CONTEXT: Any = torch.utils.data.DataLoader.multiprocessing_context


def _speaks_protocol(source: Any) -> bool:
    """Whether `source` reports its progress as the package's samplers do (_passes.py)."""
    return hasattr(source, "progress_mark") and hasattr(source, "progress_received")


class _Tracker:
    """One loader's record of its passes: the snapshots of batches dispatched and not yet
    received (oldest first), the batches received, and what a resume asked for. ``source`` is
    the object whose state is the loader's (None for an iterable dataset), ``adapter`` the
    DistributedIterableDataset served, if any."""

    def __init__(self, source: Any, adapter: Any, per_batch: int) -> None:
        self.source, self.adapter, self.per_batch = source, adapter, per_batch
        # An IterableDataset of its own: its data come from its iterators, not from the index
        # sampler, so a resume skips batches as they are received rather than as dispatched.
        self.skips_received = source is None and adapter is None
        self.snapshots: Deque[Any] = collections.deque()
        self.received = 0       # batches the loop received in this pass, after `base`
        self.base = 0           # batches of this pass received before a resume
        self.resumed = 0        # the loaded state's batches, for the next pass's `base`
        self.skip = 0           # batches the next pass draws and discards (stateless source)
        self.skipping = 0       # ... of which this pass has yet to draw
        self.foreign_state: Any = None  # a foreign sampler's state at the last received batch
        self.opening = False    # inside _get_iterator, whose iterator calls iter() twice
        self.opened = False     # ... and the first of those calls began the pass

    @property
    def batches(self) -> int:
        return self.base + self.received

    def begin_pass(self) -> None:
        """A torch iterator (re)started drawing indices: a new pass."""
        if self.opening:
            if self.opened:
                return
            self.opened = True
        self.snapshots.clear()
        self.base, self.resumed, self.received = self.resumed, 0, 0
        self.skipping, self.skip = self.skip, 0
        if self.adapter is not None:
            self.adapter.progress_start()

    def dispatched(self) -> None:
        """A batch's indices were just drawn: snapshot the source's state."""
        source, snapshot = self.source, None
        if _speaks_protocol(source):
            snapshot = ("mark", source.progress_mark())
        elif source is not None and hasattr(source, "state_dict"):
            snapshot = source.state_dict()
        self.snapshots.append(snapshot)

    def receive(self) -> None:
        """The loop received the oldest batch dispatched and not yet received."""
        snapshot = self.snapshots.popleft() if self.snapshots else None
        self.received += 1
        if self.adapter is not None:
            self.adapter.progress_received_batches(self.received, self.per_batch)
        elif isinstance(snapshot, tuple):
            self.source.progress_received(snapshot[1])
        elif snapshot is not None:
            self.foreign_state = snapshot

    def end_pass(self) -> None:
        """The loop received the pass's last batch (the iterator raised StopIteration)."""
        if self.adapter is not None:
            self.adapter.progress_finished()
        elif _speaks_protocol(self.source):
            self.source.progress_finished()
        self.snapshots.clear()
        self.base = self.received = 0
        self.foreign_state = None


class _DispatchingSampler:
    """The index sampler (a batch sampler, or the sampler with ``batch_size=None``) as torch's
    iterators see it: the same indices, and each draw recorded as a dispatch."""

    def __init__(self, index_sampler: Any, tracker: _Tracker) -> None:
        self._index_sampler, self._tracker = index_sampler, tracker

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __iter__(self) -> "_Dispatching":
        self._tracker.begin_pass()
        return _Dispatching(iter(self._index_sampler), self._tracker)


class _Dispatching:
    __slots__ = ("_indices", "_tracker")

    def __init__(self, indices: Iterator[Any], tracker: _Tracker) -> None:
        self._indices, self._tracker = indices, tracker

    def __iter__(self) -> "_Dispatching":
        return self

    def __next__(self) -> Any:
        tracker = self._tracker
        while tracker.skipping and not tracker.skips_received:  # a resumed stateless sampler:
            tracker.skipping -= 1                                  # draw the batches received
            next(self._indices)
        index = next(self._indices)
        tracker.dispatched()
        return index


class _Receiving:
    """torch's DataLoader iterator, each batch it yields recorded as received. Other attributes
    are the wrapped iterator's."""

    def __init__(self, iterator: Any, tracker: _Tracker) -> None:
        self._iterator, self._tracker = iterator, tracker

    def __iter__(self) -> "_Receiving":
        return self

    def __next__(self) -> Any:
        tracker = self._tracker
        try:
            while tracker.skipping and tracker.skips_received:  # a resumed IterableDataset
                tracker.skipping -= 1                           # without state: read and drop
                tracker.snapshots.clear()                       # the batches received
                next(self._iterator)
            batch = next(self._iterator)
        except StopIteration:
            tracker.end_pass()
            raise
        tracker.receive()
        return batch

    def __len__(self) -> int:
        return len(self._iterator)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_iterator"], name)


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
        self._tracker = _Tracker(self._source(), adapter,
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
        return index_sampler if tracker is None else _DispatchingSampler(index_sampler, tracker)

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
        tracker = self._tracker
        tracker.opening, tracker.opened = True, False
        self.__dict__["_starting_workers"] = True
        try:
            return super()._get_iterator()
        finally:
            tracker.opening = False
            self.__dict__["_starting_workers"] = False

    def __iter__(self) -> Any:  # torch's iterator, each batch a receipt (_Receiving)
        return _Receiving(super().__iter__(), self._tracker)

    # ---- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """``{"version", "sampler" or "dataset", "batches"}``: the sampler's (or the iterable
        dataset's) state as of the last batch the loop received, and how many batches of the
        current pass that is (counting those before a resume). The same on every rank for the
        package's samplers, so rank 0 can save it. Right after load_state_dict it is the loaded
        state."""
        tracker = self._tracker
        state: Dict[str, Any] = _core.loader_state_dict(tracker.batches)
        source = tracker.source
        if tracker.adapter is not None:
            state["dataset"] = tracker.adapter.state_dict()
        elif _speaks_protocol(source):
            state["sampler"] = source.state_dict()
        elif source is not None and hasattr(source, "state_dict"):
            state["sampler"] = (tracker.foreign_state if tracker.foreign_state is not None
                                else source.state_dict())
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict(): the next pass starts after the batches already received
        (for the package's samplers on any number of ranks). Raises ValueError for a state that
        does not fit this loader, changing nothing."""
        tracker = self._tracker
        source: Any = tracker.source
        stateful = source is not None and hasattr(source, "load_state_dict")
        entry = "dataset" if tracker.adapter is not None else "sampler" if stateful else ""
        batches = _core.parse_loader_state(state, entry)  # state_dict.h's format
        if tracker.adapter is not None:
            tracker.adapter.load_state_dict(state["dataset"])
        elif stateful:
            source.load_state_dict(state["sampler"])
        tracker.snapshots.clear()
        tracker.received, tracker.base, tracker.resumed, tracker.skipping = 0, batches, batches, 0
        tracker.skip = 0 if stateful or tracker.adapter is not None else batches
        tracker.foreign_state = state.get("sampler") if stateful and not _speaks_protocol(
            source) else None
