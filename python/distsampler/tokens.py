"""Token streams for language-model pretraining: documents of Megatron indexed sources mixed by
token weight, packed into sequences of ``seq_len + 1`` tokens and batched across ranks; the stream
does not depend on the world size, and its state (a few integers per source) resumes it on any.

The plan lives in the C++ core (``tokens/plan.h``); this module maps it onto torch: an
IterableDataset whose batches are this rank's share of each step, exact through DataLoader
workers, with torchdata's ``Stateful`` methods. docs/tokens.md describes the stream.
"""
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from . import _core
from ._passes import resolve_world

__all__ = ["TokenStream", "edits_from_flags"]

Prefixes = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def _shards(prefixes: Prefixes) -> List[str]:
    if isinstance(prefixes, (str, os.PathLike)):
        return [os.fspath(prefixes)]
    return [os.fspath(p) for p in prefixes]


def _world(world_size: Optional[int], rank: Optional[int]) -> Tuple[int, int]:
    if (world_size is None or rank is None) and not (dist.is_available() and dist.is_initialized()):
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise RuntimeError("TokenStream: WORLD_SIZE is set but torch.distributed is not "
                               "initialized; call init_process_group first or pass rank and "
                               "world_size")
        world_size, rank = 1 if world_size is None else world_size, 0 if rank is None else rank
    return resolve_world(world_size, rank)


def edits_from_flags(flags: Sequence[Tuple[str, str]]) -> Dict[str, List[Any]]:
    """TokenStream's ``changes``, ``ramps``, ``appends`` and ``skips`` from (flag, value) pairs
    of `distsampler tokens`' edit flags (``--change STEP:W0,W1,...``, ``--ramp A:B:W0,...``,
    ``--append STEP:S=PREFIX[,PREFIX...]``, ``--skip STEP:FILE``), parsed by the CLI's own
    parser; ValueError naming the flag and the value."""
    out: Dict[str, List[Any]] = {"changes": [], "ramps": [], "appends": [], "skips": []}
    for flag, value in flags:
        key, edit = _core.parse_token_edit(flag, value)
        out[key].append(edit)
    return out


class TokenStream(IterableDataset):  # type: ignore[type-arg]
    """This rank's batches of a run's global sequence stream, step after step (endless).

    sources: (prefix or list of shard prefixes, token weight) per source, Megatron .bin/.idx.
    Each batch (micro_batch sequences, default global_batch // world_size) is a dict: ``tokens``
    and ``labels`` (LongTensor [m, seq_len], labels one token on), ``loss_mask`` (0 on padding),
    ``position_ids`` (each token's offset in its document), ``segment_ids`` (its document's index
    in the row, -1 on padding), ``sequence`` (global sequence indices) and ``step``.

    Edits from a step on (docs/tokens.md, "Edits"; steps before it read the same sequences as
    without it, and each source continues its own order): ``changes`` (step, weights) and
    ``ramps`` (start, end, weights) set the weights of every source (new ones included);
    ``appends`` (step, source, prefixes) add documents to a source, numbered after its own and
    joining the unread rest of its epoch, or a new source when ``source`` is the number of
    sources; ``skips`` (step, [(source, document), ...]) are never read from their step on. A
    checkpoint records the edits before its step; a resume must declare them again, and may add
    edits of later steps.
    """

    def __init__(self, sources: Sequence[Tuple[Prefixes, float]], *, seq_len: int,
                 global_batch: int, seed: int = 0, packing: str = "concat", window: int = 1024,
                 micro_batch: Optional[int] = None, pad_token: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 changes: Sequence[Tuple[int, Sequence[float]]] = (),
                 ramps: Sequence[Tuple[int, int, Sequence[float]]] = (),
                 appends: Sequence[Tuple[int, int, Prefixes]] = (),
                 skips: Sequence[Tuple[int, Sequence[Tuple[int, int]]]] = ()) -> None:
        self.world_size, self.rank = _world(world_size, rank)
        self._plan = _core.TokenPlan(
            [_shards(p) for p, _ in sources], [float(w) for _, w in sources], seq_len,
            global_batch, seed, packing, window, changes=list(changes), ramps=list(ramps),
            appends=[(step, source, _shards(p)) for step, source, p in appends],
            skips=list(skips))
        _, per_rank = _core.rank_sequences(global_batch, self.world_size, self.rank, 0)
        self.micro_batch = per_rank if micro_batch is None else micro_batch
        if self.micro_batch <= 0 or per_rank % self.micro_batch:
            raise ValueError(f"micro_batch = {micro_batch} must divide global_batch / world_size"
                             f" = {global_batch} / {self.world_size}")
        self.pad_token = pad_token
        self._per_step = per_rank // self.micro_batch  # batches per step
        self._received = 0  # batches of the plan's current step the loop has received

    @property
    def step(self) -> int:
        """The next step to read."""
        return int(self._plan.step)

    def _batches(self, plan: Any, worker: int, workers: int) -> Iterator[Dict[str, Any]]:
        per_step, index = self._per_step, 0
        while True:
            mine = [j for j in range(per_step) if (index + j) % workers == worker]
            if not mine:
                plan.skip_step(self.world_size, self.rank)
                index += per_step
                continue
            step, sequences, tokens, positions, segments = plan.read_step(
                self.world_size, self.rank, self.pad_token)
            rows = torch.from_numpy(tokens)
            for j in mine:
                part = slice(j * self.micro_batch, (j + 1) * self.micro_batch)
                if workers == 1:
                    self._received += 1
                yield {"tokens": rows[part, :-1], "labels": rows[part, 1:],
                       "loss_mask": (torch.from_numpy(segments[part, 1:]) >= 0).float(),
                       "position_ids": torch.from_numpy(positions[part, :-1]),
                       "segment_ids": torch.from_numpy(segments[part, :-1]),
                       "sequence": torch.from_numpy(sequences[part].astype("int64")),
                       "step": int(step)}
            index += per_step

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = get_worker_info()
        if info is None:  # this process: the plan itself advances as the loop reads
            self._received = 0
            return self._batches(self._plan, 0, 1)
        return self._batches(self._plan.copy(), info.id, info.num_workers)

    def loader(self, num_workers: int = 0, **kwargs: Any) -> Iterator[Dict[str, Any]]:
        """A DataLoader over this stream (batch_size=None; worker w of k reads every k-th batch,
        which the DataLoader returns in order), tracked here so state_dict() is exact."""
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True: a stream's workers start from its state "
                             "when the loader starts; make a new loader() after load_state_dict")
        loader = DataLoader(self, batch_size=None, num_workers=num_workers, **kwargs)
        if num_workers == 0:
            yield from loader
            return
        per_step = self._per_step
        self._received = 0
        for batch in loader:
            if self._received == 0:
                self._plan.skip_step(self.world_size, self.rank)
            self._received = (self._received + 1) % per_step
            yield batch

    def state_dict(self) -> Dict[str, Any]:
        """The position after the batches the loop received; taken between steps."""
        if self._received % self._per_step:
            raise RuntimeError(f"state_dict() inside step {self.step - 1}: "
                               f"{self._received % self._per_step} of its {self._per_step} "
                               "batches received; take it between steps")
        state: Dict[str, Any] = self._plan.state_dict(self.world_size)
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Continues from `state_dict` (any world size with the same global batch); a state of
        another configuration raises ValueError naming every difference and changes nothing."""
        self._plan.load_state_dict(state_dict)
        self._received = 0
