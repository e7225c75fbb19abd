"""A tiny Llama (a config, no weights downloaded) pretrained by Hugging Face's Trainer on a token
stream (distsampler.hf.TokenStreamTrainer), under torchrun (gloo, CPU); --resume continues from the
Trainer's last complete checkpoint on whatever number of ranks torchrun starts, --resume-from
DIR from a checkpoint folder wherever it lies (one copied from another machine).

Each rank appends "step sequence sha256" lines to OUT/tokens.a<attempt>.rank<rank>.tsv as the
Trainer takes each batch (the hash of the row's input_ids, shift_labels and position_ids);
--kill-rank/--kill-step make that rank SIGKILL itself on taking that step's first batch;
--kill-in-save STEP makes rank 0 SIGKILL itself inside the save of step STEP's checkpoint (its
model and optimizer written, the Trainer's state not).
--no-stream-state is the broken variant the check must catch: the stream's state left out of the
Trainer's checkpoints, so that the Trainer's own resume (model, optimizer, scheduler and step
restored; the data not fast-forwarded, as ignore_data_skip=True says) takes over.
Rank 0 writes OUT/done-<attempt>.json at the end: the global step, and the learning rate and loss
of every step the Trainer's log history holds (its checkpoint's included).
"""
import argparse
import hashlib
import json
import os
import signal

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

from distsampler.hf import TokenStreamTrainer, trainer_batch
from distsampler.tokens import TokenStream


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
    p.add_argument("--resume", action="store_true")
    p.add_argument("--resume-from", help="a checkpoint folder to resume from, wherever it lies")
    p.add_argument("--kill-in-save", type=int, default=-1,
                   help="rank 0 SIGKILLs itself inside the save of this step's checkpoint")
    p.add_argument("--no-stream-state", action="store_true")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    corpus = json.load(open(os.path.join(a.data, "corpus.json")))
    weights = {"python": 0.5, "copyright": 0.3, "fortunes": 0.2}
    sources = [([os.path.join(a.data, x) for x in s["prefixes"]], weights[s["name"]])
               for s in corpus["sources"]]
    stream = TokenStream(sources, seq_len=a.seq_len, global_batch=a.global_batch, seed=0,
                         micro_batch=a.micro_batch)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=corpus["vocab_size"], hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=a.seq_len, tie_word_embeddings=True))
    args = TrainingArguments(
        output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=a.micro_batch,
        gradient_accumulation_steps=a.global_batch // (a.micro_batch * world),
        learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=2, save_steps=a.save_steps,
        logging_steps=1, report_to=[], dataloader_num_workers=2, use_cpu=True, seed=0,
        ddp_backend="gloo", disable_tqdm=True)
    os.makedirs(a.out, exist_ok=True)
    ledger = open(os.path.join(a.out, f"tokens.a{a.attempt}.rank{rank}.tsv"), "a")

    def log(batch):
        if batch["step"] == a.kill_step and rank == a.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        fields = trainer_batch(batch)
        for i, k in enumerate(batch["sequence"].tolist()):
            digest = hashlib.sha256(b"".join(fields[key][i].to(torch.int64).numpy().tobytes()
                                             for key in ("input_ids", "shift_labels",
                                                         "position_ids"))).hexdigest()
            ledger.write(f"{batch['step']} {k} {digest}\n")
        ledger.flush()

    trainer = TokenStreamTrainer(model=model, args=args, train_stream=stream, batch_log=log)
    if a.kill_in_save >= 0 and rank == 0:  # after the model and optimizer, before trainer_state
        save_rng = trainer._save_rng_state

        def killed_in_save(output_dir):
            if trainer.state.global_step == a.kill_in_save:
                os.kill(os.getpid(), signal.SIGKILL)
            save_rng(output_dir)
        trainer._save_rng_state = killed_in_save
    if a.no_stream_state:  # broken on purpose: the Trainer's own resume takes the stream over
        from distsampler import hf
        trainer.remove_callback(hf._StreamState)  # the same checkpoint, its stream state unread
        trainer._resume_from = lambda c: hf.complete_checkpoints(a.out)[-1] if c is True else c
    trainer.train(resume_from_checkpoint=a.resume_from or a.resume)
    if rank == 0:
        with open(os.path.join(a.out, f"done-{a.attempt}.json"), "w") as f:
            json.dump({"global_step": trainer.state.global_step,
                       "lr": {h["step"]: h["learning_rate"] for h in trainer.state.log_history
                              if "learning_rate" in h},
                       "loss": {h["step"]: h["loss"] for h in trainer.state.log_history
                                if "loss" in h}}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
