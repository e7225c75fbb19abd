"""A drop-in for ``torch.utils.data.DistributedSampler`` with the set_epoch pitfall removed.

    from distsampler.torch import DistributedSampler

gives PyTorch's indices bit for bit (``order="torch"``, the default, with ``set_epoch`` called
each epoch), and PyTorch's behaviour when ``set_epoch`` is forgotten: the next pass replays the
previous epoch's order, with a warning naming ``set_epoch`` (shown once per shuffled sampler).
The differences:

* ``auto_epoch=True`` (opt-in): iterating again without a ``set_epoch`` call advances the epoch
  by one (and warns once). Its hazard: every rank must iterate the sampler the same number of
  times (a rank that iterates it once more, say for a log line, reads another epoch than the
  others and the shares overlap). An explicit ``set_epoch(e)`` always wins.
* ``state_dict()`` / ``load_state_dict()`` capture the epoch and the position within it, so a
  training loop resumes mid-epoch without replaying data, on any number of ranks (the elastic
  rule: a job of W' ranks resumes at the global position the old one reached).
* It is a ``torch.utils.data.distributed.DistributedSampler`` (a subclass), so frameworks that
  check for one (PyTorch Lightning, Ray Train) leave it in place instead of sharding it again.
* A pass's epoch is decided at its first ``next()``, not at ``iter()``: a DataLoader with
  workers calls ``iter()`` twice per epoch, and only the iterator it reads counts.
* Before the first batch (the first pass while ``torch.distributed`` is initialized) the
  ranks compare their configuration fingerprints, once per sampler; a mismatch (say one rank has
  another seed) raises ``ConfigurationMismatch`` on every rank. ``check_agreement=False`` skips it.

Indices are computed in C++ in chunks with the GIL released and handed out through
``itertools.chain`` (no Python code runs per index); no Python list of the dataset is ever built.
``indices(epoch)`` returns a rank's whole share of an epoch as one numpy array. numpy is needed
for that only: without it (torch 2 runs without it) the sampler iterates index by index.
``order="feistel"`` selects the random-access order: O(1) memory per rank whatever the dataset
size (PyTorch's order needs the whole permutation on every rank).
"""
import warnings
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any, Dict, Iterator, Optional

import torch.utils.data.distributed

from . import _core
from ._loader import DataLoader
from ._passes import (CheckpointMismatch, PlainShell, SeedOverflowError, Shell, gather_in_step,
                      import_numpy, spans_group)

if _TYPE_CHECKING:
    import numpy
    import numpy.typing

__all__ = ["DistributedSampler", "DataLoader", "ConfigurationMismatch", "CheckpointMismatch",
           "SeedOverflowError", "STATE_VERSION"]

# The format of state_dict() (state_dict.h's); load_state_dict() also reads version 1 (no
# checksum, same world size when written), converting it.
STATE_VERSION: int = _core.SAMPLER_STATE_DICT_VERSION


class ConfigurationMismatch(ValueError):
    """Raised on every rank when the ranks' sampler configurations differ."""


