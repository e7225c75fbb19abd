"""DataLoader workers that end with the process that started them (private; used by _loader.py).

PyTorch's worker reads ``os.getppid()`` only after its set-up (unpickling the dataset under spawn,
``worker_init_fn``): a parent killed before that leaves it blocked forever in ``index_queue.get``.
Here each worker, first thing, runs launch/parent.h's ``end_with_process``: the kernel's death
signal (``prctl(PR_SET_PDEATHSIG)``) where the parent thread lives as long as the training process,
else a thread waiting on a pidfd of it, and an exit if it is already gone. The hook is the
worker's ``Process``: ``run()`` under fork; under spawn and forkserver its pickle unpickles through
``_start_worker`` before the dataset, collate_fn or worker_init_fn. This module imports no torch,
so a spawned worker runs the guard before it imports torch.
"""
import functools
import multiprocessing
import os
import sys
import threading
from typing import Any, Tuple

from . import _core

# Where the guard runs: it needs Linux's prctl, pidfd and /proc. Elsewhere the workers are
# PyTorch's.
GUARDS_WORKERS = sys.platform.startswith("linux")


def guard_worker(creator: int, method: str, main_thread: bool) -> None:
    """In a worker process that `creator` started by `method` from its main thread or not: end
    the worker when `creator` ends, from now on, and now if it already has. The death signal
    follows the parent thread, and a forkserver worker's parent is the server (which outlives
    the training process): those get the pidfd thread."""
    _core.end_with_process(creator, method != "forkserver" and main_thread)


def _start_worker(guard: Tuple[int, str, bool], process_class: Any) -> Any:
    """Unpickling a guarded worker Process (spawn, forkserver): the guard, then the plain
    Process that the rest of the pickle fills in."""
    guard_worker(*guard)
    return process_class.__new__(process_class)


class _GuardedProcess:
    """Mixed into the context's Process class: guard_worker runs first in the worker."""

    _start_method: Any  # the Process class's (a context's)
    _distsampler_base: type  # that class (_guarded_class)

    def start(self) -> None:
        method = self._start_method or multiprocessing.get_start_method()
        main = threading.current_thread() is threading.main_thread()
        self._distsampler_guard = (os.getpid(), method, main)
        super().start()  # type: ignore[misc]  # the Process class this is mixed into

    def run(self) -> None:
        guard = self.__dict__.pop("_distsampler_guard", None)
        if guard is not None:  # fork: nothing was pickled
            guard_worker(*guard)
        super().run()  # type: ignore[misc]

    def __reduce__(self) -> Tuple[Any, ...]:
        state = dict(self.__dict__)
        guard = state.pop("_distsampler_guard")
        return _start_worker, (guard, self._distsampler_base), state


@functools.lru_cache(maxsize=None)
def _guarded_class(process_class: type) -> type:
    return type(process_class.__name__, (_GuardedProcess, process_class),
                {"_distsampler_base": process_class})


class GuardedContext:
    """A multiprocessing context (or the torch.multiprocessing module) whose Process is
    guarded; everything else is the context's."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def Process(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (multiprocessing's name)
        return _guarded_class(self._context.Process)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_context"], name)
