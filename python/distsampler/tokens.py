"""Token streams for language-model pretraining: documents of Megatron indexed sources mixed by
token weight, packed into sequences of ``seq_len + 1`` tokens and batched across ranks; the stream
does not depend on the world size, and its state (a few integers per source) resumes it on any.

The plan and its runtime live in the C++ core (``tokens/plan.h``, ``tokens/stream.h``: the feed,
the read-ahead, the workers' rows); this module maps them onto torch: an
IterableDataset whose batches are this rank's share of each step, exact through DataLoader
workers, with torchdata's ``Stateful`` methods. docs/tokens.md describes the stream.
"""
import hashlib
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from . import _core
from ._passes import resolve_world

__all__ = ["TokenStream", "edits_from_flags", "split_of", "varlen_metadata"]

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


def split_of(split: Sequence[float], source: int, document: int) -> str:
    """'train', 'valid' or 'test': the split TokenStream(split=...) puts `document` of source
    `source` (its index in ``sources``) in; the same rule on every machine."""
    return str(_core.split_of([float(f) for f in split], source, document))


def varlen_metadata(segment_ids: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """(cu_seqlens, max_seqlen) of rows of segment ids (-1 on padding; ids ascending and each
    segment contiguous within a row): int32 cumulative lengths of the segments in row-major
    order, starting at 0, padding not a segment (flash-attention's varlen layout of the rows'
    non-padding tokens), and the longest segment (0 for none)."""
    cu_seqlens, max_seqlen = _core.varlen_metadata(segment_ids.detach().cpu().numpy())
    return torch.from_numpy(cu_seqlens), int(max_seqlen)


def _one_storage(*tensors: torch.Tensor) -> List[torch.Tensor]:
    """Copies of `tensors` in one storage, each at an offset aligned to 8 bytes: a DataLoader
    worker's batch then crosses to the loop as one shared-memory segment, not one per tensor
    (about half the time per batch, docs/benchmarks.md's loader section)."""
    sizes = [t.numel() * t.element_size() for t in tensors]
    buffer = torch.empty(sum((n + 7) // 8 * 8 for n in sizes), dtype=torch.uint8)
    out, offset = [], 0
    for t, n in zip(tensors, sizes):
        view = buffer[offset:offset + n].view(t.dtype).view(t.shape)
        view.copy_(t)
        out.append(view)
        offset += (n + 7) // 8 * 8
    return out


class TokenStream(IterableDataset):  # type: ignore[type-arg]
    """This rank's batches of a run's global sequence stream, step after step (endless).

    sources: (prefix or list of shard prefixes, token weight) per source, Megatron .bin/.idx.
    Each batch (micro_batch sequences, default global_batch // world_size) is a dict
    (docs/tokens.md, "Batches", says which framework's convention each key follows):
    ``tokens`` and ``labels`` (LongTensor [m, seq_len], labels one token on); ``loss_mask``
    (float [m, seq_len]: 0 where the label is padding, and as the options below say);
    ``position_ids`` (``positions="segment"``, the default: each token's offset in its segment, so
    0 at every document start and at every row's start, never seq_len or more, as Megatron's
    ``reset_position_ids`` and Hugging Face's ``DataCollatorWithFlattening``; ``"document"``: its
    offset in its document, as releases up to 0.1.0); ``segment_ids`` (its segment's index in the
    row, -1 on padding); ``cu_seqlens`` (int32 [segments + 1]: the cumulative lengths of the
    batch's segments of ``tokens``, row-major, padding not a segment, as flash-attention's
    ``flash_attn_varlen_func`` takes them for the batch's non-padding tokens) and ``max_seqlen``
    (int, the longest of them); ``sequence`` (global sequence indices) and ``step``.

    mask_cross_document: the loss is masked where the label belongs to another segment than its
    input (the next document's first token), as document-masked attention needs.
    eod_token, eod_mask_loss: the loss is masked where the input is the end-of-document token
    (Megatron's ``eod_mask_loss``); the token the files end each document with, or, with
    ``append_eod=True`` (files written without Megatron's ``--append-eod``), the token the stream
    appends after each non-empty document's last (the plan counts it; a checkpoint records it).

    Edits from a step on (docs/tokens.md, "Edits"; steps before it read the same sequences as
    without it, and each source continues its own order): ``changes`` (step, weights) and
    ``ramps`` (start, end, weights) set the weights of every source (new ones included);
    ``appends`` (step, source, prefixes) add documents to a source, numbered after its own and
    joining the unread rest of its epoch, or a new source when ``source`` is the number of
    sources; ``skips`` (step, [(source, document), ...]) are never read from their step on. A
    checkpoint records the edits before its step; a resume must declare them again, and may add
    edits of later steps.

    Held-out data (docs/tokens.md, "Validation"): ``split`` (train, validation, test fractions,
    as Megatron's ``split="969,30,1"``) puts each document of each source in one split by a hash
    of (source index, document number): the same on every machine, W and seed, appended documents
    included. ``subset="train"`` (the default) reads the train split, endlessly; ``"valid"`` or
    ``"test"`` is an evaluation stream: each iteration is one pass from the start that reads every
    document of that split once across the ranks, then stops at the same step on every rank, the
    last step's rows past the pass being padding (loss_mask 0); ``steps`` caps a pass at its
    first steps (a fixed evaluation budget). Without ``split``, an evaluation stream reads every
    document (a separate validation set). :meth:`validation` makes the evaluation stream of a
    training stream.

    Planning (docs/tokens.md, "Planning ahead"): every process would plan the whole global stream.
    ``planner="node"`` (the default) plans a training stream ``plan_ahead`` steps ahead of the loop
    on one thread per node, local rank 0's when a launcher gives local ranks (torchrun, mpirun,
    srun), else this process's; the ranks and their DataLoader workers read each step's sequences
    from shared memory and read only their own tokens. ``"process"``: a thread of each rank.
    ``"inline"``: each process plans every step itself as it reads (as 0.1.0 did). The
    batches are the same whichever; a step the planner does not hold (a rank fallen a ring behind,
    the planner's process killed) is planned by the reader itself.

    Locality (docs/tokens.md, "Sources in an object store"): ``locality`` gives per source
    ``(block, window)`` or None. None (the default) reads the source in a global shuffle of its
    documents; ``(block, window)`` in the locality order for object stores: its documents in
    blocks of ``block`` contiguous ones, the blocks in a keyed order, the documents shuffled
    within windows of ``window`` blocks (policies/shards.h's BlockShardOrder), so that a stretch
    of the stream reads about ``window`` blocks of the source. The rest of the plan is the same
    (mix, packing, edits, any-W resume); a checkpoint records the orders.
    """

    def __init__(self, sources: Sequence[Tuple[Prefixes, float]], *, seq_len: int,
                 global_batch: int, seed: int = 0, packing: str = "concat", window: int = 1024,
                 micro_batch: Optional[int] = None, pad_token: int = 0,
                 positions: str = "segment", mask_cross_document: bool = False,
                 eod_token: Optional[int] = None, eod_mask_loss: bool = False,
                 append_eod: bool = False, rank: Optional[int] = None, world_size: Optional[int] = None,
                 changes: Sequence[Tuple[int, Sequence[float]]] = (),
                 ramps: Sequence[Tuple[int, int, Sequence[float]]] = (),
                 appends: Sequence[Tuple[int, int, Prefixes]] = (),
                 skips: Sequence[Tuple[int, Sequence[Tuple[int, int]]]] = (),
                 split: Optional[Sequence[float]] = None, subset: str = "train",
                 steps: Optional[int] = None, planner: str = "node",
                 plan_ahead: int = 16,
                 locality: Optional[Sequence[Optional[Tuple[int, int]]]] = None) -> None:
        self.world_size, self.rank = _world(world_size, rank)
        if planner not in ("node", "process", "inline"):
            raise ValueError(f"planner = {planner!r}: one of 'node', 'process', 'inline'")
        _core.check_plan_ahead(plan_ahead)
        self.planner, self.plan_ahead = planner, plan_ahead
        self._args: Dict[str, Any] = dict(
            sources=[(_shards(p), float(w)) for p, w in sources], seq_len=seq_len,
            global_batch=global_batch, seed=seed, packing=packing, window=window,
            pad_token=pad_token, positions=positions, mask_cross_document=mask_cross_document,
            eod_token=eod_token, eod_mask_loss=eod_mask_loss, append_eod=append_eod,
            changes=list(changes),
            ramps=list(ramps), appends=[(st, so, _shards(p)) for st, so, p in appends],
            skips=list(skips), split=None if split is None else [float(f) for f in split],
            planner=planner, plan_ahead=plan_ahead,
            locality=None if locality is None else list(locality))
        if append_eod and eod_token is None:
            raise ValueError("append_eod=True needs eod_token, the token id to append")
        self._plan = _core.TokenPlan(
            [_shards(p) for p, _ in sources], [float(w) for _, w in sources], seq_len,
            global_batch, seed, packing, window, changes=list(changes), ramps=list(ramps),
            appends=[(step, source, _shards(p)) for step, source, p in appends],
            skips=list(skips), split=[] if split is None else [float(f) for f in split],
            subset=subset, eod_token=eod_token, append_eod=bool(append_eod),
            orders=self._args["locality"])
        self.subset, self.single_pass = subset, subset != "train"
        if steps is not None and (not self.single_pass or steps <= 0):
            raise ValueError(f"steps = {steps}: a cap on an evaluation pass (subset 'valid' or "
                             "'test'), a positive number of steps")
        self.steps = steps
        _, per_rank = _core.rank_sequences(global_batch, self.world_size, self.rank, 0)
        self.micro_batch = per_rank if micro_batch is None else micro_batch
        if self.micro_batch <= 0 or per_rank % self.micro_batch:
            raise ValueError(f"micro_batch = {micro_batch} must divide global_batch / world_size"
                             f" = {global_batch} / {self.world_size}")
        self.pad_token = pad_token
        self.positions = _core.parse_token_positions(positions)
        if eod_mask_loss and eod_token is None:
            raise ValueError("eod_mask_loss=True needs eod_token, the token that ends each "
                             "document (in the files, or appended with append_eod=True)")
        self.mask_cross_document, self.eod_token = bool(mask_cross_document), eod_token
        self.eod_mask_loss = bool(eod_mask_loss)
        self._per_step = per_rank // self.micro_batch  # batches per step
        self._received = 0  # batches of the plan's current step the loop has received

    @property
    def step(self) -> int:
        """The next step to read."""
        return int(self._plan.step)

    @property
    def global_batch(self) -> int:
        """Sequences a step, every rank's together."""
        return int(self._args["global_batch"])

    @property
    def seq_len(self) -> int:
        """Tokens a row's input (its labels one token on)."""
        return int(self._args["seq_len"])

    def _batches(self, plan: Any, worker: int, workers: int,
                 in_worker: bool = False) -> Iterator[Dict[str, Any]]:
        per_step, micro, k = self._per_step, self.micro_batch, 0
        reader = (int(plan.step), per_step, micro, worker, workers)  # for the block cache
        while True:
            if self.single_pass and (plan.exhausted or k == self.steps):
                return  # the pass is over at this step on every rank
            parts = _core.worker_parts(k, per_step, micro, worker, workers)  # this worker's rows
            if parts == []:
                plan.skip_step(self.world_size, self.rank)
                k += 1
                continue
            mine = range(per_step) if parts is None else [first // micro for first, _ in parts]
            # In the loop's process, the next step's rows are read on a thread meanwhile.
            step, sequences, tokens, positions, segments = plan.read_step(
                self.world_size, self.rank, self.pad_token, self.positions, parts, not in_worker,
                reader)
            masks = self._loss_mask(tokens, segments)
            for i, j in enumerate(mine):
                part = slice(i * self.micro_batch, (i + 1) * self.micro_batch)
                rows, spans = torch.from_numpy(tokens[part]), torch.from_numpy(segments[part])
                places = torch.from_numpy(positions[part])
                mask = masks[part]
                cu_seqlens, max_seqlen = varlen_metadata(spans[:, :-1])
                numbers = torch.from_numpy(sequences[part].astype("int64"))
                if in_worker:  # sent to the loop: one storage moves faster than six
                    rows, places, spans, mask, cu_seqlens, numbers = _one_storage(
                        rows, places, spans, mask, cu_seqlens, numbers)
                else:
                    self._received += 1
                yield {"tokens": rows[:, :-1], "labels": rows[:, 1:], "loss_mask": mask,
                       "position_ids": places[:, :-1], "segment_ids": spans[:, :-1],
                       "cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen,
                       "sequence": numbers, "step": int(step)}
            k += 1

    def _loss_mask(self, rows: Any, spans: Any) -> torch.Tensor:
        """The step's loss mask, rows of seq_len + 1 (loader/tokens.h's token_loss_mask)."""
        return torch.from_numpy(_core.token_loss_mask(
            rows, spans, self.mask_cross_document,
            self.eod_token if self.eod_mask_loss else None))

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = get_worker_info()
        if self.single_pass:  # every pass from the start: the stream itself never moves
            return self._batches(self._plan.copy(), 0 if info is None else info.id,
                                 1 if info is None else info.num_workers, info is not None)
        if info is None:  # this process: the plan itself advances as the loop reads
            self._received = 0
            self._start_feed()
            return self._batches(self._plan, 0, 1)
        return self._batches(self._plan.copy(), info.id, info.num_workers, True)

    def loader(self, num_workers: int = 0, **kwargs: Any) -> Iterator[Dict[str, Any]]:
        """A DataLoader over this stream (batch_size=None; worker w of k reads every k-th batch,
        which the DataLoader returns in order), tracked here so state_dict() is exact."""
        if kwargs.get("persistent_workers"):
            raise ValueError("persistent_workers=True: a stream's workers start from its state "
                             "when the loader starts; make a new loader() after load_state_dict")
        if num_workers > 0:
            self._start_feed()  # before the workers start: they read from it
        loader = DataLoader(self, batch_size=None, num_workers=num_workers, **kwargs)
        if num_workers == 0 or self.single_pass:
            yield from loader
            return
        per_step = self._per_step
        self._received = 0
        for batch in loader:
            if self._received == 0:
                self._plan.skip_step(self.world_size, self.rank)
            self._received = (self._received + 1) % per_step
            yield batch

    def _start_feed(self) -> None:
        """A training stream's plan feed (planner 'node' or 'process'), once; load_state_dict
        drops it (the next one starts at the loaded step)."""
        if self.planner == "inline" or self.single_pass or self._plan.feeding:
            return
        group = _core.detect_node_group() if self.planner == "node" else None
        self._plan.start_feed(self.plan_ahead, group if group and group.local_world_size > 1
                              else None, self.world_size, self.rank)

    def validation(self, subset: str = "valid", *, global_batch: Optional[int] = None,
                   micro_batch: Optional[int] = None, steps: Optional[int] = None
                   ) -> "TokenStream":
        """The evaluation stream of this training stream: one pass over the ``subset`` split of
        the same sources (with the documents ``appends`` add, numbered as in training, and
        without those ``skips`` list), packed alike, in this stream's batches unless
        ``global_batch`` or ``micro_batch`` is given, on the same ranks; mixed by the last
        weights given. Reading it never moves this stream."""
        if subset == "train":
            raise ValueError("subset = 'train': an evaluation stream reads 'valid' or 'test'")
        a = dict(self._args)
        for edits in ("sources", "changes", "ramps"):  # the plan's latest weights hold them
            a.pop(edits)
        weights = self._plan.latest_weights
        a.pop("appends")  # the plan's shards hold them, numbered as the plan numbers them
        skipped = sorted({tuple(pair) for _, pairs in a.pop("skips") for pair in pairs})
        if global_batch is not None:
            a["global_batch"] = global_batch
        elif micro_batch is None:  # the training stream's batches
            micro_batch = self.micro_batch
        return TokenStream(list(zip(self._plan.shards, weights)), **a,
                           skips=[(0, skipped)] if skipped else (), subset=subset,
                           micro_batch=micro_batch, steps=steps, rank=self.rank,
                           world_size=self.world_size)

    def explain(self, step: int, *, world_size: Optional[int] = None,
                tokenizer: Any = None, index: Any = None) -> Dict[str, Any]:
        """Which documents made `step` (docs/tokens.md, "Which documents made a step"): each
        row of the global batch with its spans (source, document, begin, end, source_epoch),
        the rank and row it goes to on `world_size` ranks (this stream's by default), and each
        source's tokens in the step and in steps 0 to `step`. With `tokenizer` (a
        ``tokenizers.Tokenizer``, or a tokenizer.json's path), each span's ``text``, decoded from
        the tokens the stream reads there. Plans from the start, or with ``index`` (what
        :meth:`index` returns or the file it writes) from its last state before the step;
        never moves this stream."""
        step = _core.check_count("step", step, 0)
        world = self.world_size if world_size is None else _core.check_count(
            "world_size", world_size, 1)
        out: Dict[str, Any] = self._plan.explain(step, world, self._index(index))
        if tokenizer is not None:
            from .explain_text import add_text
            add_text(out, self._plan.shards,
                     self.eod_token if self._args["append_eod"] else None, tokenizer)
        return out

    def index(self, steps: int, path: Optional[Union[str, "os.PathLike[str]"]] = None, *,
              every: int = 64) -> Any:
        """The plan's states every ``every`` steps through ``steps`` (docs/tokens.md, "At which
        steps a document was seen"): what makes :meth:`where` and :meth:`takedown` fast. Plans
        the run once (no token read); O(sources x steps / every) words. Written to ``path``
        when given (what ``distsampler tokens index`` writes); returned either way."""
        steps = _core.check_count("steps", steps, 1)
        every = _core.check_count("every", every, 1)
        built = _core.PlanIndex(self._plan, steps, every)
        if path is not None:
            built.save(os.fspath(path))
        return built

    def _index(self, index: Any) -> Any:
        if index is None or isinstance(index, _core.PlanIndex):
            return index
        if isinstance(index, (str, os.PathLike)):
            return _core.PlanIndex.load(os.fspath(index), self._plan)
        raise TypeError(f"index = {index!r}: a path to an index file or what index() returns")

    def _until(self, until: Optional[int], index: Any) -> int:
        if until is None:
            if index is None:
                raise ValueError("until = None needs an index (the steps to look through)")
            return int(index.steps)
        return _core.check_count("until", until, 0)

    def where(self, source: int, document: int, *, until: Optional[int] = None,
              index: Any = None, world_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """Every piece of ``document`` of ``source`` delivered in steps [0, ``until``) (the
        index's steps by default), in delivery order: dicts with its step, row, sequence,
        offset in the row, begin, end, tokens, source_epoch (the source's pass) and the rank and
        row it goes to on ``world_size`` ranks (this stream's by default). ``index``: what
        :meth:`index` returns or the file it writes; refused when built on another
        configuration or other data. Without one the plan is scanned from step 0."""
        index = self._index(index)
        until = self._until(until, index)
        source = _core.check_count("source", source, 0)
        document = _core.check_count("document", document, 0)
        world = self.world_size if world_size is None else _core.check_count(
            "world_size", world_size, 1)
        return list(self._plan.where(source, document, until, world, index))

    def find_text(self, text: Union[str, bytes]) -> List[Tuple[int, int]]:
        """The (source, document) pairs whose text is ``text`` (str as UTF-8, or bytes), by the
        BLAKE2b-128 digest that ``tokens prepare`` writes per document (its .dochash)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        digest = hashlib.blake2b(data, digest_size=16).digest()
        return [(source, int(d)) for source in range(len(self._plan.shards))
                for d in self._plan.documents_with_digest(source, digest)]

    def takedown(self, documents: Sequence[Tuple[int, int]], from_step: int, *,
                 until: Optional[int] = None, index: Any = None,
                 world_size: Optional[int] = None) -> Dict[str, Any]:
        """A takedown of ``documents`` ((source, document) pairs) from ``from_step`` on: every
        piece of each seen before it (``before``: which checkpoints hold its influence), the
        edit that keeps them out (``skips``: add it to this stream's ``skips=``, or ``--skip``
        of the CLI), the pieces the edited run still delivers from ``from_step`` on
        (``after``: only documents begun before it, which a skip list finishes) and the
        ``fingerprint`` of the sources and configuration it was computed on."""
        index = self._index(index)
        until = self._until(until, index)
        from_step = _core.check_count("from_step", from_step, 0)
        world = self.world_size if world_size is None else _core.check_count(
            "world_size", world_size, 1)
        pairs = sorted({(_core.check_count("source", s, 0), _core.check_count("document", d, 0))
                        for s, d in documents})
        edit = (from_step, pairs)
        a = dict(self._args)
        sources = a.pop("sources")
        a["skips"] = list(a["skips"]) + [edit]
        edited = TokenStream(sources, **a, subset=self.subset, rank=0, world_size=1)
        out = dict(self._plan.takedown(edited._plan, pairs, from_step, until, world, index))
        out["documents"] = [tuple(d) for d in out["documents"]]
        out["skips"] = [edit]
        out["fingerprint"] = json.loads(self._plan.fingerprint(until))
        return out

    def state_dict(self) -> Dict[str, Any]:
        """The position after the batches the loop received; taken between steps."""
        if self.single_pass:
            raise RuntimeError(f"state_dict(): an evaluation stream (subset '{self.subset}') "
                               "has no position to save; each iteration is a whole pass from "
                               "its start")
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
