"""Ray Train, for real: ray.train.torch.TorchTrainer with ScalingConfig(num_workers=2,
use_gpu=False) on a local Ray cluster started here (gloo, CPU), over distsampler's sampler and
stateful DataLoader.

    ray_driver.py [PYTHON]

runs this script with PYTHON (default: this interpreter; the distsampler package on PYTHONPATH),
which starts a local cluster (ray.init(num_cpus=2), no dashboard), runs two fits and shuts the
cluster down. Each worker records the dataset indices every step received. Fit 1:

- "wrapped": ray.train.torch.prepare_data_loader(loader) over a distsampler DataLoader whose
  sampler is distsampler.torch.DistributedSampler: Ray keeps the sampler (its check for a
  DistributedSampler) but wraps the loader (move_to_device=True, the default), and the wrapper
  reads one batch ahead: after the loop received 2 batches, the loader's state_dict() counts 3.
  2 epochs, loader.sampler.set_epoch(epoch) each: every rank reads PyTorch's share.
- "own": prepare_data_loader(loader, move_to_device=False) returns the loader itself; 2 epochs,
  a checkpoint (the loader's state_dict(), rank 0's, through ray.train.report) after STEP steps,
  mid-epoch 1, and 2 steps more.

Fit 2 resumes "own" from that checkpoint (a fresh sampler and loader, load_state_dict): run 1's
steps before the checkpoint then run 2's are, rank by rank, PyTorch's DistributedSampler share of
each epoch, every sample once per epoch; run 1's 2 steps after it are run 2's first 2. Exit status
0 when all hold.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from shares import check_exactly_once, check_torch_shares, driver_main, joined, load

N, BATCH, SEED, EPOCHS, WORLD = 45, 4, 7, 2, 2
STEPS_PER_EPOCH = math.ceil(math.ceil(N / WORLD) / BATCH)  # 23 indices a rank: 6 batches
STEP = STEPS_PER_EPOCH + 2                                  # the checkpoint: epoch 1, 2 batches in


def train_loop(config):
    import torch
    import ray.train
    import ray.train.torch
    from distsampler.data import DataLoader
    from distsampler.torch import DistributedSampler

    class Indices(torch.utils.data.Dataset):
        def __len__(self):
            return N

        def __getitem__(self, index):
            return torch.tensor([float(index)])

    out, mode = config["out"], config["mode"]
    rank = ray.train.get_context().get_world_rank()
    model = ray.train.torch.prepare_model(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    dataset = Indices()

    def record(scenario, entry):
        with open(os.path.join(out, f"{scenario}_{mode}_rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def step(batch):
        loss = model(batch / N).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    if mode == "first":
        sampler = DistributedSampler(dataset, seed=7)
        loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                            persistent_workers=True)
        wrapped = ray.train.torch.prepare_data_loader(loader)
        record("wrapped", {"kind": "prepared", "same_loader": wrapped is loader,
                           "same_sampler": wrapped.sampler is sampler})
        for epoch in range(EPOCHS):
            wrapped.sampler.set_epoch(epoch)
            for index, batch in enumerate(wrapped):
                record("wrapped", {"epoch": epoch, "step": epoch * STEPS_PER_EPOCH + index,
                                   "indices": [int(i) for i in batch.view(-1)]})
                step(batch)
                if epoch == 0 and index == 1:
                    record("wrapped", {"kind": "state after 2 batches",
                                       "batches": loader.state_dict()["batches"]})

    # README "Frameworks" shows these lines (seed SEED, batch size BATCH).
    sampler = DistributedSampler(dataset, seed=7)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                        persistent_workers=True)
    prepared = ray.train.torch.prepare_data_loader(loader, move_to_device=False)
    record("own", {"kind": "prepared", "same_loader": prepared is loader,
                   "same_sampler": prepared.sampler is sampler})
    steps = 0
    if mode == "resume":
        loader.load_state_dict(torch.load(os.path.join(config["checkpoint"], "loader.pt")))
        steps = STEP
    for epoch in range(sampler.epoch, EPOCHS):
        sampler.set_epoch(epoch)  # keeps a loaded position in that epoch
        for batch in prepared:
            record("own", {"epoch": epoch, "step": steps,
                           "indices": [int(i) for i in batch.view(-1)]})
            step(batch)
            steps += 1
            if mode == "first" and steps == STEP:
                with tempfile.TemporaryDirectory() as folder:
                    checkpoint = None
                    if rank == 0:  # the state is the same on every rank
                        torch.save(loader.state_dict(), os.path.join(folder, "loader.pt"))
                        checkpoint = ray.train.Checkpoint.from_directory(folder)
                    ray.train.report({"step": steps}, checkpoint=checkpoint)
            if mode == "first" and steps == STEP + 2:
                return


def run(out):
    """Fit 1 and fit 2 on a local cluster started and shut down here."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    # The cluster's files (sockets, logs) under OUT, removed with it.
    ray.init(num_cpus=WORLD, include_dashboard=False, log_to_driver=False,
             _temp_dir=os.path.join(out, "t"))
    try:
        checkpoint = None
        for mode in ("first", "resume"):
            config = {"out": out, "mode": mode}
            if checkpoint is not None:
                config["checkpoint"] = checkpoint.path
            trainer = TorchTrainer(
                train_loop, train_loop_config=config,
                scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False),
                run_config=RunConfig(storage_path=os.path.join(out, "ray"), name=mode))
            result = trainer.fit()
            checkpoint = result.checkpoint
            if mode == "first" and checkpoint is None:
                raise RuntimeError("fit 1 reported no checkpoint")
    finally:
        ray.shutdown()


def check(python, out):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # A session of its own: whatever Ray leaves behind is found and stopped by its group.
    process = subprocess.Popen([python, os.path.abspath(__file__), "--run", out], env=env,
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=840)
    finally:
        try:
            os.killpg(process.pid, 9)
        except ProcessLookupError:
            pass
        process.wait()
    if process.returncode != 0:
        return [f"the Ray run: exit status {process.returncode}:\n{output[-4000:]}"]
    problems = []

    steps, others = load(out, "wrapped_first", WORLD)
    for entry in others:
        if entry.get("kind") == "prepared" and not (entry["same_sampler"]
                                                    and not entry["same_loader"]):
            problems.append(f"wrapped: prepare_data_loader did not wrap the loader around our "
                            f"sampler: {entry}")
        if entry.get("kind") == "state after 2 batches" and entry["batches"] != 3:
            problems.append(f"wrapped: after 2 batches through Ray's wrapper the loader counted "
                            f"{entry['batches']}, not 3 (the wrapper's read-ahead)")
    read, _ = joined(steps)
    problems += [f"wrapped: {p}" for p in check_exactly_once(N, WORLD, EPOCHS, read)
                 + check_torch_shares(N, WORLD, SEED, EPOCHS, read)]

    first, others = load(out, "own_first", WORLD)
    second, more_others = load(out, "own_resume", WORLD)
    for entry in others + more_others:
        if entry.get("kind") == "prepared" and not (entry["same_sampler"]
                                                    and entry["same_loader"]):
            problems.append(f"own: prepare_data_loader(move_to_device=False) did not return "
                            f"the loader itself: {entry}")
    read, more = joined(first, second, STEP)
    problems += [f"own: {p}" for p in more + check_exactly_once(N, WORLD, EPOCHS, read)
                 + check_torch_shares(N, WORLD, SEED, EPOCHS, read)]
    return problems


def main():
    if sys.argv[1:2] == ["--run"]:
        run(sys.argv[2])
        return 0
    return driver_main("ray", check)

if __name__ == "__main__":
    sys.exit(main())
