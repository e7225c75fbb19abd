"""The shell every sampler of the package is (private): a thin layer over the C++ core's one pass
sampler (policy.h's PolicySampler, ``_core.PassSampler``), which owns the passes, the epoch, the
progress and the checkpoint format (state_dict.h). Python keeps what only Python can do:
torch.distributed's collectives, warnings, pickling, and PyTorch's names and errors.

A pass's epoch and start are decided at its first ``next()``, never at ``iter()``: a DataLoader
with workers calls ``iter()`` more than once per epoch. The loader protocol is torchdata's
``Stateful``; distsampler.data.DataLoader (receipts.h) reports each batch the loop receives to the
sampler's PassSampler. The iterable adapter adds ``check_loader(loader)`` and
``progress_start()`` (its pass starts in the main process).
"""
import itertools
import operator
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch.distributed as dist

from . import _core

__all__ = ["CheckpointMismatch", "PlainShell", "SeedOverflowError", "Shell"]


class SeedOverflowError(RuntimeError, ValueError):
    """seed + epoch outside [-2^63, 2^64 - 1], raised when a pass starts. PyTorch raises it as a
    RuntimeError in 1.13 and a ValueError in 2.x ("Overflow when unpacking long long"): this is
    both, so code written for either catches it."""


class CheckpointMismatch(ValueError):
    """Raised on every rank when the ranks loaded checkpoints that differ (or one rank could not
    load its checkpoint)."""


check_uint64 = _core.check_count  # a uint64 of the core, else ValueError naming the parameter


def resolve_world(num_replicas: Optional[int], rank: Optional[int]) -> Tuple[int, int]:
    """num_replicas and rank, from the process group when omitted: PyTorch's rule, checks and
    messages, in PyTorch's order."""
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


def randperm_variant(randperm: str) -> "_core.RandpermVariant":
    """Which torch.randperm the torch order reproduces; 'auto' is the installed torch's (2.6 is
    the first to carry upstream PR 143875, which changes it for n >= 214,748,364)."""
    if _core.parse_randperm_variant(randperm, also=["auto"]) != "auto":
        return getattr(_core.RandpermVariant, randperm)
    import torch
    return _core.randperm_variant_of_torch(torch.__version__)


def import_numpy(needed_by: str) -> Any:
    """numpy, imported where a feature needs it (distsampler.torch runs without it, as torch 2
    does); ModuleNotFoundError naming `needed_by` and ``pip install numpy`` otherwise."""
    try:
        import numpy
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"{needed_by} needs numpy, which is not installed: "
                                  "pip install numpy", name="numpy") from error
    return numpy


# ---- Collectives: what every rank must agree on ----------------------------------------------

def spans_group(num_replicas: int, enabled: bool, group: Any) -> bool:
    """Whether a collective over `group` reaches exactly the sampler's ranks (one built for
    fewer replicas may be used by some ranks only, and a collective would wait forever)."""
    return (enabled and dist.is_available() and dist.is_initialized()
            and dist.get_world_size(group) == num_replicas)


def gather_in_step(call: str, payload: Any, group: Any, mismatch: type) -> List[Any]:
    """Collective: every rank's payload, gathered by `call` on every rank. A rank in another of
    the package's collectives (a rank that skipped load_state_dict, say) makes every rank raise
    `mismatch` naming the calls and ranks, rather than read the other collective's payload."""
    gathered: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, {"distsampler_call": call, "payload": payload}, group=group)
    message = _core.describe_collectives(gathered, call)  # state_dict.h's
    if message:
        raise mismatch(message)
    return [theirs["payload"] for theirs in gathered]


# ---- The shell ----------------------------------------------------------------------------------

