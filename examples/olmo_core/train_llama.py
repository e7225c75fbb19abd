"""A tiny Llama-like OLMo-core Transformer (TransformerConfig.llama_like, no weights downloaded)
trained by OLMo-core's own Trainer on a token stream (distsampler.olmo_core.TokenStreamDataLoader),
under torchrun (gloo, CPU; OLMo-core's DDP when W > 1). Run again with the same --out, it resumes:
the Trainer loads the latest checkpoint of its save folder (load_strategy if_available), on
whatever number of ranks torchrun starts; with none there, --load-path's (a checkpoint moved from
elsewhere).

Each rank appends "step sequence sha256" lines to OUT/tokens.a<attempt>.rank<rank>.tsv as the
Trainer takes each batch (the hash of the row's input_ids and labels); --kill-rank/--kill-step
make that rank SIGKILL itself on taking that step's batch; --kill-in-save STEP makes rank 0
SIGKILL itself inside the save of step STEP's checkpoint (written to stepSTEP-tmp, not yet renamed
stepSTEP). --no-stream-state is the broken
variant the check must catch: the stream's state left out of the Trainer's checkpoints, so that
the Trainer's own resume (model, optimizer, global step, batches_processed) takes over. Rank 0
appends "step learning-rate" lines to OUT/lr.a<attempt>.tsv after each step and writes
OUT/done-<attempt>.json (the Trainer's global step) at the end.
"""
import argparse
import hashlib
import json
import os
import signal

import torch
from olmo_core.distributed.parallel import DataParallelType
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.optim import AdamWConfig, CosWithWarmup
from olmo_core.train import (Duration, LoadStrategy, TrainerConfig,
                             prepare_training_environment, teardown_training_environment)
from olmo_core.train.callbacks import Callback, CheckpointerCallback
from olmo_core.train.checkpoint import Checkpointer
from olmo_core.train.train_module import (TransformerDataParallelConfig,
                                          TransformerTrainModuleConfig)

from distsampler.olmo_core import TokenStreamDataLoader, olmo_batch
from distsampler.tokens import TokenStream


class LearningRates(Callback):
    """Rank 0 records the learning rate the step was taken with (the Trainer's own schedule)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def post_step(self) -> None:
        if torch.distributed.get_rank() == 0:
            with open(self.path, "a") as f:
                lr = self.trainer.train_module.optim.param_groups[0]["lr"]
                f.write(f"{self.trainer.global_step} {float(lr)!r}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--save-steps", type=int, default=4)
    p.add_argument("--global-batch", type=int, default=12)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--attempt", type=int, default=0)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--load-path", help="a checkpoint to start from when --out holds none (one "
                   "moved from another machine: the Trainer's load_path)")
    p.add_argument("--kill-in-save", type=int, default=-1,
                   help="rank 0 SIGKILLs itself inside the save of this step's checkpoint")
    p.add_argument("--no-stream-state", action="store_true")
    a = p.parse_args()
    prepare_training_environment(seed=0, backend="gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    corpus = json.load(open(os.path.join(a.data, "corpus.json")))
    weights = {"python": 0.5, "copyright": 0.3, "fortunes": 0.2}
    sources = [([os.path.join(a.data, x) for x in s["prefixes"]], weights[s["name"]])
               for s in corpus["sources"]]
    stream = TokenStream(sources, seq_len=a.seq_len, global_batch=a.global_batch, seed=0)
    os.makedirs(a.out, exist_ok=True)
    ledger = open(os.path.join(a.out, f"tokens.a{a.attempt}.rank{rank}.tsv"), "a")

    def log(batch):
        if batch["step"] == a.kill_step and rank == a.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        fields = olmo_batch(batch)
        for i, k in enumerate(batch["sequence"].tolist()):
            digest = hashlib.sha256(b"".join(fields[key][i].to(torch.int64).numpy().tobytes()
                                             for key in ("input_ids", "labels"))).hexdigest()
            ledger.write(f"{batch['step']} {k} {digest}\n")
        ledger.flush()

    if a.kill_in_save >= 0 and rank == 0:  # every file written to stepN-tmp, not yet renamed
        teardown = Checkpointer._teardown_tmp_dir

        def killed_in_save(self, dir, tmp_dir):
            if os.path.basename(str(dir).rstrip("/")) == f"step{a.kill_in_save}":
                os.kill(os.getpid(), signal.SIGKILL)
            return teardown(self, dir, tmp_dir)
        Checkpointer._teardown_tmp_dir = killed_in_save
    if a.no_stream_state:  # broken on purpose: the Trainer's checkpoints without the stream
        TokenStreamDataLoader.state_dict = lambda self: {"batches_processed": 0}
        TokenStreamDataLoader.load_state_dict = lambda self, state: None
    data_loader = TokenStreamDataLoader(stream, work_dir=os.path.join(a.out, "work"),
                                        num_workers=2, batch_log=log)
    model = TransformerConfig.llama_like(d_model=32, vocab_size=corpus["vocab_size"], n_layers=2,
                                         n_heads=4, hidden_size_multiple_of=64).build(
                                             init_device="cpu")
    train_module = TransformerTrainModuleConfig(
        rank_microbatch_size=a.micro_batch * a.seq_len, max_sequence_length=a.seq_len,
        optim=AdamWConfig(lr=3e-3, weight_decay=0.0), scheduler=CosWithWarmup(warmup=2),
        max_grad_norm=1.0,
        dp_config=TransformerDataParallelConfig(name=DataParallelType.ddp) if world > 1 else None,
    ).build(model, device=torch.device("cpu"))
    trainer = TrainerConfig(
        save_folder=a.out, work_dir=os.path.join(a.out, "work"), device="cpu",
        load_strategy=LoadStrategy.if_available, load_path=a.load_path,
        max_duration=Duration.steps(a.steps),
        metrics_collect_interval=1, cancel_check_interval=1, save_overwrite=True,
    ).with_callback("checkpointer", CheckpointerCallback(save_interval=a.save_steps,
                                                         save_async=False)
    ).with_callback("learning_rates", LearningRates(os.path.join(a.out, f"lr.a{a.attempt}.tsv"))
    ).build(train_module, data_loader)
    trainer.fit()
    if rank == 0:
        with open(os.path.join(a.out, f"done-{a.attempt}.json"), "w") as f:
            json.dump({"global_step": trainer.global_step}, f)
    teardown_training_environment()


if __name__ == "__main__":
    main()
