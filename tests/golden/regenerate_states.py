"""Writes tests/golden/frozen_states.json: a checkpoint of every sampler kind, taken mid-epoch,
and what each rank reads after resuming it on 2 and on 3 ranks, as the installed distsampler
computes them. tests/python/test_frozen_states.py loads the frozen states into today's samplers
and checks that they resume bit for bit.

The frozen file was written by the release before the one sampler core (commit f7a9ca4, whose
policy samplers kept their own state format in Python): run this with that commit's package on
PYTHONPATH to write it again; with a later package it checks nothing (it writes what that
package computes).

    PYTHONPATH=<build of f7a9ca4>/python python3 tests/golden/regenerate_states.py OUT.json
"""
import importlib
import json
import sys

import torch

import distsampler

# Every kind: the class, the dataset (an int n: range(n)), constructor arguments after the dataset
# and the world, the epoch, and the items each rank takes before the checkpoint.
CASES = [
    ("torch", "distsampler.torch.DistributedSampler", 103, {"seed": 11}),
    ("torch_drop_last", "distsampler.torch.DistributedSampler", 103,
     {"seed": -5, "drop_last": True}),
    ("feistel_v2", "distsampler.torch.DistributedSampler", 103, {"seed": 11, "order": "feistel"}),
    ("feistel_v1", "distsampler.torch.DistributedSampler", 103,
     {"seed": 11, "order": "feistel", "feistel_version": 1}),
    ("eval_uneven", "distsampler.policies.DistributedEvalSampler", 103,
     {"shuffle": True, "seed": 4}),
    ("eval_masked", "distsampler.policies.DistributedEvalSampler", 103,
     {"shuffle": True, "seed": 4, "padded": True, "with_mask": True, "order": "feistel"}),
    ("weighted", "distsampler.policies.WeightedDistributedSampler", None,
     {"weights": [0.5, 1.0, 2.0, 0.0, 3.5] * 9, "num_samples": 61, "seed": 7}),
    ("blended", "distsampler.policies.BlendedDistributedSampler", None,
     {"datasets": [40, 63, 5], "weights": [0.25, 0.7, 0.05], "samples_per_epoch": 97,
      "seed": 5}),
    ("blended_pairs", "distsampler.policies.BlendedDistributedSampler", None,
     {"datasets": [40, 63], "weights": [1 / 3, 2 / 3], "samples_per_epoch": 50, "seed": 5,
      "flat": False}),
    ("sharded", "distsampler.policies.ShardedDistributedSampler", None,
     {"shard_sizes": [10, 20, 5, 7, 30, 1], "seed": 3, "window": 2}),
    ("wrapper", "distsampler.policies.DistributedSamplerWrapper", None,
     {"sampler": [(i * 37) % 101 for i in range(101)]}),
    ("batches", "distsampler.policies.DistributedBatchSampler", 103,
     {"batch_size": 4, "seed": 9}),
    ("batches_feistel", "distsampler.policies.DistributedBatchSampler", 103,
     {"batch_size": 4, "seed": 9, "order": "feistel", "drop_last": True}),
    ("bucketed", "distsampler.policies.BucketedBatchSampler", None,
     {"lengths": [(i * 7919) % 97 + 1 for i in range(103)], "batch_size": 4, "seed": 2,
      "window_batches": 3}),
    ("iterable", "distsampler.data.DistributedIterableDataset", 103,
     {"batch_size": 4, "seed": 6}),
]
EPOCH, TAKE = 3, 7


def build(path, dataset, kwargs, world, rank):
    module, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    kwargs = dict(kwargs)
    if dataset is not None:
        return cls(range(dataset), num_replicas=world, rank=rank, **kwargs)
    return cls(num_replicas=world, rank=rank, **kwargs)


def plain(item):
    """An item as JSON holds it: tuples and tensors as lists."""
    if isinstance(item, torch.Tensor):
        return item.tolist()
    if isinstance(item, (tuple, list)):
        return [plain(x) for x in item]
    return item


def case(name, path, dataset, kwargs):
    ranks = [build(path, dataset, kwargs, 2, r) for r in range(2)]
    iterators = []
    for sampler in ranks:
        sampler.set_epoch(EPOCH)
        iterators.append(iter(sampler))
        for _ in range(TAKE):
            next(iterators[-1])
    state = ranks[0].state_dict()
    rest = {}
    for world in (2, 3):
        rest[str(world)] = []
        for rank in range(world):
            resumed = build(path, dataset, kwargs, world, rank)
            resumed.load_state_dict(state)
            resumed.set_epoch(EPOCH)
            rest[str(world)].append([plain(item) for item in resumed])
    return {"name": name, "class": path, "dataset": dataset, "kwargs": kwargs, "epoch": EPOCH,
            "take": TAKE, "state": state, "rest": rest}


def main(out):
    cases = [case(*spec) for spec in CASES]
    with open(out, "w") as f:
        json.dump({"written_by": distsampler._core.__version__, "cases": cases}, f, indent=1,
                  sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
