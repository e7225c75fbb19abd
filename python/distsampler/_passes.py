"""The pass, epoch and progress logic every sampler of the package shares (private).

A *pass* is one iteration over a sampler. Its epoch and its start position are decided when it
starts producing (the first ``next()``), never when ``iter()`` is called: a DataLoader with
workers calls ``iter()`` on its sampler more than once per epoch, and only the iterator it reads
from counts.

Every sampler here reads global positions ``start + rank + j * num_replicas`` of an epoch's
stream (partition.h's rule), so its checkpoint is (epoch, consumed): the job read global
positions [0, consumed) of that epoch, all ranks together. The same state resumes on any number
of ranks.

The protocol with loaders is torchdata's ``Stateful``: ``state_dict()`` describes what the
sampler has *handed out*, so a loader that snapshots it as each batch's indices are dispatched
(torchdata's StatefulDataLoader, distsampler.data.DataLoader) and keeps the snapshot of the last
batch the loop received checkpoints exactly, whatever its workers fetch ahead.
distsampler.data.DataLoader also reports receipts back (``Pass.receive``), so that the sampler's
own ``state_dict()`` counts what the loop received while that loader reads it.
"""
import itertools
import json
import operator
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch.distributed as dist

from . import _core

EPOCH_MAX = 2**64 - 1
# The format of the state of the policy samplers and the iterable adapter (distsampler.torch's
# DistributedSampler keeps its own, the C++ core's, see STATE_VERSION there).
GENERIC_STATE_VERSION = 1


class SeedOverflowError(RuntimeError, ValueError):
    """seed + epoch outside [-2^63, 2^64 - 1], raised when a pass starts. PyTorch raises it as a
    RuntimeError in 1.13 and a ValueError in 2.x ("Overflow when unpacking long long"): this is
    both, so code written for either catches it."""


class CheckpointMismatch(ValueError):
    """Raised on every rank when the ranks loaded checkpoints that differ (or one rank could not
    load its checkpoint)."""


