"""A torch DataLoader whose checkpoint counts what the training loop received (private; public
as distsampler.data.DataLoader and distsampler.torch.DataLoader).

The protocol is torchdata's StatefulDataLoader's: the sampler is the state; its position is
snapshotted as each batch's indices are dispatched (to the fetcher, or to a worker), and the
snapshot travels with the batch: when the loop receives batch k, the checkpoint becomes the
snapshot taken when batch k was dispatched. Prefetching, workers, pinning and persistent workers
then change nothing: ``state_dict()`` after the loop received k batches resumes at batch k.

For the package's samplers the snapshot is two integers (the pass and its count). A foreign
sampler with ``state_dict``/``load_state_dict`` is snapshotted through them; one without is
fast-forwarded on resume by drawing and discarding the batches already received (deterministic
samplers only).
"""
import weakref
from typing import Any, Dict, Optional

import torch.utils.data
from torch.utils.data import dataloader as _torch_loader

from ._passes import Pass, PassSampler

LOADER_STATE_VERSION = 1


class _Tracking:
    """Mixed into torch's two DataLoader iterators: snapshot at dispatch, deliver at receipt."""

    _distsampler_tracks = True  # read by _passes: this loader reports what the loop received

    def _setup_tracking(self, loader: "DataLoader") -> None:
        # A loader with persistent workers holds its iterator: a weak reference back avoids a
        # cycle, which would leave the workers running until a garbage collection shuts them
        # down (slowly, from whatever code it interrupts). Otherwise the iterator may outlive
        # the loader (iter(DataLoader(...))) and holds it.
        self._stateful_loader = weakref.proxy(loader) if loader._holds_iterator() else loader
        self._snapshots: Dict[Any, Any] = {}
        self._skip = loader._pending_skip
        loader._pending_skip = 0
        loader._begin_pass()

    def _dispatch_key(self):
        raise NotImplementedError

    def _next_index(self):
        while self._skip:  # a foreign sampler without state: fast-forward on resume
            super()._next_index()
            self._skip -= 1
        index = super()._next_index()
        self._snapshots[self._dispatch_key()] = self._stateful_loader._snapshot()
        return index

    def _received(self, key) -> None:
        self._stateful_loader._deliver(self._snapshots.pop(key, None))

    def _next_data(self):
        try:
            return self._next_data_tracked()
        except StopIteration:
            self._stateful_loader._pass_ended()
            raise


class _SingleProcessIter(_Tracking, _torch_loader._SingleProcessDataLoaderIter):
    def __init__(self, loader: "DataLoader") -> None:
        self._setup_tracking(loader)
        super().__init__(loader)

    def _dispatch_key(self):
        return None

    def _next_data_tracked(self):
        data = _torch_loader._SingleProcessDataLoaderIter._next_data(self)
        self._received(None)
        return data


