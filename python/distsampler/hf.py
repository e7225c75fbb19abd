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
import re
import warnings
from typing import Any, Dict, Iterator, List, Optional, Union

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ._labels import masked_labels
from .tokens import TokenStream

__all__ = ["TokenStreamTrainer", "STATE_NAME", "complete_checkpoints", "trainer_batch"]

STATE_NAME = "distsampler_stream.json"
_CHECKPOINT = re.compile(re.escape(PREFIX_CHECKPOINT_DIR) + r"-(\d+)")


def trainer_batch(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A TokenStream batch as a causal LM's Trainer inputs."""
    shift = masked_labels(batch)
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
    """The check that the stream and the Trainer resumed to the same step."""

    def __init__(self, stream: TokenStream) -> None:
        self.stream = stream

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step != 0 and state.global_step != self.stream.step:
            raise ValueError(f"resume: the stream stands at step {self.stream.step} but the "
                             f"Trainer at step {state.global_step}; resume with "
                             "TokenStreamTrainer.train(resume_from_checkpoint=...), which "
                             "restores both from the checkpoint")


def complete_checkpoints(output_dir: str) -> List[str]:
    """The Trainer's checkpoints in ``output_dir`` that a resume can take, oldest first: those
    holding the stream's state and the Trainer's ``trainer_state.json``, which the Trainer writes
    last (a save killed before it leaves a checkpoint that is not listed here)."""
    found = []
    for name in os.listdir(output_dir) if os.path.isdir(output_dir) else ():
        m = _CHECKPOINT.fullmatch(name)
        folder = os.path.join(output_dir, name)
        if m and all(os.path.isfile(os.path.join(folder, f)) for f in (STATE_NAME,
                                                                        TRAINER_STATE_NAME)):
            found.append((int(m.group(1)), folder))
    return [folder for _, folder in sorted(found)]


class TokenStreamTrainer(Trainer):  # type: ignore[misc]
    """``Trainer(..., train_dataset=...)`` with ``train_stream=TokenStream(...)`` instead.

    Requires, and refuses otherwise with one line: ``max_steps`` (the stream is endless);
    ``per_device_train_batch_size`` times ``gradient_accumulation_steps`` times the world size
    equal to the stream's ``global_batch``, ``per_device_train_batch_size`` its ``micro_batch``.
    Sets ``ignore_data_skip=True``: the stream's state replaces the Trainer's fast-forward.
    ``batch_log`` (a callable) sees each of this rank's stream batches as the Trainer takes it.
    Each checkpoint holds the stream's state (``STATE_NAME``), written before the Trainer's
    files; :meth:`train` restores it from the checkpoint it resumes from.
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
                != train_stream.global_batch):
            raise ValueError(
                f"TokenStreamTrainer: per_device_train_batch_size = "
                f"{a.per_device_train_batch_size}, gradient_accumulation_steps = "
                f"{a.gradient_accumulation_steps} on {world} ranks; the stream's micro_batch is "
                f"{train_stream.micro_batch} and its global_batch "
                f"{train_stream.global_batch} = micro_batch x accumulation x world size")
        a.ignore_data_skip = True
        self.train_stream, self.batch_log = train_stream, batch_log
        self.add_callback(_StreamState(train_stream))

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        # The stream's state first, atomically (temp + rename), so that every checkpoint holding
        # the Trainer's state (written last) holds it too: a save killed before that is not
        # taken by train(resume_from_checkpoint=True) (complete_checkpoints).
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, STATE_NAME + ".tmp")
            with open(tmp, "w") as f:
                json.dump(self.train_stream.state_dict(), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(folder, STATE_NAME))
        super()._save_checkpoint(model, trial)

    def _resume_from(self, checkpoint: Union[str, bool, None]) -> Optional[str]:
        """The checkpoint a resume loads (True: the newest complete one in output_dir), its
        stream state loaded."""
        if checkpoint is None or checkpoint is False:
            return None
        if checkpoint is True:
            out = self.args.output_dir
            complete = complete_checkpoints(out)
            if not complete:
                raise ValueError(f"resume_from_checkpoint=True: no checkpoint in {out} holds "
                                 f"both {STATE_NAME} and {TRAINER_STATE_NAME}")
            newest = max((int(m.group(1)) for m in map(_CHECKPOINT.fullmatch, os.listdir(out))
                          if m), default=-1)
            checkpoint = complete[-1]
            if newest > int(_CHECKPOINT.fullmatch(os.path.basename(checkpoint)).group(1)):
                warnings.warn(f"resume: {PREFIX_CHECKPOINT_DIR}-{newest} in {out} is incomplete "
                              f"(a save interrupted); resuming from {checkpoint}")
        path = os.path.join(checkpoint, STATE_NAME)
        if not os.path.isfile(path):
            raise ValueError(f"resume from {checkpoint}: {path} is missing; the checkpoint was "
                             "not written by TokenStreamTrainer (or its save was interrupted), "
                             "and the Trainer would fast-forward the stream instead")
        with open(path) as f:
            self.train_stream.load_state_dict(json.load(f))
        return checkpoint

    def get_train_dataloader(self) -> Any:
        self._batches = _Batches(self.train_stream, self.args.dataloader_num_workers,
                                 self.batch_log)
        return self._batches

    def train(self, resume_from_checkpoint: Union[str, bool, None] = None, *args: Any,
              **kwargs: Any) -> Any:
        """The Trainer's train(); ``resume_from_checkpoint`` a checkpoint folder (anywhere: a copy
        moved from another machine too) or True (the newest complete checkpoint in output_dir),
        whose stream state is restored with the Trainer's."""
        checkpoint = self._resume_from(resume_from_checkpoint)
        try:
            return super().train(checkpoint, *args, **kwargs)
        finally:
            if getattr(self, "_batches", None) is not None:
                self._batches.close()