def check_uint64(name: str, value, minimum: int = 0) -> int:
    """An integer in [minimum, 2^64 - 1] (what the C++ core's uint64 fields take), as a ValueError
    naming `name` otherwise: a bool is not an integer here (PyTorch's samplers refuse it), a
    float is operator.index's TypeError."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise ValueError(f"{name} = {value!r} is a bool; allowed: an integer >= {minimum}")
    value = operator.index(value)
    if not minimum <= value <= EPOCH_MAX:
        raise ValueError(f"{name} = {value} is out of range; allowed: {minimum} <= {name} "
                         "<= 2^64 - 1")
    return value


def resolve_world(num_replicas, rank) -> Tuple[int, int]:
    """num_replicas and rank, from the process group when omitted (PyTorch's rule and errors),
    num_replicas within the core's range."""
    if num_replicas is None or rank is None:
        if not dist.is_available():
            raise RuntimeError("Requires distributed package to be available")
        num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        rank = dist.get_rank() if rank is None else rank
    num_replicas, rank = operator.index(num_replicas), operator.index(rank)
    if rank >= num_replicas or rank < 0:
        raise ValueError(f"Invalid rank {rank}, rank should be in the interval"
                         f" [0, {num_replicas - 1}]")
    return check_uint64("num_replicas", num_replicas, 1), rank


def check_order(order) -> str:
    if order not in ("torch", "feistel"):
        raise ValueError(f"order = {order!r} is not an order; allowed: 'torch', 'feistel'")
    return order


def feistel_version_entry(version: int) -> Dict[str, Any]:
    """A feistel_version (a fingerprint's, normalized: 1 where the order is not a shuffled
    feistel one) as a config entry, present only where it differs from its value when absent
    (the fingerprint table's, version 1): states saved before version 2 existed lack it, and they
    stay loadable wherever they meant version 1 (or the torch order), while loading one into a
    version-2 sampler names the difference."""
    absent = _core.FINGERPRINT_ABSENT["feistel_version"]
    return {} if version == absent else {"feistel_version": version}


def check_feistel_version(version) -> int:
    if type(version) is not int or version not in (1, 2):
        raise ValueError(f"feistel_version = {version!r} is not a version; allowed: 1, 2")
    return version


def checked_epoch(epoch) -> int:
    epoch = operator.index(epoch)
    if not 0 <= epoch <= EPOCH_MAX:
        raise ValueError(f"epoch = {epoch} is out of range; allowed: 0 <= epoch <= 2^64 - 1")
    return epoch


class Pass:
    """What the live pass handed out, as Python sees it: its epoch, start and the items this rank
    reads in it (``total``), as pass.h's cursor began it. ``count`` is what was handed out (the
    chunks before the current one, plus what was taken from the current list iterator, which
    knows how much of it is left); ``received`` is what a distsampler DataLoader reported the
    loop received, once it reports (``tracked``). ``taken`` goes to the cursor, which owns the
    rules (the consumed count, whether the pass finished)."""

    __slots__ = ("epoch", "start", "total", "_before", "_chunk", "_chunk_size", "tracked",
                 "received")

    def __init__(self, epoch: int, start: int, total: int) -> None:
        self.epoch, self.start, self.total = epoch, start, total
        self._before = 0
        self._chunk: Iterator[Any] = iter(())
        self._chunk_size = 0
        self.tracked = False  # a distsampler DataLoader reports what the loop received
        self.received = 0     # ... namely this many items

    @property
    def count(self) -> int:
        return self._before + self._chunk_size - operator.length_hint(self._chunk)

    @property
    def taken(self) -> int:
        return self.received if self.tracked else self.count

    def receive(self, count: int) -> None:
        """A distsampler DataLoader: the loop received the items handed out up to `count`."""
        self.tracked, self.received = True, count

    def next_chunk(self, items) -> Iterator[Any]:
        self._before += self._chunk_size
        self._chunk, self._chunk_size = iter(items), len(items)
        return self._chunk


def describe_by_rank(per_rank: List[Dict[str, Any]]) -> str:
    """'' when every rank's dict is the same, else one clause per differing key:
    ``epoch = 3 on ranks 0, 2; 4 on rank 1``."""
    clauses = []
    for key in sorted({key for values in per_rank for key in values}):
        groups: Dict[str, List[int]] = {}
        for rank, values in enumerate(per_rank):
            groups.setdefault(repr(values.get(key)), []).append(rank)
        if len(groups) > 1:
            parts = [f"{value} on rank{'s' if len(ranks) > 1 else ''} "
                     f"{', '.join(map(str, ranks))}" for value, ranks in groups.items()]
            clauses.append(f"{key} = " + "; ".join(parts))
    return "; ".join(clauses)


def spans_group(num_replicas: int, enabled: bool, group) -> bool:
    """Whether a collective over `group` reaches exactly the sampler's ranks (one built for
    fewer replicas may be used by some ranks only, and a collective would wait forever)."""
    return (enabled and dist.is_available() and dist.is_initialized()
            and dist.get_world_size(group) == num_replicas)


def gather_in_step(call: str, payload: Any, group, mismatch) -> List[Any]:
    """Collective: every rank's payload, gathered by `call` on every rank. A rank in another of
    the package's collectives (a rank that skipped load_state_dict, say) makes every rank raise
    `mismatch` naming the calls and ranks, rather than read the other collective's payload."""
    gathered: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, {"distsampler_call": call, "payload": payload}, group=group)
    calls = [theirs.get("distsampler_call") if isinstance(theirs, dict) else None
             for theirs in gathered]
    if any(theirs != call for theirs in calls):
        where = describe_by_rank([{"call": theirs or "another collective"} for theirs in calls])
        raise mismatch(f"the ranks are in different collectives ({where}): every rank must call "
                       f"{call} (and start its passes) in the same order")
    return [theirs["payload"] for theirs in gathered]


