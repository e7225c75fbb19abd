"""DataLoader workers that end with the process that started them (private; used by _loader.py).

PyTorch's worker watches its parent through ``ManagerWatchdog``, which reads ``os.getppid()``
only after the worker's set-up (unpickling the dataset under spawn, ``worker_init_fn``). A parent
killed before that leaves the worker watching init (pid 1, or a subreaper), blocked forever in
``index_queue.get``. Here each worker process, first thing, asks the kernel for SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux) and then exits if the parent is already gone:
one of the two catches every death, whatever the moment.

The hook is the worker's ``Process`` object. Under fork it is ``run()``, the first code of ours
the child runs. Under spawn and forkserver the object is pickled, and it unpickles through
``_start_worker`` below before anything else of it (the dataset, collate_fn, worker_init_fn):
only the interpreter's start and the main module's import come earlier. This module imports no
torch, so a spawned worker runs the guard before it imports torch.

The death signal follows the parent *thread*, and under forkserver the parent is the server,
which outlives the training process as long as any of its children runs (each holds the server's
"alive" pipe). So the signal is set only for fork and spawn workers started from the main
thread; the others (forkserver, or an iterator made on another thread, which may end before its
persistent workers) get a daemon thread that waits on a pidfd of the training process and exits
the worker when it ends.
"""
import ctypes
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from typing import Any, Dict, Tuple

# Where the guard runs: it needs Linux's prctl, pidfd and /proc (on Windows os.kill(pid, 0) would
# even terminate `pid`). Elsewhere the workers are PyTorch's.
GUARDS_WORKERS = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_SECONDS = 0.5    # the watcher's interval where there is no pidfd_open (Linux < 5.3)


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):  # no procfs
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


def _set_death_signal() -> bool:
    """SIGKILL to this process when its parent thread ends; whether the kernel took it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result: int = libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL),
                                 ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        return result == 0
    except (OSError, AttributeError):
        return False


def _watch(creator: int) -> None:
    """Exit now if `creator` has ended, else as soon as it ends (a daemon thread)."""
    try:
        pidfd = os.pidfd_open(creator)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd: poll
        pidfd = None
    if pidfd is None and not _alive(creator):
        os._exit(1)

    def wait() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])  # readable once the process has ended
        else:
            while _alive(creator):
                time.sleep(_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=wait, name="distsampler-parent-watch", daemon=True).start()


def guard_worker(creator: int, method: str, main_thread: bool) -> None:
    """In a worker process that `creator` started by `method` from its main thread or not: end
    the worker when `creator` ends, from now on, and now if it already has."""
    if method != "forkserver" and main_thread and _set_death_signal():
        if os.getppid() != creator:  # the parent died before the signal was set
            os._exit(1)
    else:
        _watch(creator)


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


_classes: Dict[type, type] = {}


def _guarded_class(process_class: type) -> type:
    guarded = _classes.get(process_class)
    if guarded is None:
        guarded = _classes[process_class] = type(
            process_class.__name__, (_GuardedProcess, process_class),
            {"_distsampler_base": process_class})
    return guarded


class GuardedContext:
    """A multiprocessing context (or the torch.multiprocessing module) whose Process is
    guarded; everything else is the context's."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def Process(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (multiprocessing's name)
        return _guarded_class(self._context.Process)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_context"], name)