class DistributedSampler(PlainShell, torch.utils.data.distributed.DistributedSampler):  # type: ignore[type-arg]
    """``torch.utils.data.DistributedSampler`` (a subclass of it) with the same constructor,
    attributes, errors and indices, plus:

    Args:
        order: ``"torch"`` (PyTorch's ``torch.randperm`` order, bit for bit) or ``"feistel"``
            (a keyed random-access permutation: O(1) memory, any size up to 2^63).
        feistel_version: with ``order="feistel"``: ``2`` (the default; uniform on a statistical
            battery, docs/quality.md) or ``1`` (the order of releases before it, bit for bit,
            e.g. to resume their checkpoints). Ignored by the torch order.
        auto_epoch: ``False`` (the default) is PyTorch's behaviour: a pass started without a
            ``set_epoch`` call since the previous one replays its epoch (a shuffled sampler warns
            once, naming ``set_epoch``). ``True`` advances the epoch by one instead (warns once);
            every rank must then iterate the sampler the same number of times.
        randperm: which ``torch.randperm`` algorithm the torch order reproduces for datasets of
            214,748,364 items or more: ``"classic"`` (PyTorch <= 2.5), ``"current"`` (newer), or
            ``"auto"`` (the installed torch's). Smaller datasets are unaffected.
        prefetch: build the next epoch's torch permutation on a background thread while an epoch
            is read (same indices; the O(n) build leaves the epoch boundary; costs a second
            permutation's memory). ``False`` builds each epoch's when its pass starts.
        node_shared: the ranks of a node share one torch permutation per epoch: local rank 0
            builds it into anonymous shared memory (freed with the last process that holds it,
            however the job ends) and hands it to the others, which map it read-only (same
            indices; one permutation's memory per node instead of one per rank). The node group
            comes from torchrun (LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RUN_ID,
            MASTER_ADDR/PORT), Open MPI (OMPI_COMM_WORLD_LOCAL_RANK/LOCAL_SIZE) or a SLURM step
            (srun: SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE); every local rank
            must create its node-shared samplers in the same order and read the same epochs
            (two of one configuration keep separate permutations). Without those variables, or
            without usable shared memory, each rank builds its own (with a warning). Works with
            ``prefetch``. Off by default.
        check_agreement: when ``torch.distributed`` is initialized and ``process_group`` has
            ``num_replicas`` ranks, compare the configuration fingerprints of all its ranks
            before the first pass (one ``all_gather_object``, once per sampler; see
            check_configuration), and the checkpoints they load in load_state_dict. ``False``
            skips both (for a sampler that not every rank of the group uses).
        process_group: the group whose ranks must agree; ``None`` is the default group.

    ``seed`` is any integer in [-2^63, 2^64 - 1] (what ``torch.Generator.manual_seed`` takes);
    ``set_epoch`` takes an integer in [0, 2^64 - 1]. A pass checks that ``len(dataset)`` is still
    the size the sampler was built for.
    """

    def __init__(self, dataset: Any, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, *, order: str = "torch", auto_epoch: bool = False,
                 randperm: str = "auto", check_agreement: bool = True,
                 process_group: Any = None, prefetch: bool = True, node_shared: bool = False,
                 feistel_version: int = 2) -> None:
        self._prefetch, self._node_shared = bool(prefetch), bool(node_shared)
        self._agreed = False  # check_configuration passed once: the configuration is immutable
        self._init_plain(dataset, num_replicas, rank, seed, shuffle, drop_last, order, randperm,
                         feistel_version, auto_epoch, check_agreement, process_group)

    _kind = "drop_in"
    _cpp_attributes = ("_core", "_plain", "_prefetcher")
    _seed_overflow = SeedOverflowError

    @property
    def prefetching(self) -> Any:
        """The C++ PrefetchingSampler that serves passes (prefetch.h): with ``prefetch=True``
        and the shuffled torch order, epoch e + 1's permutation is built on a background thread
        while epoch e is read (at most two permutations alive), so the next pass starts without
        the O(n) build. ``hits`` counts passes it served ready."""
        prefetcher = self.__dict__.get("_prefetcher")
        if prefetcher is None:
            node = None
            if self.__dict__.get("_node_shared"):
                node = _core.detect_node_group()
                if node is None:
                    warnings.warn("node_shared=True but no launcher variables give the node "
                                  "(torchrun's LOCAL_RANK/LOCAL_WORLD_SIZE, Open MPI's "
                                  "OMPI_COMM_WORLD_LOCAL_RANK/LOCAL_SIZE, a SLURM step's "
                                  "SLURM_LOCALID/SLURM_NODEID/SLURM_STEP_TASKS_PER_NODE): each "
                                  "rank builds its own permutation", RuntimeWarning, stacklevel=3)
            prefetcher = self._prefetcher = _core.PrefetchingSampler(self._plain.sampler,
                                                                     self._prefetch, node)
            self._plain.set_source(prefetcher)
        return prefetcher

    def __iter__(self) -> Iterator[int]:  # Shell's, typed as torch's
        return Shell.__iter__(self)

    def _before_pass(self) -> None:
        Shell._before_pass(self)  # the dataset's size
        # By itself only over a group it spans; check_configuration() checks any layout.
        if not self._agreed and spans_group(self.num_replicas, self._check_agreement,
                                            self._process_group):
            self.check_configuration(self._process_group)
            self._agreed = True
        self.prefetching  # the passes read their views from it

    def check_configuration(self, group: Any = None) -> None:
        """Collective over ``group`` (default: the default process group): every rank gathers
        every rank's configuration fingerprint (size, seed, shuffle, drop_last, order and its
        algorithm; never the world size or rank) and, when any field differs, every rank raises
        ConfigurationMismatch naming the fields, their values and the group ranks holding them,
        e.g. ``seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1``. The first pass
        calls it once per sampler when ``check_agreement`` is set and ``torch.distributed`` is
        initialized."""
        mine = _core.encode_state(_core.make_state(self._plain.sampler, 0, 0))
        gathered = gather_in_step("check_configuration", mine, group, ConfigurationMismatch)
        message = _core.describe_disagreement(
            [_core.decode_state(theirs).config for theirs in gathered])
        if message:
            raise ConfigurationMismatch(
                "the sampler configuration differs across ranks, refusing to start: " + message)

    def indices(self, epoch: int) -> "numpy.typing.NDArray[numpy.int64]":
        """This rank's whole share of `epoch` at once, as an int64 numpy array: what iterating
        after ``set_epoch(epoch)`` yields from the epoch's start (``torch.from_numpy`` takes it as
        is). Computed in C++ with the GIL released, into the array only: no Python ints. A pure
        function of the configuration, `epoch` and the rank: the sampler's epoch, position and
        state are neither read nor changed. Costs n / num_replicas * 8 bytes; iterate instead to
        stay in O(1) memory. Needs numpy (ModuleNotFoundError without it)."""
        np = import_numpy("DistributedSampler.indices")
        try:
            view = self._plain.sampler.epoch(self._checked_epoch(epoch), 0)
        except IndexError as error:  # seed + epoch beyond 2^64 - 1: PyTorch's error
            raise SeedOverflowError(str(error)) from error
        out = np.empty(len(view), dtype=np.uint64)
        view.fill(0, out)  # C++, GIL released
        return out.view(np.int64)  # every index is below size <= 2^63

    def state_dict(self) -> Dict[str, Any]:
        """A plain dict (ints, bools, strings) that resumes this sampler's epoch where it stands,
        on any number of ranks:

        * ``version``: the format, STATE_VERSION.
        * ``state``: the checkpoint as the C++ core writes it (state.h's JSON: the configuration
          fingerprint, the epoch, the global positions consumed, and a CRC-32). It is what
          load_state_dict reads; the other entries are readable copies that must agree with it.
        * ``epoch``: the epoch in progress.
        * ``consumed``: global positions of that epoch's order the job has read, all ranks
          together: a pass started at C that handed out k indices on each rank gives
          C + k * world_size (the same on every rank, so rank 0 can save it). Read through
          distsampler.data.DataLoader, k counts what the training loop received.
        * ``world_size``: the number of ranks of the job that saved it, for information: any
          number of ranks resumes from it.
        * ``algorithm_version``, ``size``, ``seed``, ``shuffle``, ``drop_last``, ``uneven``,
          ``order``, ``randperm``, ``feistel_rounds``, ``feistel_version``: the configuration
          fingerprint, which the loading sampler must have (randperm only matters for the torch
          order, feistel_rounds and feistel_version for the feistel order; the others are
          normalized). States of earlier releases lack ``feistel_version`` and load as
          version 1.
        """
        return Shell.state_dict(self)
