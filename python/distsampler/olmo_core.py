"""A token stream as OLMo-core's training data (docs/frameworks.md, "OLMo-core"): a data loader
that OLMo-core's ``Trainer`` takes (``TrainerConfig.build(train_module, data_loader)``), whose
state the Trainer saves in every checkpoint (``stepN/train/rank0.pt``, under ``data_loader``) and
restores when it loads one (``load_strategy``, the save folder's latest), on any data-parallel
world size, in place of OLMo-core's ``batches_processed`` fast-forward over its global index.

Batches follow OLMo-core's text convention: ``input_ids`` [rank batch, seq_len] and ``labels``
(the next tokens, -100 where the stream's loss mask is 0), which OLMo-core's train modules take as
already shifted; a rank's batch is its share of one optimizer step (OLMo-core's train module
splits it into micro-batches of ``rank_microbatch_size`` tokens).
"""
from typing import Any, Callable, Dict, Iterable, Optional

import torch
from olmo_core.data.collator import DataCollator
from olmo_core.data.data_loader import TextDataLoaderBase

from ._labels import masked_labels
from .tokens import TokenStream

__all__ = ["TokenStreamDataLoader", "olmo_batch"]


def olmo_batch(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A TokenStream batch as OLMo-core's train modules take it."""
    return {"input_ids": batch["tokens"],
            "labels": masked_labels(batch)}


class TokenStreamDataLoader(TextDataLoaderBase):  # type: ignore[misc]
    """This rank's batches of ``stream``, one per optimizer step (the stream's ``global_batch``
    sequences of ``seq_len`` tokens a step, so OLMo-core's ``global_batch_size`` is their tokens).

    ``work_dir``: OLMo-core's working directory (local, shared by a node's ranks); ``num_workers``:
    DataLoader workers reading the stream; ``batch_log`` sees each of this rank's stream batches
    as the Trainer takes it. The stream's world size and rank must be the Trainer's data-parallel
    ones (the Trainer refuses others), and its micro_batch this rank's whole share of a step."""

    def __init__(self, stream: TokenStream, *, work_dir: str, num_workers: int = 0,
                 batch_log: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        if stream.single_pass:
            raise ValueError(f"TokenStreamDataLoader: an evaluation stream (subset "
                             f"'{stream.subset}'); the Trainer trains on subset 'train'")
        global_batch, seq_len = stream.global_batch, stream.seq_len
        if stream.micro_batch * stream.world_size != global_batch:
            raise ValueError(
                f"TokenStreamDataLoader: the stream's micro_batch is {stream.micro_batch}, not "
                f"global_batch / world_size = {global_batch} / {stream.world_size}: OLMo-core "
                "takes a rank's whole share of a step and splits it itself "
                "(rank_microbatch_size)")
        super().__init__(collator=DataCollator(pad_token_id=stream.pad_token), work_dir=work_dir,
                         global_batch_size=global_batch * seq_len,
                         dp_world_size=stream.world_size, dp_rank=stream.rank)
        self.stream, self.num_workers, self.batch_log = stream, num_workers, batch_log
        self.seq_len = seq_len

    @property
    def global_batch_size(self) -> int:
        return int(self._global_batch_size)

    @global_batch_size.setter
    def global_batch_size(self, tokens: int) -> None:
        if tokens != self._global_batch_size:  # OLMo-core's batch size schedule sets it
            raise ValueError(
                f"TokenStreamDataLoader: global_batch_size = {tokens} tokens; the stream's plan "
                f"fixes it at {self._global_batch_size} (global_batch x seq_len), the unit its "
                "state and every world size's shares are counted in")
        self._global_batch_size = tokens

    @property
    def total_batches(self) -> Optional[int]:
        return None  # the stream is endless: the Trainer's max_duration ends the run

    def reshuffle(self, epoch: Optional[int] = None, **kwargs: Any) -> None:
        # The stream's order is its plan's (seed, source epochs); OLMo-core's epoch is a count.
        self._epoch = 1 if epoch is None else epoch

    def _iter_batches(self) -> Iterable[Dict[str, Any]]:
        for batch in self.stream.loader(num_workers=self.num_workers):
            if self.batch_log is not None:
                self.batch_log(batch)
            yield olmo_batch(batch)

    def state_dict(self) -> Dict[str, Any]:
        return {"stream": self.stream.state_dict(), "batches_processed": self.batches_processed,
                "tokens_processed": self.tokens_processed, "epoch": self._epoch}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        if "stream" not in state_dict:
            raise ValueError("TokenStreamDataLoader: the checkpoint's data loader state has no "
                             "'stream' (written by another data loader: "
                             f"{sorted(state_dict)}); it would restart the stream")
        self.stream.load_state_dict(state_dict["stream"])
        self.batches_processed = state_dict["batches_processed"]
        self.tokens_processed = state_dict["tokens_processed"]
        self._epoch = state_dict["epoch"]

    def get_mock_batch(self) -> Dict[str, Any]:
        rows = self.stream.micro_batch
        zeros = torch.zeros(rows, self.seq_len, dtype=torch.long)
        return {"input_ids": zeros, "labels": zeros.clone()}
