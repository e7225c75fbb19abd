"""A token stream in Hugging Face Transformers' ``Trainer`` (docs/frameworks.md, "Hugging Face
Trainer"): each rank reads its own share of every step from the stream (the Trainer's accelerator
neither dispatches nor re-shards it), the stream's state is saved in every Trainer checkpoint
(``checkpoint-N/distsampler_stream.json``) and restored by the Trainer's own
``train(resume_from_checkpoint=...)`` on any world size, instead of the Trainer's fast-forward
(``ignore_data_skip``).

Batches follow the Trainer's padding-free convention: ``input_ids`` and ``position_ids`` (0 at
every document start), and ``shift_labels`` (the next tokens, -100 where the stream's loss mask is
0), which the Trainer and the models' causal-LM loss take as already shifted.
"""
import json
import os
from typing import Any, Dict, Iterator, List, Optional

import torch
from transformers import Trainer, TrainerCallback

from .tokens import TokenStream

__all__ = ["TokenStreamTrainer", "STATE_NAME", "trainer_batch"]

STATE_NAME = "distsampler_stream.json"


def trainer_batch(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A TokenStream batch as a causal LM's Trainer inputs."""
    shift = batch["labels"].masked_fill(batch["loss_mask"] == 0, -100)
    return {"input_ids": batch["tokens"], "position_ids": batch["position_ids"],
            "labels": shift, "shift_labels": shift}


class _Batches:
    """The stream's loader, as the Trainer iterates it (a fresh loader per pass). The Trainer
    stops at max_steps without ending the (endless) pass; close() ends it, so that its DataLoader
    workers are shut down by the process that started them, not orphaned at its exit."""

    def __init__(self, stream: TokenStream, workers: int, log: Optional[Any]) -> None:
        self.stream, self.workers, self.log = stream, workers, log
        self._passes: List[Any] = []

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        batches = self.stream.loader(num_workers=self.workers)
        self._passes.append(batches)
        for batch in batches:
            if self.log is not None:
                self.log(batch)
            yield trainer_batch(batch)

    def close(self) -> None:
        for batches in self._passes:
            batches.close()
        self._passes.clear()


class _StreamState(TrainerCallback):  # type: ignore[misc]
    def __init__(self, stream: TokenStream) -> None:
        self.stream = stream

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 0:
            return
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}", STATE_NAME)
        if not os.path.exists(path):
            raise ValueError(f"resume from step {state.global_step}: {path} is missing; the "
                             "checkpoint was not written by TokenStreamTrainer, and the Trainer "
                             "would fast-forward the stream instead")
        with open(path) as f:
            self.stream.load_state_dict(json.load(f))
        if self.stream.step != state.global_step:
            raise ValueError(f"{path}: the stream stands at step {self.stream.step} but the "
                             f"Trainer at step {state.global_step}")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, STATE_NAME + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self.stream.state_dict(), f)
        os.replace(tmp, os.path.join(folder, STATE_NAME))


class TokenStreamTrainer(Trainer):  # type: ignore[misc]
    """``Trainer(..., train_dataset=...)`` with ``train_stream=TokenStream(...)`` instead.

    Requires, and refuses otherwise with one line: ``max_steps`` (the stream is endless);
    ``per_device_train_batch_size`` times ``gradient_accumulation_steps`` times the world size
    equal to the stream's ``global_batch``, ``per_device_train_batch_size`` its ``micro_batch``.
    Sets ``ignore_data_skip=True``: the stream's state replaces the Trainer's fast-forward.
    ``batch_log`` (a callable) sees each of this rank's stream batches as the Trainer takes it.
    """

    def __init__(self, *args: Any, train_stream: TokenStream,
                 batch_log: Optional[Any] = None, **kwargs: Any) -> None:
        if "train_dataset" in kwargs:
            raise ValueError("TokenStreamTrainer: give train_stream, not train_dataset")
        super().__init__(*args, **kwargs)
        a = self.args
        if a.max_steps is None or a.max_steps <= 0:
            raise ValueError("TokenStreamTrainer: set max_steps (the token stream is endless)")
        world = a.world_size
        if train_stream.world_size != world:
            raise ValueError(f"TokenStreamTrainer: the stream has world_size "
                             f"{train_stream.world_size}, the Trainer {world}")
        if a.per_device_train_batch_size != train_stream.micro_batch or (
                a.per_device_train_batch_size * a.gradient_accumulation_steps * world
                != train_stream._args["global_batch"]):
            raise ValueError(
                f"TokenStreamTrainer: per_device_train_batch_size = "
                f"{a.per_device_train_batch_size}, gradient_accumulation_steps = "
                f"{a.gradient_accumulation_steps} on {world} ranks; the stream's micro_batch is "
                f"{train_stream.micro_batch} and its global_batch "
                f"{train_stream._args['global_batch']} = micro_batch x accumulation x world size")
        a.ignore_data_skip = True
        self.train_stream, self.batch_log = train_stream, batch_log
        self.add_callback(_StreamState(train_stream))

    def get_train_dataloader(self) -> Any:
        self._batches = _Batches(self.train_stream, self.args.dataloader_num_workers,
                                 self.batch_log)
        return self._batches

    def train(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().train(*args, **kwargs)
        finally:
            if getattr(self, "_batches", None) is not None:
                self._batches.close()
