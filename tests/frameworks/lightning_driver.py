"""PyTorch Lightning, for real: Trainer(strategy="ddp", devices=2, accelerator="cpu") (gloo) over
distsampler's sampler and stateful DataLoader, checkpointed mid-epoch and resumed.

    lightning_driver.py [PYTHON]

runs, with PYTHON (default: this interpreter) and the distsampler package on PYTHONPATH, for
each case ("sampler": DataLoader(sampler=distsampler.torch.DistributedSampler); "batch_sampler":
DataLoader(batch_sampler=distsampler.policies.DistributedBatchSampler) with
Trainer(use_distributed_sampler=False)) two Lightning runs of 2 processes each (Lightning launches
the second process itself by running this script again):

1. 2 epochs, a ModelCheckpoint every STEP training steps (mid-epoch 1), stopped at max_steps =
   STEP + 2;
2. the same Trainer resumed with fit(ckpt_path=) from that checkpoint.

Each rank records the dataset indices every training step received. Checked: Lightning kept the
loader and the sampler (no DistributedSampler of its own), called set_epoch at each epoch start;
the checkpoint holds the loader's state_dict() (loops.fit_loop.state_dict.combined_loader) at
STEP's batch; run 1's steps before STEP then run 2's steps are, rank by rank and epoch by epoch,
PyTorch's DistributedSampler share for the seed (the drop-in), or the batch sampler's own share
(batch_sampler), and each epoch reads every index once (PyTorch's padding aside); the two steps
run 1 read after the checkpoint are the first two that run 2 reads. Exit status 0 when all hold.

    lightning_driver.py --worker CASE MODE OUT [CKPT]

is one Lightning run (internal; MODE first or resume), recording into OUT.
"""
import glob
import json
import math
import os
import sys

from shares import (check_exactly_once, check_torch_shares, driver_main, joined, load,
                    run_session)

N, BATCH, SEED, EPOCHS, WORLD = 45, 4, 7, 2, 2
STEPS_PER_EPOCH = math.ceil(math.ceil(N / WORLD) / BATCH)  # 23 indices a rank: 6 batches
STEP = STEPS_PER_EPOCH + 2                         # the checkpoint: epoch 1, after 2 batches


def worker(case, mode, out, path=None):
    import torch
    import lightning
    from lightning.pytorch.callbacks import ModelCheckpoint
    from distsampler.data import DataLoader
    from distsampler.policies import DistributedBatchSampler
    from distsampler.torch import DistributedSampler

    class Indices(torch.utils.data.Dataset):
        def __len__(self):
            return N

        def __getitem__(self, index):
            return torch.tensor([float(index)])

    dataset = Indices()

    # README "Frameworks" shows these lines (seed SEED, batch size BATCH).
    class Model(lightning.LightningModule):
        def train_dataloader(self):
            sampler = DistributedSampler(dataset, seed=7)
            return DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                              persistent_workers=True)

        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def record(self, **entry):
            with open(os.path.join(out, f"{mode}_rank{self.global_rank}.jsonl"), "a") as f:
                f.write(json.dumps(entry) + "\n")

        def used_sampler(self):
            loader = self.trainer.train_dataloader
            return loader.sampler if case == "sampler" else loader.batch_sampler

        def on_train_start(self):
            # Ours, not a torch DistributedSampler or BatchSampler that Lightning put in.
            self.record(kind="start", loader=type(self.trainer.train_dataloader).__module__,
                        sampler=type(self.used_sampler()).__module__)

        def on_train_epoch_start(self):
            # Lightning's set_epoch call precedes this hook (a pass without one would start on
            # the previous epoch's number: auto_epoch advances at the pass's first batch).
            self.record(kind="epoch", epoch=self.current_epoch,
                        sampler_epoch=self.used_sampler().epoch)

        def training_step(self, batch, batch_idx):
            self.record(epoch=self.current_epoch, step=self.global_step,
                        indices=[int(i) for i in batch.view(-1)])
            return self.layer(batch / N).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class BatchModel(Model):
        def train_dataloader(self):
            batch_sampler = DistributedBatchSampler(dataset, batch_size=4, seed=7)
            return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=2,
                              persistent_workers=True)

    stop = dict(max_steps=STEP + 2) if mode == "first" else {}  # run 1 stops 2 steps after STEP
    checkpoint = ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), filename="{step}",
                                 every_n_train_steps=STEP, save_on_train_epoch_end=False,
                                 save_top_k=-1)
    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False,
                 num_sanity_val_steps=0, limit_val_batches=0, max_epochs=EPOCHS, **stop)
    if case == "sampler":
        trainer = lightning.Trainer(strategy="ddp", devices=2, accelerator="cpu",
                                    callbacks=[checkpoint], **quiet)
        trainer.fit(Model(), ckpt_path=path)
    else:
        trainer = lightning.Trainer(strategy="ddp", devices=2, accelerator="cpu",
                                    use_distributed_sampler=False, callbacks=[checkpoint],
                                    **quiet)
        trainer.fit(BatchModel(), ckpt_path=path)


