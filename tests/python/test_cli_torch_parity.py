"""The CLI's torch order against live PyTorch (the imported one: Debian's python3-torch, or torch
2.x in a virtual environment), on random configurations."""
import random

import pytest

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def torch_indices(size, world_size, rank, epoch, seed, shuffle, drop_last):
    s = DistributedSampler(range(size), num_replicas=world_size, rank=rank, shuffle=shuffle,
                           seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s)


def ours(cli, size, world_size, rank, epoch, seed, shuffle, drop_last, randperm="classic"):
    args = ["indices", "--size", size, "--world-size", world_size, "--rank", rank,
            "--epoch", epoch, "--seed", seed, "--randperm", randperm]
    if not shuffle:
        args.append("--no-shuffle")
    if drop_last:
        args.append("--drop-last")
    return [int(x) for x in cli(*args).stdout.split()]


def random_config(rng):
    size = rng.choice([rng.randrange(0, 100), rng.randrange(0, 100000),
                       2 ** rng.randrange(1, 20) + rng.randrange(-3, 4)])
    world_size = rng.randrange(1, 65)
    rank = rng.randrange(world_size)
    epoch = rng.choice([0, 1, rng.randrange(2**32)])
    seed = rng.choice([0, rng.randrange(-2**63, 0), rng.randrange(2**64 - 2**33),
                       rng.randrange(2**32)])
    return (max(size, 0), world_size, rank, epoch, seed, rng.random() < 0.85, rng.random() < 0.5)


@pytest.mark.parametrize("trial", range(60))
def test_random_configurations_match_pytorch(cli, trial):
    rng = random.Random(1000 + trial)
    config = random_config(rng)
    assert ours(cli, *config) == torch_indices(*config), config


def test_current_and_classic_agree_below_the_threshold(cli):
    config = (5000, 3, 1, 2, 7, True, False)
    assert ours(cli, *config, randperm="current") == torch_indices(*config)


def test_seed_plus_epoch_overflow_is_an_error_in_both(cli):
    with pytest.raises((RuntimeError, ValueError), match="Overflow"):  # 1.13: RuntimeError; 2.x
        torch_indices(10, 2, 0, 1, 2**64 - 1, True, False)
    proc = cli("indices", "--size", 10, "--world-size", 2, "--rank", 0, "--seed", 2**64 - 1,
               "--epoch", 1, check=False)
    assert proc.returncode == 2
    assert "seed + epoch" in proc.stderr
