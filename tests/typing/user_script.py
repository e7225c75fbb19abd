"""A training script as a user writes it, with ordinary annotations: tests/typing/mypy_test.sh
type-checks it with ``mypy --strict`` against the installed package (its py.typed and _core.pyi),
never the source tree. It is only checked, never run."""
from typing import Any, Dict, List, Tuple

import torch
from torch.utils.data import Dataset

import distsampler
from distsampler.data import DataLoader
from distsampler.launch import Launch, destroy_distributed, init_distributed
from distsampler.policies import DistributedEvalSampler, WeightedDistributedSampler
from distsampler.torch import ConfigurationMismatch, DistributedSampler


class Squares(Dataset[Tuple[int, int]]):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Tuple[int, int]:
        return index, index * index


def train_epochs(loader: "DataLoader[Tuple[int, int]]", sampler: DistributedSampler,
                 epochs: int) -> int:
    seen = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            seen += int(inputs.numel()) + int(targets.numel())
    return seen


def checkpoint(sampler: DistributedSampler,
               loader: "DataLoader[Tuple[int, int]]") -> Dict[str, Any]:
    return {"sampler": sampler.state_dict(), "loader": loader.state_dict(),
            "epoch": sampler.epoch}


def main() -> None:
    launch: Launch = init_distributed(backend="gloo")
    rank, world_size = launch.rank, launch.world_size
    print(distsampler.__version__, launch.local_rank)
    dataset = Squares(1000)

    # The drop-in sampler, with PyTorch's arguments and ours.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=1234, drop_last=False, order="feistel", auto_epoch=False)
    loader: DataLoader[Tuple[int, int]] = DataLoader(dataset, batch_size=32, sampler=sampler,
                                                     num_workers=2)
    seen = train_epochs(loader, sampler, epochs=2)
    state = checkpoint(sampler, loader)
    per_rank: int = len(sampler)
    total: int = sampler.num_samples * sampler.num_replicas
    print(seen, per_rank, total, sampler.rank, sampler.seed, sampler.shuffle)

    resumed = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=1234,
                                 order="feistel")
    resumed.load_state_dict(state["sampler"])
    first: List[int] = list(resumed)[:4]
    share = resumed.indices(0)
    print(first, share.shape)
    try:
        resumed.check_configuration()
    except ConfigurationMismatch as error:
        print(error)

    # A plain torch DataLoader takes it too.
    plain = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler)
    print(len(plain))

    # A policy sampler: weighted draws with replacement, distributed.
    weights = torch.rand(len(dataset), dtype=torch.float64)
    weighted = WeightedDistributedSampler(weights, num_samples=500, num_replicas=world_size,
                                          rank=rank, seed=7)
    weighted.set_epoch(3)
    draws: List[int] = list(weighted)
    weighted_state: Dict[str, Any] = weighted.state_dict()
    weighted.load_state_dict(weighted_state)
    weighted_loader = DataLoader(dataset, batch_size=16, sampler=weighted)
    weighted_loader.load_state_dict(weighted_loader.state_dict())

    evaluation = DistributedEvalSampler(dataset, num_replicas=world_size, rank=rank)
    mask: torch.Tensor = evaluation.mask
    print(len(draws), int(mask.sum()), evaluation.num_real)
    destroy_distributed()


if __name__ == "__main__":
    main()