def check(python, out, case):
    import torch
    problems = []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    me = os.path.abspath(__file__)
    ckpts = []
    for mode in ("first", "resume"):
        command = [python, me, "--worker", case, mode, out] + ckpts[:1]
        status, output = run_session(command, env)
        if status != 0:
            return [f"{mode} run: exit status {status}:\n{output[-4000:]}"]
        ckpts = sorted(glob.glob(os.path.join(out, "ckpt", "*.ckpt")))
        if mode == "first" and [os.path.basename(c) for c in ckpts] != [f"step={STEP}.ckpt"]:
            return [f"first run left checkpoints {ckpts}, not step={STEP}.ckpt"]
    first, first_entries = load(out, "first", WORLD)
    second, second_entries = load(out, "resume", WORLD)

    for entry in first_entries + second_entries:
        if entry["kind"] == "start" and not all(entry[key].startswith("distsampler.")
                                                for key in ("loader", "sampler")):
            problems.append(f"rank {entry['rank']}: Lightning replaced the loader or sampler: "
                            f"{entry}")
        # set_epoch: by each epoch's start, Lightning has called it with that epoch.
        if entry["kind"] == "epoch" and entry["sampler_epoch"] != entry["epoch"]:
            problems.append(f"rank {entry['rank']}: epoch {entry['epoch']} started with the "
                            f"sampler at epoch {entry['sampler_epoch']}: no set_epoch call")

    # The checkpoint holds the loader's state at STEP's batch.
    state = torch.load(ckpts[0], map_location="cpu", weights_only=False)
    loader_states = state["loops"]["fit_loop"]["state_dict"].get("combined_loader")
    want_batches = STEP - STEPS_PER_EPOCH
    if (not loader_states or loader_states[0].get("batches") != want_batches
            or "sampler" not in loader_states[0]):
        problems.append(f"the checkpoint's combined_loader is {loader_states!r:.300}, not the "
                        f"DataLoader's state after {want_batches} batches of epoch 1")

    # Run 1 before the checkpoint, then run 2: each epoch exactly once, in the expected order.
    read, more = joined(first, second, STEP)
    problems += more
    # The batch sampler deals whole batches: 12 batches of which the last has 1 index, 6 a rank.
    problems += check_exactly_once(N, WORLD, EPOCHS, read, total=None if case == "sampler" else N)
    if case == "sampler":
        problems += check_torch_shares(N, WORLD, SEED, EPOCHS, read)
    else:
        from distsampler.policies import DistributedBatchSampler
        for epoch in range(EPOCHS):
            for rank in range(WORLD):
                own = DistributedBatchSampler(range(N), BATCH, num_replicas=WORLD, rank=rank,
                                              seed=SEED)
                own.set_epoch(epoch)
                want = [i for batch in own for i in batch]
                if read.get((epoch, rank)) != want:
                    problems.append(f"epoch {epoch} rank {rank}: read {read.get((epoch, rank))}"
                                    f", the batch sampler's share is {want}")
    return problems


def main():
    if sys.argv[1:2] == ["--worker"]:
        worker(*sys.argv[2:])
        return 0
    return driver_main("lightning", check, ("sampler", "batch_sampler"))

if __name__ == "__main__":
    sys.exit(main())
