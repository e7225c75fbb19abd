"""Hugging Face Accelerate, for real: 2 processes under torchrun (gloo, CPU), Accelerator(cpu=True).

    accelerate_driver.py [PYTHON]

runs, with PYTHON (default: this interpreter) and the distsampler package on PYTHONPATH, two
launches of `PYTHON -m torch.distributed.run --nproc_per_node 2 accelerate_driver.py --worker
MODE OUT` (MODE first, then resume), each rank recording the dataset indices every step received,
and checks:

- "prepared": accelerator.prepare() of a distsampler DataLoader whose sampler is
  distsampler.torch.DistributedSampler (2 replicas) shards that rank's share again by batches
  (accelerate's BatchSamplerShard: it has no check for a distributed sampler): an epoch then
  misses samples. The hazard the README warns about, checked so that the warning stays true.
- "own_loader" (the recipe that keeps our loader): prepare(model, optimizer) only; our
  DataLoader over our DistributedSampler, registered with accelerator.register_for_checkpointing;
  accelerator.save_state mid-epoch 1 and, in the second launch, load_state: each rank reads
  PyTorch's DistributedSampler share every epoch, and run 1 before the checkpoint then run 2
  read every sample once per epoch.
- "global_sampler" and "global_sampler_stateful" (the recipe that lets Accelerate shard):
  DistributedSampler(dataset, num_replicas=1, rank=0) (one global order) and prepare(loader),
  without and with DataLoaderConfiguration(use_stateful_dataloader=True) (the stateful one saved
  by save_state mid-epoch 1 and resumed by load_state): the ranks' batches interleaved are
  PyTorch's global order for the seed and epoch, every sample read once per epoch across the
  ranks plus Accelerate's padding of the last round (even_batches: ceil(n / (B * W)) * B * W
  reads).

    accelerate_driver.py --worker MODE OUT

is one launch's rank (internal).
"""
import json
import math
import os
import sys

from shares import (check_exactly_once, check_torch_shares, driver_main, joined, load,
                    run_session, torch_share)

N, BATCH, SEED, EPOCHS, WORLD = 45, 4, 7, 2, 2
SHARE_STEPS = math.ceil(math.ceil(N / WORLD) / BATCH)   # 23 indices a rank: 6 batches
GLOBAL_STEPS = math.ceil(N / (BATCH * WORLD))            # 12 batches dealt: 6 a rank
STEP = SHARE_STEPS + 2  # the checkpoint: epoch 1 after 2 batches (both recipes: 6 steps an epoch)


def worker(mode, out):
    import torch
    import torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration
    from distsampler.data import DataLoader
    from distsampler.torch import DistributedSampler

    class Indices(torch.utils.data.Dataset):
        def __len__(self):
            return N

        def __getitem__(self, index):
            return torch.tensor([float(index)])

    class Progress:
        """The loop's epoch, saved by save_state (a global-sampler loader has no epoch)."""
        epoch = 0

        def state_dict(self):
            return {"epoch": self.epoch}

        def load_state_dict(self, state):
            self.epoch = state["epoch"]

    dataset = Indices()

    def train(scenario, accelerator, model, optimizer, loader, set_epoch, resumed_epoch=None):
        """Trains EPOCHS epochs recording each step's indices; with resumed_epoch (a function:
        the epoch to resume after load_state), saves the state at step STEP and stops 2 steps
        later (first), or resumes from it (resume)."""
        ckpt = os.path.join(out, f"ckpt_{scenario}")
        step, start = 0, 0
        if mode == "resume":
            accelerator.load_state(ckpt)
            step, start = STEP, resumed_epoch()
        name = f"{scenario}_{mode}_rank{accelerator.process_index}.jsonl"
        with open(os.path.join(out, name), "w") as log:
            for epoch in range(start, EPOCHS if scenario != "prepared" else 1):
                set_epoch(epoch)
                for batch in loader:
                    log.write(json.dumps({"epoch": epoch, "step": step,
                                          "indices": [int(i) for i in batch.view(-1)]}) + "\n")
                    loss = model(batch / N).pow(2).mean()
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                    step += 1
                    if mode == "first" and resumed_epoch and step == STEP:
                        accelerator.save_state(ckpt)
                    if mode == "first" and resumed_epoch and step == STEP + 2:
                        return

    def model_and_optimizer():
        model = torch.nn.Linear(1, 1)
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    if mode == "first":
        # prepare() over our 2-replica sampler: sharded again.
        accelerator = Accelerator(cpu=True)
        model, optimizer = model_and_optimizer()
        sampler = DistributedSampler(dataset, seed=7)
        loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                            persistent_workers=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        train("prepared", accelerator, model, optimizer, loader, loader.set_epoch)

        # Our sampler as one global order, Accelerate's (stateless) loader shards it.
        model, optimizer = model_and_optimizer()
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=7)
        loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                            persistent_workers=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        train("global_sampler", accelerator, model, optimizer, loader, loader.set_epoch)
        accelerator.wait_for_everyone()

    # README "Frameworks" shows the lines of the two recipes (seed SEED, batch size BATCH).
    # Our loader, checkpointed by save_state: prepare(model, optimizer) only.
    accelerator = Accelerator(cpu=True)
    model, optimizer = model_and_optimizer()
    model, optimizer = accelerator.prepare(model, optimizer)
    sampler = DistributedSampler(dataset, seed=7)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                        persistent_workers=True)
    accelerator.register_for_checkpointing(loader)
    train("own_loader", accelerator, model, optimizer, loader, loader.sampler.set_epoch,
          lambda: loader.sampler.epoch)
    accelerator.wait_for_everyone()

    # The global order, sharded by Accelerate's stateful loader, checkpointed by save_state.
    model, optimizer = model_and_optimizer()
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=7)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                        persistent_workers=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)

    def set_epoch(epoch):
        progress.epoch = epoch
        loader.set_epoch(epoch)
    train("global_sampler_stateful", accelerator, model, optimizer, loader, set_epoch,
          lambda: progress.epoch)
    accelerator.wait_for_everyone()
    dist.destroy_process_group()


