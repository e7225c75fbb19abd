"""A token stream as LitGPT's pretraining data (docs/frameworks.md, "LitGPT"): a ``DataModule``
that ``litgpt.pretrain.setup(data=...)`` takes, whose train loader Lightning Fabric saves in every
LitGPT checkpoint (``step-N/lit_model.pth``, under ``train_dataloader``) and restores on
``resume=``, on any world size, in place of LitData's loader state.

LitGPT's pretraining loop takes each micro-batch as one LongTensor of rows of ``seq_len + 1``
tokens (inputs ``[:, :-1]``, targets ``[:, 1:]``) and has no loss mask, so the stream's rows are
given whole and the options that need a mask or padding are refused.
"""
import gc
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from litgpt.data import DataModule
from torch.utils.data import DataLoader

from .tokens import TokenStream

__all__ = ["TokenStreamData", "StreamLoader"]

# TokenStream options LitGPT's loop would silently ignore (it has no loss mask) or train on
# (padding): refused with the reason.
_REFUSED = {"mask_cross_document": "LitGPT's loss has no mask",
            "eod_mask_loss": "LitGPT's loss has no mask",
            "micro_batch": "LitGPT sets it (train.micro_batch_size)",
            "seq_len": "LitGPT sets it (the model's max_seq_length)",
            "rank": "LitGPT's Fabric sets it", "world_size": "LitGPT's Fabric sets it"}


class StreamLoader(DataLoader):  # type: ignore[type-arg]
    """This rank's micro-batches of a TokenStream as LitGPT takes them (LongTensor [micro_batch,
    seq_len + 1]), with ``state_dict``/``load_state_dict``, which Fabric's save and load call:
    the stream's position, and LitGPT's gradient accumulation, which a resume must keep (LitGPT
    counts its schedule in micro-batches per device, ``iter_num``)."""

    def __init__(self, stream: TokenStream, accumulation: int, num_workers: int = 0,
                 batch_log: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        super().__init__(stream, batch_size=None, num_workers=num_workers)
        self.stream, self.accumulation, self.batch_log = stream, accumulation, batch_log
        self._taken = 0  # micro-batches of the current iteration handed out
        self._step_start: Optional[Dict[str, Any]] = None  # the stream at their step's start

    def __iter__(self) -> Iterator[torch.Tensor]:  # type: ignore[override]
        stream = self.stream
        if stream.single_pass:  # validation: each pass from its start, no position kept
            for batch in stream.loader(num_workers=self.num_workers):
                yield torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
            return
        per_step = self._per_step()
        batches, self._taken = stream.loader(num_workers=self.num_workers), 0
        while True:
            if self._taken % per_step == 0:
                self._step_start = stream.state_dict()  # the position before this step
            try:
                batch = next(batches)
            except StopIteration:
                return
            self._taken += 1
            if self.batch_log is not None:
                self.batch_log(batch)
            try:
                yield torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
            except GeneratorExit:
                # LitGPT's loop pulls one more micro-batch before its `iter_num >= max_iters`
                # break, then drops the iterator and saves final/: the batch in hand was never
                # trained, nor the rest of its step, so the stream goes back to that step's start.
                batches.close()
                stream.load_state_dict(self._step_start)
                self._taken = 0
                raise

    def _per_step(self) -> int:
        """Micro-batches a step: the stream's batches of one optimizer step on this rank."""
        s = self.stream
        return s.global_batch // (s.world_size * s.micro_batch)

    def state_dict(self) -> Dict[str, Any]:
        """The stream at the steps LitGPT trained. LitGPT saves only between optimizer steps, but
        the final save follows one more micro-batch pulled and dropped with its iterator (which
        a traceback jsonargparse keeps may hold in a reference cycle: collected here first, so
        that it gives the batch back); a save inside a step is that step's start."""
        gc.collect()
        inside = self._taken % self._per_step() != 0
        return {"stream": self._step_start if inside else self.stream.state_dict(),
                "gradient_accumulation_iters": self.accumulation}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        if "stream" not in state_dict:
            raise ValueError("StreamLoader: the checkpoint's train_dataloader state has no "
                             f"'stream' (written by another data loader: {sorted(state_dict)}); "
                             "it would restart the stream")
        saved = state_dict.get("gradient_accumulation_iters")
        if saved != self.accumulation:
            raise ValueError(
                f"resume: the checkpoint's gradient_accumulation_iters is {saved}, this run's "
                f"{self.accumulation} (global_batch_size / (devices x micro_batch_size)); "
                "LitGPT's iter_num counts micro-batches per device, so its learning-rate schedule "
                "and accumulation continue only with the same accumulation: scale "
                "micro_batch_size with the number of devices")
        self.stream.load_state_dict(state_dict["stream"])
        self._taken = 0


@dataclass
class TokenStreamData(DataModule):  # type: ignore[misc]
    """``sources``: (prefix or list of shard prefixes, token weight) per source, as TokenStream
    takes them; ``global_batch_size``: LitGPT's ``train.global_batch_size`` (sequences per
    optimizer step, every device's together); ``split``: (train, validation, test) fractions, the
    validation loader reading the validation split (without it, every document of the sources);
    ``val_steps``: a cap on the validation pass; ``options``: any other TokenStream keyword (seed,
    changes, appends, skips, append_eod, eod_token, ...). ``batch_log`` sees each of this rank's
    stream batches as LitGPT takes it."""

    sources: Sequence[Tuple[Union[str, List[str]], float]]
    global_batch_size: int
    seed: int = 0
    num_workers: int = 0
    split: Optional[Tuple[float, float, float]] = None
    val_steps: Optional[int] = None
    options: Dict[str, Any] = field(default_factory=dict)
    batch_log: Optional[Callable[[Dict[str, Any]], None]] = None

    def __post_init__(self) -> None:
        super().__init__()
        for key, why in _REFUSED.items():
            if key in self.options:
                raise ValueError(f"TokenStreamData: options[{key!r}]: {why}")
        packing = self.options.get("packing", "concat")
        if packing != "concat":
            raise ValueError(f"TokenStreamData: packing = {packing!r}; LitGPT's loop trains on "
                             "every token of a row and has no loss mask for padding: 'concat'")
        self.stream: Optional[TokenStream] = None

    def connect(self, tokenizer: Any = None, batch_size: int = 1,
                max_seq_length: Optional[int] = None, **kwargs: Any) -> None:
        if max_seq_length is None or max_seq_length <= 0:
            raise ValueError(f"TokenStreamData: max_seq_length = {max_seq_length}; the model's "
                             "(or train.max_seq_length), the tokens per input row")
        self.micro_batch_size, self.max_seq_length = batch_size, max_seq_length

    def setup(self, stage: str = "") -> None:
        self.stream = TokenStream(self.sources, seq_len=self.max_seq_length,
                                  global_batch=self.global_batch_size, seed=self.seed,
                                  micro_batch=self.micro_batch_size, split=self.split,
                                  **self.options)

    def _stream(self) -> TokenStream:
        if self.stream is None:
            raise RuntimeError("TokenStreamData: connect() and setup() first (LitGPT's "
                               "pretrain does)")
        return self.stream

    def train_dataloader(self) -> StreamLoader:
        stream = self._stream()
        accumulation = self.global_batch_size // (stream.world_size * stream.micro_batch)
        return StreamLoader(stream, accumulation, self.num_workers, self.batch_log)

    def val_dataloader(self) -> StreamLoader:
        return StreamLoader(self._stream().validation(steps=self.val_steps), 0, self.num_workers)