def agree_on_checkpoint(summary: Dict[str, Any], error: Optional[Exception], group) -> None:
    """Collective: every rank gathers every rank's (configuration, epoch, consumed) of the
    checkpoint it loads, or its error, and every rank raises CheckpointMismatch when they differ
    or any rank failed, naming the ranks."""
    mine = {"error": None if error is None else f"{type(error).__name__}: {error}", **summary}
    gathered = gather_in_step("load_state_dict", mine, group, CheckpointMismatch)
    failed = [(rank, theirs["error"]) for rank, theirs in enumerate(gathered) if theirs["error"]]
    if failed:
        raise CheckpointMismatch("the checkpoint could not be loaded on every rank, refusing to "
                                 "resume: " + "; ".join(f"rank {rank}: {message}"
                                                        for rank, message in failed))
    message = describe_by_rank([{k: v for k, v in theirs.items() if k != "error"}
                                for theirs in gathered])
    if message:
        raise CheckpointMismatch("the ranks loaded different checkpoints, refusing to resume: "
                                 + message)


def _checksum(fields: Dict[str, Any]) -> int:
    return _core.crc32(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())


class PassSampler:
    """The mixin: set_epoch, auto_epoch, passes decided at their first next(), progress, len(),
    state_dict and load_state_dict. A subclass sets ``num_replicas`` and ``rank``, calls
    ``_init_passes`` and provides:

    * ``_remaining(start)``: items this rank reads in a pass starting at global position start;
    * ``_chunks(epoch, start)``: the pass's items as an iterable of lists, built eagerly enough
      to raise at once when the epoch cannot be read;
    * ``_config()``: the configuration a checkpoint must match (JSON values);
    * ``_dataset_size()``: ``(len(dataset), size)`` to compare at each pass start, or None.
    """

    def _init_passes(self, auto_epoch: bool, check_agreement: bool = True,
                     process_group=None) -> None:
        self._cursor = _core.PassCursor(bool(auto_epoch))  # the rules (pass.h)
        self._live: Optional[Pass] = None  # the latest pass that started, as Python counts it
        self._check_agreement = bool(check_agreement)
        self._process_group = process_group

    auto_epoch = property(lambda self: self._cursor.auto_epoch)

    @property
    def epoch(self) -> int:
        """The epoch of the latest (or, before any, the next) pass. Assigning it is set_epoch."""
        return self._cursor.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.set_epoch(value)

    def _cursor_now(self):
        """The cursor, told how much of the live pass was taken."""
        if self._live is not None:
            self._cursor.set_taken(self._live.taken)
        return self._cursor

    def set_epoch(self, epoch: int) -> None:
        """Makes the next pass read `epoch`, always (auto_epoch never overrides it). Setting the
        epoch a loaded state is in keeps the state's position; setting the epoch of the pass in
        progress leaves its checkpoint where the pass stands."""
        self._cursor_now().set_epoch(checked_epoch(epoch))

    def __iter__(self):
        if self._cursor.skip_finished():
            # The loaded finished pass has nothing left; the next iter() reads the epoch set
            # before the load, from its start (pass.h's load()).
            return iter(())
        # chain asks the generator for its first chunk at the first next(): that is when the
        # pass starts. Later next() calls run in C, one Python step per chunk.
        return itertools.chain.from_iterable(self._run_pass())

    def _run_pass(self):
        progress, chunks = self._start_pass()
        for items in chunks:
            yield progress.next_chunk(items)

    def _start_pass(self) -> Tuple[Pass, Any]:
        """Decides the pass's epoch and start, builds its chunks (which raises, changing nothing,
        when the epoch cannot be read), then makes it the live pass."""
        sizes = self._dataset_size()
        if sizes is not None and sizes[0] != sizes[1]:
            raise ValueError(
                f"len(dataset) = {sizes[0]} but this {type(self).__name__} was built for "
                f"{sizes[1]} samples: the dataset changed size after the sampler was built; "
                "build a new sampler for the new dataset")
        self._before_first_pass()
        plan = self._cursor.plan(self._shuffled())
        chunks = self._chunks(plan.epoch, plan.start)
        live = Pass(plan.epoch, plan.start, self._remaining(plan.start))
        notice = self._cursor.begin(plan, live.total, self.num_replicas)
        self._live = live
        if notice != _core.PassNotice.none:
            warnings.warn(_core.pass_notice_text(
                notice, plan.epoch, type(self).__name__, "PyTorch's DistributedSampler does",
                "auto_epoch=True"), UserWarning, stacklevel=5)
        return live, chunks

    # Hooks with defaults.
    def _before_first_pass(self) -> None:
        """Runs at the start of every pass, before the epoch is decided."""

    def _dataset_size(self) -> Optional[Tuple[int, int]]:
        return None

    def _shuffled(self) -> bool:
        """Whether replaying an epoch repeats a shuffled order (the replay warning's condition)."""
        return bool(getattr(self, "shuffle", True))

    def __len__(self) -> int:
        """Items this rank reads in a whole pass of an epoch (PyTorch's ``num_samples``), also
        after load_state_dict: a resumed pass yields fewer, the rest of its epoch. Frameworks
        count the batches a resumed epoch already had against this length (Lightning does), as
        torchdata's StatefulDataLoader keeps it."""
        return self._remaining(0)

    # ---- Checkpoints -------------------------------------------------------------------------

    def _position(self) -> Tuple[int, int]:
        """(epoch, consumed) a checkpoint taken now records (pass.h's position())."""
        return self._cursor_now().position()

    def _apply_position(self, epoch: int, consumed: int) -> None:
        """Makes the next pass resume (epoch, consumed), as set_epoch does (pass.h's load(): a
        complete epoch's next pass is the empty rest of it; loaded into a sampler already set to
        a later epoch, as torchdata loads it after the loop's set_epoch(e + 1), the next iterator
        is empty and the one after it reads that later epoch from its start)."""
        self._cursor.load(epoch, consumed, self._remaining(consumed))
        self._live = None

    def state_dict(self) -> Dict[str, Any]:
        """A plain dict that resumes this sampler where it stands, on any number of ranks:
        ``version``, ``kind`` (the class), ``epoch``, ``consumed`` (global positions of the
        epoch's stream read by all ranks together: the same on every rank), ``world_size`` (for
        information), ``config`` (what the loading sampler must match) and ``checksum``."""
        epoch, consumed = self._position()
        fields = {"version": GENERIC_STATE_VERSION, "kind": type(self).__name__, "epoch": epoch,
                  "consumed": consumed, "world_size": self.num_replicas, "config": self._config()}
        return {**fields, "checksum": _checksum(fields)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict() saved with any number of ranks: the next pass yields this
        rank's share of the positions of the state's epoch not yet consumed. Raises ValueError,
        changing nothing, for a malformed, edited or foreign state; under a process group every
        rank checks that all ranks load the same checkpoint (CheckpointMismatch otherwise)."""
        error, parsed = None, None
        try:
            parsed = self._parse_state(state)
        except ValueError as caught:
            error = caught
        if spans_group(self.num_replicas, self._check_agreement, self._process_group):
            summary = {} if parsed is None else {
                "epoch": parsed[0], "consumed": parsed[1], "configuration": parsed[2]}
            agree_on_checkpoint(summary, error, self._process_group)
        if error is not None:
            raise error
        self._apply_position(parsed[0], parsed[1])

    def _parse_state(self, state) -> Tuple[int, int, str]:
        """(epoch, consumed, configuration text) of a valid state for this sampler."""
        if not isinstance(state, dict):
            raise ValueError(f"state must be a dict from state_dict(), not {type(state).__name__}")
        if "kind" not in state and "state" in state:
            raise ValueError(f"state is a distsampler.torch.DistributedSampler's state_dict() "
                             f"(no 'kind'), not a {type(self).__name__}'s")
        missing = [key for key in ("version", "kind", "epoch", "consumed", "world_size",
                                   "config", "checksum") if key not in state]
        if missing:
            raise ValueError(f"state is missing {', '.join(missing)}; expected a state_dict()")
        if state["version"] != GENERIC_STATE_VERSION or type(state["version"]) is not int:
            raise ValueError(f"state version = {state['version']!r} is not supported; allowed: "
                             f"{GENERIC_STATE_VERSION}")
        fields = {key: value for key, value in state.items() if key != "checksum"}
        if state["checksum"] != _checksum(fields):
            raise ValueError(f"state checksum = {state['checksum']!r} does not match its "
                             "contents: the state was edited or is corrupt")
        if state["kind"] != type(self).__name__:
            raise ValueError(f"state kind = {state['kind']!r} but this sampler is a "
                             f"{type(self).__name__}")
        epoch, consumed = state["epoch"], state["consumed"]
        if type(epoch) is not int or not 0 <= epoch <= EPOCH_MAX:
            raise ValueError(f"state epoch = {epoch!r} is out of range; allowed: an int in "
                             "[0, 2^64 - 1]")
        if type(consumed) is not int or not 0 <= consumed <= EPOCH_MAX:
            raise ValueError(f"state consumed = {consumed!r} is out of range; allowed: an int in "
                             "[0, 2^64 - 1]")
        world_size = state["world_size"]
        if type(world_size) is not int or not 1 <= world_size <= EPOCH_MAX:
            raise ValueError(f"state world_size = {world_size!r} is out of range; allowed: an int "
                             "in [1, 2^64 - 1]")
        mine = self._config()
        differing = [key for key in sorted(set(mine) | set(state["config"]))
                     if state["config"].get(key) != mine.get(key)]
        if differing:
            raise ValueError("state does not match this sampler's configuration: " + "; ".join(
                f"state {key} = {state['config'].get(key)!r} but this sampler's {key} = "
                f"{mine.get(key)!r}" for key in differing))
        return epoch, consumed, json.dumps(mine, sort_keys=True)


class CoreArgs:
    """Pickling (copy.deepcopy, pickle, torch.save) for a sampler holding a C++ object in
    ``_core``: pybind11 objects cannot be pickled, so the pickled state holds the arguments that
    built it and unpickling builds it again (PyTorch's samplers pickle; a drop-in must too)."""

    # Attributes holding C++ objects: dropped when pickled (the subclass rebuilds any but _core
    # lazily).
    _cpp_attributes: Tuple[str, ...] = ("_core",)

    def _make_core(self, factory, *args, **kwargs):
        self._core_args = (factory, args, kwargs)
        self._core = factory(*args, **kwargs)
        return self._core

    def __getstate__(self) -> Dict[str, Any]:
        return {key: value for key, value in self.__dict__.items()
                if key not in self._cpp_attributes}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        factory, args, kwargs = self._core_args
        self._core = factory(*args, **kwargs)


# The first chunk of a pass is small: the first index comes after one short fill, not after a
# whole chunk's Python ints (which compete with a background build for memory).
_FIRST_CHUNK = 256


def import_numpy(needed_by: str):
    """numpy, imported where a feature needs it: distsampler.torch itself runs without it, as
    torch 2 does. Raises ModuleNotFoundError naming `needed_by` and ``pip install numpy``."""
    try:
        import numpy
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"{needed_by} needs numpy, which is not installed: "
                                  "pip install numpy", name="numpy") from error
    return numpy


def fill_chunks(total: int, fill, chunk: int, item=None):
    """Lists of fill's values for positions [0, total), `chunk` at a time after a first chunk of
    _FIRST_CHUNK: fill(first, out) writes out[j] for position first + j into a numpy buffer in
    C++ without the GIL. Without numpy, item(i) reads position i's value one at a time (about
    half the speed), where given."""
    try:
        import numpy as np
    except ModuleNotFoundError:
        if item is None:
            raise
        return _chunks_of(total, chunk, lambda first, size: list(map(item, range(first,
                                                                               first + size))))
    buffer = np.empty(min(chunk, total), dtype=np.uint64)

    def read(first: int, size: int):
        part = buffer[:size]
        fill(first, part)
        return part.tolist()

    return _chunks_of(total, chunk, read)


def _chunks_of(total: int, chunk: int, read):
    first, size = 0, min(_FIRST_CHUNK, chunk)
    while first < total:
        part = read(first, min(size, total - first))
        yield part
        first += len(part)
        size = chunk


def randperm_variant(randperm: str) -> str:
    """'classic' or 'current': which torch.randperm the torch order reproduces. 'auto' is the
    installed torch's: newer releases (2.6 is the first to carry upstream PR 143875; 2.5
    predates it) switch to another algorithm for n >= 214,748,364."""
    if randperm == "auto":
        import torch
        major, minor = (int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
        return "classic" if (major, minor) < (2, 6) else "current"
    if randperm not in ("current", "classic"):
        raise ValueError(f"randperm = {randperm!r} is not a variant; "
                         "allowed: 'auto', 'current', 'classic'")
    return randperm