class Shell:
    """What every sampler of the package is over ``_core.PassSampler``: set_epoch, auto_epoch,
    passes decided at their first next(), len(), state_dict/load_state_dict (with the ranks'
    agreement) and pickling. A subclass sets ``num_replicas``, builds its policy in ``_policy()``
    (from its attributes: pickling rebuilds it so) and calls ``_init_shell``; hooks:
    ``_before_pass`` (runs as each pass starts)."""

    _core: Any  # _core.PassSampler
    _built_size: int  # len(dataset) when built, for a sampler with a dataset
    # Raised instead of the core's IndexError when a pass cannot start because seed + epoch
    # leaves the seed's range (the samplers that reproduce PyTorch's error); None: IndexError.
    _seed_overflow: Optional[type] = None

    def _init_shell(self, auto_epoch: bool, check_agreement: bool, process_group: Any) -> None:
        self._check_agreement, self._process_group = bool(check_agreement), process_group
        self._core = _core.PassSampler(self._policy(), bool(auto_epoch))

    def _policy(self) -> Any:
        raise NotImplementedError

    def _before_pass(self) -> None:
        """Runs at the start of every pass, before the epoch is decided: a sampler with a
        ``dataset`` checks that it still has the ``_built_size`` the sampler was built for."""
        dataset = getattr(self, "dataset", None)
        if dataset is not None and len(dataset) != self._built_size:
            raise ValueError(
                f"len(dataset) = {len(dataset)} but this {type(self).__name__} was built for "
                f"{self._built_size} samples: the dataset changed size after the sampler was "
                "built; build a new sampler for the new dataset")

    @staticmethod
    def _checked_epoch(epoch: int) -> int:
        return check_uint64("epoch", operator.index(epoch))

    auto_epoch = property(lambda self: bool(self._core.auto_epoch))
    epoch = property(lambda self: int(self._core.epoch), lambda self, value: self.set_epoch(value),
                     doc="The epoch of the latest (or, before any, the next) pass. Assigning it "
                         "is set_epoch.")

    def set_epoch(self, epoch: int) -> None:
        """Makes the next pass read `epoch`, always (auto_epoch never overrides it). Setting the
        epoch a loaded state is in keeps the state's position; setting the epoch of the pass in
        progress leaves its checkpoint where the pass stands."""
        self._core.set_epoch(self._checked_epoch(epoch))

    def __iter__(self) -> Iterator[Any]:
        if self._core.skip_finished():
            # The loaded finished pass has nothing left; the next iter() reads the epoch set
            # before the load, from its start (pass.h's load()).
            return iter(())
        # chain asks the generator for its first chunk at the first next(): that is when the
        # pass starts. Later next() calls run in C, one Python step per chunk.
        return itertools.chain.from_iterable(self._run_pass())

    def _run_pass(self) -> Iterator[Any]:
        yield from self._start_pass()

    def _start_pass(self) -> Any:
        """Starts the pass: one call into C++ decides its epoch and start, builds its items
        (raising, changing nothing, when the epoch cannot be read) and makes it live."""
        self._before_pass()
        try:
            chunks, notice = self._core.start(type(self).__name__)
        except IndexError as error:  # seed + epoch beyond 2^64 - 1
            if self._seed_overflow is None:
                raise
            raise self._seed_overflow(str(error)) from error
        if notice is not None:
            warnings.warn(notice, UserWarning, stacklevel=5)
        return chunks

    def __len__(self) -> int:
        """Items this rank reads in a whole pass of an epoch (PyTorch's ``num_samples``), also
        after load_state_dict: a resumed pass yields fewer, the rest of its epoch."""
        return int(self._core.remaining(0))

    # ---- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """A plain dict that resumes this sampler where it stands, on any number of ranks (the
        format is the C++ core's, state_dict.h): ``epoch``, ``consumed`` (global positions of the
        epoch's stream read by all ranks together: the same on every rank), ``world_size`` (for
        information) and what the loading sampler's configuration must match."""
        state: Dict[str, Any] = self._core.state_dict()
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes from a state_dict(), saved with this or any other number of ranks: the next
        pass yields this rank's share of the global positions of the state's epoch not yet
        consumed (the elastic rule), none when it is complete; ``len()`` stays a whole pass's.
        Calling set_epoch with that same epoch keeps the position; another epoch starts from its
        beginning. A complete state's next pass is empty (the rest of its epoch); the pass after
        that, without a set_epoch call, replays the epoch or, with auto_epoch, advances.

        Raises ValueError, changing nothing, when the state is malformed, corrupt (its checksum
        fails, or a readable entry disagrees with the checksummed state) or was saved under
        another configuration; the message names the field. The drop-in also reads its
        version-1 states (issue 3's, no checksum). Under a process group of ``num_replicas``
        ranks (and ``check_agreement``), every rank gathers what every rank loads and raises
        CheckpointMismatch when the epochs, positions or configurations differ, or when one
        rank's state was rejected.
        """
        error, parsed = None, None
        try:
            parsed = self._core.parse_state(state)
        except ValueError as caught:
            error = caught
        if spans_group(self.num_replicas, self._check_agreement, self._process_group):
            # Every rank gathers what every rank loads, or its error (state_dict.h's message).
            mine = {"error": None if error is None else f"{type(error).__name__}: {error}"}
            if parsed is not None:
                mine.update(epoch=parsed[0], consumed=parsed[1], configuration=parsed[2])
            message = _core.describe_checkpoints(gather_in_step(
                "load_state_dict", mine, self._process_group, CheckpointMismatch))
            if message:
                raise CheckpointMismatch(message)
        if error is not None:
            raise error
        assert parsed is not None
        self._core.load(parsed[0], parsed[1])

    # ---- pickling (copy.deepcopy, pickle, torch.save): the C++ objects are rebuilt -----------

    _cpp_attributes: Tuple[str, ...] = ("_core",)

    def __getstate__(self) -> Dict[str, Any]:
        state = {key: value for key, value in self.__dict__.items()
                 if key not in self._cpp_attributes}
        state["_cursor"] = self._core.cursor
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._core = _core.PassSampler(self._policy(), self.__dict__.pop("_cursor"))


class PlainShell(Shell):
    """A sampler over the drop-in's order (``_core.plain_policy``: the drop-in, the evaluation
    sampler, the iterable adapter): PyTorch's arguments, checked in PyTorch's order, and
    PyTorch's attributes."""

    _kind: str  # plain_policy's
    _cpp_attributes = ("_core", "_plain")

    def _init_plain(self, dataset: Any, num_replicas: Optional[int], rank: Optional[int],
                    seed: int, shuffle: bool, drop_last: bool, order: str, randperm: str,
                    feistel_version: int, auto_epoch: bool, check_agreement: bool,
                    process_group: Any, **extra: Any) -> None:
        num_replicas, rank = resolve_world(num_replicas, rank)  # PyTorch's checks and messages
        self.dataset, self._built_size = dataset, len(dataset)
        self._options = dict(size=self._built_size, world_size=num_replicas, rank=rank, seed=seed,
                             shuffle=bool(shuffle), drop_last=bool(drop_last), order=order,
                             randperm=randperm_variant(randperm),
                             feistel_version=feistel_version, **extra)
        self._init_shell(auto_epoch, check_agreement, process_group)

    # PyTorch's attributes, read-only: the configuration lives in C++. The same for the three
    # samplers.
    num_replicas = property(lambda self: int(self._options["world_size"]))
    rank = property(lambda self: int(self._options["rank"]))
    shuffle = property(lambda self: bool(self._options["shuffle"]))
    drop_last = property(lambda self: bool(self._options["drop_last"]))
    order = property(lambda self: str(self._options["order"]))
    seed = property(lambda self: int(self._plain.sampler.seed))
    num_samples = property(lambda self: int(self._plain.sampler.num_samples))
    total_size = property(lambda self: int(self._plain.sampler.total_size))
    feistel_version = property(lambda self: int(self._plain.config["feistel_version"]),
                               doc="1 or 2 with the feistel order; 1 with the torch order (as in "
                                   "the fingerprint).")

    def _policy(self) -> Any:
        self._plain = _core.plain_policy(self._kind, **self._options)
        return self._plain