def check_global_order(batches, epochs):
    """Problems unless the ranks' batches, interleaved (rank 0's first, rank 1's first, ...),
    are PyTorch's global order for each epoch followed by Accelerate's padding from its start."""
    problems = []
    for epoch in range(epochs):
        dealt = []
        for step in range(GLOBAL_STEPS):
            for rank in range(WORLD):
                dealt += batches[(epoch, rank)][BATCH * step:BATCH * (step + 1)]
        order = torch_share(N, 1, 0, SEED, epoch)
        want = order + order[:GLOBAL_STEPS * BATCH * WORLD - N]
        if dealt != want:
            problems.append(f"epoch {epoch}: the ranks' batches interleaved are {dealt}, not "
                            f"PyTorch's global order and Accelerate's padding {want}")
    return problems


def check(python, out):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for mode in ("first", "resume"):
        command = [python, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD),
                   "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
                   os.path.abspath(__file__), "--worker", mode, out]
        status, output = run_session(command, env)
        if status != 0:
            return [f"{mode} launch: exit status {status}:\n{output[-4000:]}"]
    problems = []
    padded = GLOBAL_STEPS * BATCH * WORLD

    # prepare() over our distributed sampler: each rank reads every other batch of its share.
    read, _ = joined(load(out, "prepared_first", WORLD)[0])
    union = set(read[(0, 0)]) | set(read[(0, 1)])
    if len(union) >= N:
        problems.append(f"prepare() over a 2-replica DistributedSampler read {len(union)} "
                        f"distinct samples of {N}: it no longer shards the share again")

    read, _ = joined(load(out, "global_sampler_first", WORLD)[0])
    problems += [f"global_sampler: {p}" for p in
                 check_exactly_once(N, WORLD, EPOCHS, read, total=padded)
                 + check_global_order(read, EPOCHS)]

    read, more = joined(load(out, "own_loader_first", WORLD)[0],
                        load(out, "own_loader_resume", WORLD)[0], STEP)
    problems += [f"own_loader: {p}" for p in more + check_exactly_once(N, WORLD, EPOCHS, read)
                 + check_torch_shares(N, WORLD, SEED, EPOCHS, read)]

    read, more = joined(load(out, "global_sampler_stateful_first", WORLD)[0],
                        load(out, "global_sampler_stateful_resume", WORLD)[0], STEP)
    problems += [f"global_sampler_stateful: {p}" for p in
                 more + check_exactly_once(N, WORLD, EPOCHS, read, total=padded)
                 + check_global_order(read, EPOCHS)]
    return problems


def main():
    if sys.argv[1:2] == ["--worker"]:
        worker(*sys.argv[2:])
        return 0
    return driver_main("accelerate", check)

if __name__ == "__main__":
    sys.exit(main())