class _MultiProcessingIter(_Tracking, _torch_loader._MultiProcessingDataLoaderIter):
    def __init__(self, loader: "DataLoader") -> None:
        self._setup_tracking(loader)
        super().__init__(loader)

    def _reset(self, loader, first_iter: bool = False) -> None:
        if not first_iter:  # persistent workers: a new pass on the same iterator
            self._setup_tracking(loader)
        super()._reset(loader, first_iter)

    def _dispatch_key(self):
        return self._send_idx  # the task number this batch is sent as

    def _process_data(self, data):
        self._received(self._rcvd_idx)  # the task number being returned
        return super()._process_data(data)

    def _next_data_tracked(self):
        return _torch_loader._MultiProcessingDataLoaderIter._next_data(self)


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` (a subclass, same arguments) with ``state_dict()`` and
    ``load_state_dict()`` that count what the training loop received, whatever ``num_workers``,
    ``prefetch_factor``, ``persistent_workers`` or ``pin_memory``: a checkpoint taken after the
    loop received k batches of a pass resumes at batch k, on any number of ranks.

    The state is the sampler's (``sampler=``, or ``batch_sampler=``: any sampler of this
    package, or one with ``state_dict``/``load_state_dict``), or the dataset's for
    distsampler.data.DistributedIterableDataset. Other samplers are resumed by drawing and
    discarding the batches already received, which is exact for deterministic samplers only.
    ``sampler.state_dict()`` of a package sampler read by this loader is exact too.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pending_skip = 0     # batches to discard at the next pass (stateless samplers)
        self._received = 0         # batches the loop received in the current pass
        self._foreign_state = None  # a foreign sampler's state at the last received batch
        iterable = getattr(self.dataset, "_distsampler_iterable", False)
        if iterable:
            self.dataset._check_loader(self)

    # ---- what the state is -----------------------------------------------------------------

    def _source(self):
        """The object whose state is the loader's: the batch sampler the user passed, else the
        sampler, else None (an iterable dataset)."""
        if self._dataset_kind == _torch_loader._DatasetKind.Iterable:
            return None
        user_batch_sampler = self.batch_sampler is not None and not (
            type(self.batch_sampler) is torch.utils.data.BatchSampler
            and self.batch_sampler.sampler is self.sampler)
        return self.batch_sampler if user_batch_sampler else self.sampler

    def _iterable_adapter(self):
        if getattr(self.dataset, "_distsampler_iterable", False):
            return self.dataset
        return None

    def _begin_pass(self) -> None:
        self._received = 0
        adapter = self._iterable_adapter()
        if adapter is not None:
            adapter._start_pass_for_loader()

    def _snapshot(self):
        source = self._source()
        if isinstance(source, PassSampler):
            live: Optional[Pass] = source._live
            if live is None:
                return None
            if not live.tracked:
                live.tracked, live.trained = True, 0
            return live, live.count
        if source is not None and hasattr(source, "state_dict"):
            return source.state_dict()
        return None

    def _deliver(self, snapshot) -> None:
        self._received += 1
        adapter = self._iterable_adapter()
        if adapter is not None:
            adapter._received_batches(self._received,
                                      1 if self.batch_size is None else self.batch_size)
        elif isinstance(snapshot, tuple):
            live, count = snapshot
            live.trained = count
        elif snapshot is not None:
            self._foreign_state = snapshot

    def _pass_ended(self) -> None:
        adapter = self._iterable_adapter()
        source = self._source()
        if adapter is not None:
            adapter._pass_ended()
        elif isinstance(source, PassSampler) and source._live is not None:
            source._live.trained = source._live.count
        self._received = 0
        self._foreign_state = None

    def _holds_iterator(self) -> bool:
        return self.persistent_workers and self.num_workers > 0

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        self.check_worker_number_rationality()
        return _MultiProcessingIter(self)

    # ---- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """``{"version", "sampler" or "dataset", "batches"}``: the sampler's (or the iterable
        dataset's) state as of the last batch the loop received, and how many batches of the
        current pass that is. The same on every rank for the package's samplers, so rank 0 can
        save it."""
        state: Dict[str, Any] = {"version": LOADER_STATE_VERSION, "batches": self._received}
        adapter, source = self._iterable_adapter(), self._source()
        if adapter is not None:
            state["dataset"] = adapter.state_dict()
        elif isinstance(source, PassSampler):
            state["sampler"] = source.state_dict()
        elif source is not None and hasattr(source, "state_dict"):
            state["sampler"] = (self._foreign_state if self._foreign_state is not None
                                else source.state_dict())
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict(): the next pass starts after the batches already received
        (for the package's samplers on any number of ranks). Raises ValueError for a state that
        does not fit this loader, changing nothing."""
        if not isinstance(state, dict) or state.get("version") != LOADER_STATE_VERSION:
            raise ValueError(f"state must be a DataLoader.state_dict() of version "
                             f"{LOADER_STATE_VERSION}, not {state!r:.200}")
        batches = state.get("batches")
        if type(batches) is not int or batches < 0:
            raise ValueError(f"state batches = {batches!r} is out of range; allowed: an int >= 0")
        adapter, source = self._iterable_adapter(), self._source()
        if adapter is not None:
            if "dataset" not in state:
                raise ValueError("state has no 'dataset' entry: it was not saved by a DataLoader "
                                 "over a DistributedIterableDataset")
            adapter.load_state_dict(state["dataset"])
        elif source is not None and hasattr(source, "load_state_dict"):
            if "sampler" not in state:
                raise ValueError("state has no 'sampler' entry: it was saved by a DataLoader "
                                 "whose sampler has no state")
            source.load_state_dict(state["sampler"])
        else:
            self._pending_skip = batches
        self._received = 0
        self._foreign_state = None
