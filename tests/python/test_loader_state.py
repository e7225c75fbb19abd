"""Checkpoints that count what the training loop received: distsampler.data.DataLoader with
workers and prefetch, every policy sampler's state_dict, elastic resume, set_epoch during a pass,
len() after a resume, a dataset that changed size, ranks loading different checkpoints, the
framework checks (Lightning, Ray), and the IterableDataset adapter."""
import copy
import inspect
import json
import os
import pickle
import random
import sys
import warnings
import zlib

import pytest
import torch
import torch.distributed as dist
import torch.utils.data as tud
from torch.utils.data.distributed import DistributedSampler as TorchDistributedSampler

import loader_helpers
from distsampler.data import DataLoader, DistributedIterableDataset
from distsampler.policies import (BlendedDistributedSampler, BucketedBatchSampler,
                                  DistributedBatchSampler, DistributedEvalSampler,
                                  DistributedSamplerWrapper, ShardedDistributedSampler,
                                  WeightedDistributedSampler)
from distsampler.torch import CheckpointMismatch, ConfigurationMismatch, DistributedSampler

N = 103


def Indices(size: int = N) -> loader_helpers.Indices:
    return loader_helpers.Indices(size)


flat = loader_helpers.flat


# name -> (factory(num_replicas, rank), is_batch_sampler, global stream of one epoch as a
# function of (epoch)): the stream is what the job reads position by position, for any W.
def weights():
    return [1.0 + (i * 7) % 5 for i in range(N)]


SAMPLERS = {
    "torch": (lambda w, r: DistributedSampler(Indices(), w, r, seed=11), False),
    "feistel": (lambda w, r: DistributedSampler(Indices(), w, r, seed=11, order="feistel"),
                False),
    "eval": (lambda w, r: DistributedEvalSampler(Indices(), w, r, shuffle=True, seed=1), False),
    "weighted": (lambda w, r: WeightedDistributedSampler(weights(), 90, w, r, seed=3), False),
    "blended": (lambda w, r: BlendedDistributedSampler([40, N - 40], [0.25, 0.75], 97, w, r,
                                                       seed=5), False),
    "sharded": (lambda w, r: ShardedDistributedSampler([30, 20, 33, 20], w, r, seed=2), False),
    "wrapper": (lambda w, r: DistributedSamplerWrapper(
        tud.RandomSampler(range(N), generator=torch.Generator().manual_seed(1)), w, r), False),
    "batches": (lambda w, r: DistributedBatchSampler(Indices(), 4, w, r, seed=6), True),
    "bucketed": (lambda w, r: BucketedBatchSampler([(5 * i) % 13 for i in range(N)], 4, w, r,
                                                   seed=7, window_batches=3), True),
}


def global_stream(name, epoch):
    """The epoch's items in global position order, read with one rank (W = 1)."""
    sampler = SAMPLERS[name][0](1, 0)
    sampler.set_epoch(epoch)
    return list(sampler)


def loader(name, sampler, **kwargs):
    if SAMPLERS[name][1]:
        return DataLoader(Indices(), batch_sampler=sampler, **kwargs)
    return DataLoader(Indices(), sampler=sampler, batch_size=kwargs.pop("batch_size", 8),
                      **kwargs)


def units(batches, is_batch):
    """What a rank read, one entry per global position: a batch (batch samplers) or an index."""
    if is_batch:
        return [tuple(batch.tolist()) for batch in batches]
    return flat(batches)


# The torchdata cases run where torchdata is installed, and wherever the suite is told it must be
# (DISTSAMPLER_REQUIRE_TORCHDATA=1: the _torch2 entries, whose requirements/torch2.txt pins it):
# missing or broken there, they fail. Debian's stacks have no torchdata (Debian packages none, and
# torchdata 0.11 needs torch 2, which Debian 12's is not): there test_the_torchdata_cases_run
# says so once, and the cases are not generated.
def _torchdata_installed():
    try:
        import torchdata.stateful_dataloader  # noqa: F401
    except ImportError:
        return False
    return True


TORCHDATA_REQUIRED = os.environ.get("DISTSAMPLER_REQUIRE_TORCHDATA") == "1"
TORCHDATA = ["torchdata"] if TORCHDATA_REQUIRED or _torchdata_installed() else []
NO_TORCHDATA = (f"torchdata is not installed with torch {torch.__version__} at {sys.executable} "
                "(Debian packages none; 0.11 needs torch >= 2): the _torch2 entries, which "
                "require it, run this file's torchdata cases")


def torchdata_stateful():
    import torchdata.stateful_dataloader
    return torchdata.stateful_dataloader


def test_the_torchdata_cases_run():
    if not TORCHDATA:
        pytest.skip(NO_TORCHDATA)
    assert hasattr(torchdata_stateful(), "StatefulDataLoader")


def stateful_loader(kind, name, sampler, **kwargs):
    """distsampler.data.DataLoader, or torchdata's StatefulDataLoader over the same sampler."""
    if kind == "distsampler":
        return loader(name, sampler, **kwargs)
    stateful = torchdata_stateful()
    if SAMPLERS[name][1]:
        return stateful.StatefulDataLoader(Indices(), batch_sampler=sampler, **kwargs)
    return stateful.StatefulDataLoader(Indices(), sampler=sampler,
                                       batch_size=kwargs.pop("batch_size", 8), **kwargs)


# Six trials for ours, three for torchdata's loader (they suffice there).
@pytest.mark.parametrize("name", sorted(SAMPLERS))
@pytest.mark.parametrize("kind, trial", [("distsampler", t) for t in range(6)] +
                                        [(kind, t) for kind in TORCHDATA for t in range(3)])
def test_a_loader_checkpoint_with_workers_resumes_exactly_on_another_world_size(kind, name,
                                                                                trial):
    """W ranks, each a DataLoader with 2 workers and prefetch 2, stop after k batches; the
    checkpoint of rank 0 resumes on W' ranks. Position by position, every global position of
    the epoch is read once: before the cut by rank r at its j-th item, position r + j W; after
    it by rank r' at its j-th item, C + r' + j W'. kind: our DataLoader, or torchdata's
    StatefulDataLoader checkpointing our samplers through their state_dict (the Stateful
    protocol), which snapshots them as each batch is dispatched."""
    rng = random.Random(f"{name}-{trial}")
    factory, is_batch = SAMPLERS[name]
    world, world_after = rng.choice([1, 2, 3, 4]), rng.choice([1, 2, 3, 5])
    epoch = rng.randrange(3)
    stream = global_stream(name, epoch)
    read = {}  # global position -> item
    states = []
    steps = None
    for rank in range(world):
        sampler = factory(world, rank)
        dl = stateful_loader(kind, name, sampler, num_workers=2, prefetch_factor=2)
        sampler.set_epoch(epoch)
        total = len(dl)
        steps = rng.randrange(total + 1) if steps is None else steps
        iterator = iter(dl)
        for j, item in enumerate(units([next(iterator) for _ in range(steps)], is_batch)):
            read.setdefault(rank + j * world, []).append(item)
        states.append(dl.state_dict())
        if kind == "distsampler":
            # The sampler's own checkpoint agrees with the loader's: exact too.
            assert sampler.state_dict() == states[-1]["sampler"]
        del iterator
    if kind == "distsampler":
        assert all(state == states[0] for state in states)  # the same on every rank
        consumed = states[0]["sampler"]["consumed"]
        assert consumed == steps * world * (1 if is_batch else 8) or (
            steps == total and consumed >= len(stream))
    else:
        consumed = min(steps * world * (1 if is_batch else 8), len(stream) + world)
    for rank in range(world_after):
        sampler = factory(world_after, rank)
        dl = stateful_loader(kind, name, sampler, num_workers=2, prefetch_factor=2,
                             persistent_workers=True)
        dl.load_state_dict(copy.deepcopy(states[0]))
        sampler.set_epoch(epoch)  # the loop's usual call keeps the loaded position
        rest = units(list(dl), is_batch)
        for j, item in enumerate(rest):
            read.setdefault(consumed + rank + j * world_after, []).append(item)
    stream = [tuple(item) if is_batch else item for item in stream]
    # Each position read once, with the item the stream has there (wrapped-around padding
    # reads the stream's start again, as partition.h says).
    size = len(stream)
    for position, items in read.items():
        assert len(items) == 1, (position, items)
        assert items[0] == stream[position % size] or name == "weighted", position
    if name == "weighted":  # with replacement: draws past num_samples continue the stream
        longer = WeightedDistributedSampler(weights(), 2 * 90 + 10, 1, 0, seed=3)
        longer.set_epoch(epoch)
        draws = list(longer)
        assert all(items[0] == draws[p] for p, items in read.items())
    real = {p for p in read if p < size}
    padded = name == "eval" or not dl.sampler.drop_last if not is_batch else True
    assert real == set(range(size)) or not padded


def test_a_sampler_state_counts_what_it_handed_out_and_the_loader_what_the_loop_received():
    """The Stateful protocol: read by a plain torch DataLoader with workers (which fetches
    ahead), the sampler's state counts the indices it handed out; read by
    distsampler.data.DataLoader it counts what the loop received, as the loader's does."""
    sampler = DistributedSampler(Indices(), 2, 0)
    iterator = iter(tud.DataLoader(Indices(), sampler=sampler, batch_size=4, num_workers=2))
    next(iterator)
    assert sampler.state_dict()["consumed"] > 4 * 2  # ahead of the one batch received
    del iterator
    sampler = DistributedSampler(Indices(), 2, 0)
    dl = DataLoader(Indices(), sampler=sampler, batch_size=4, num_workers=2)
    iterator = iter(dl)
    next(iterator)
    assert sampler.state_dict()["consumed"] == dl.state_dict()["sampler"]["consumed"] == 8
    del iterator


def test_a_foreign_sampler_with_state_and_a_stateless_one_resume_at_the_received_batch():
    class Counting(tud.Sampler):
        """torchdata's protocol: state_dict/load_state_dict on the sampler."""

        def __init__(self):
            self.start, self.yielded = 0, 0

        def __iter__(self):
            for i in range(self.start, N):
                self.yielded = i + 1
                yield i
            self.start = 0

        def __len__(self):
            return N - self.start

        def state_dict(self):
            return {"next": self.yielded}

        def load_state_dict(self, state):
            self.start = state["next"]

    for sampler_class in (Counting, lambda: tud.SequentialSampler(range(N))):
        dl = DataLoader(Indices(), sampler=sampler_class(), batch_size=5, num_workers=2)
        iterator = iter(dl)
        head = flat(next(iterator) for _ in range(3))
        state = dl.state_dict()
        del iterator
        resumed = DataLoader(Indices(), sampler=sampler_class(), batch_size=5, num_workers=2)
        resumed.load_state_dict(state)
        assert head + flat(resumed) == list(range(N))


def test_set_epoch_of_the_epoch_in_progress_keeps_the_position():
    sampler = DistributedSampler(Indices(), 1, 0)
    sampler.set_epoch(2)
    dl = DataLoader(Indices(), sampler=sampler, batch_size=10, num_workers=2)
    iterator = iter(dl)
    for _ in range(6):
        next(iterator)
    sampler.set_epoch(2)  # a framework's hook, mid-epoch
    assert sampler.state_dict()["consumed"] == 60 and dl.state_dict()["sampler"]["consumed"] == 60
    sampler.set_epoch(3)  # another epoch: the next pass starts it from the beginning
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["consumed"]) == (3, 0)
    del iterator


def test_len_after_a_resume_is_a_whole_pass_as_pytorchs_and_torchdatas():
    """Lightning counts the batches a resumed epoch already had against len(loader): a len of
    the rest of the epoch made the resumed epoch end that many batches early."""
    sampler = DistributedSampler(Indices(), 2, 1)
    state = DistributedSampler(Indices(), 4, 0).state_dict()
    state_at_50 = dict(state)
    donor = DistributedSampler(Indices(), 2, 0)
    iterator = iter(donor)
    for _ in range(25):
        next(iterator)
    state_at_50 = donor.state_dict()
    assert state_at_50["consumed"] == 50
    sampler.load_state_dict(state_at_50)
    assert len(sampler) == 52 == len(TorchDistributedSampler(Indices(), 2, 1))  # a whole pass
    assert len(list(sampler)) == 27  # the resumed pass: positions 51, 53, ..., 103 (wrapped)
    assert len(sampler) == 52
    assert state["consumed"] == 0


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
@pytest.mark.parametrize("kind", ["distsampler"] + TORCHDATA)
def test_a_checkpoint_taken_after_the_epoch_ended_resumes_at_the_next_epoch(kind, name,
                                                                              workers):
    """A checkpoint taken after epoch e's last batch, then set_epoch(e + 1) and a loop: epoch
    e + 1, from its start, without a replay warning. torchdata's loader loads the sampler's
    state at that iter(), after set_epoch(e + 1), takes an iterator for the restored (finished)
    pass and then another: the state's epoch e must not replace the epoch that was set (it did:
    epoch e again with workers, nothing without)."""
    factory, is_batch = SAMPLERS[name]
    options = dict(num_workers=workers, prefetch_factor=2) if workers else {}
    epoch = 1
    sampler = factory(2, 1)
    dl = stateful_loader(kind, name, sampler, **options)
    sampler.set_epoch(epoch)
    list(dl)
    state = dl.state_dict()
    fresh = factory(2, 1)  # a fresh sampler: the wrapper's RandomSampler draws anew each pass
    fresh.set_epoch(epoch + 1)
    expected = units(list(stateful_loader(kind, name, fresh, **options)), is_batch)
    assert expected
    sampler = factory(2, 1)
    dl = stateful_loader(kind, name, sampler, **options)
    dl.load_state_dict(state)
    sampler.set_epoch(epoch + 1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*without a set_epoch")
        assert units(list(dl), is_batch) == expected
        sampler.set_epoch(epoch + 2)
        assert units(list(dl), is_batch) != expected  # and on from there


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_a_dataset_that_changed_size_is_an_error_at_the_next_pass(name):
    if name in ("weighted", "blended", "sharded", "wrapper", "bucketed"):
        return  # no dataset of their own: sizes, weights, lengths or a sampler
    sampler = SAMPLERS[name][0](2, 0)
    sampler.dataset.size = N + 1
    with pytest.raises(ValueError, match=f"len\\(dataset\\) = {N + 1} .* {N} samples"):
        next(iter(sampler))


def test_the_drop_in_and_the_rank_sharding_policies_are_pytorch_distributed_samplers():
    """Lightning (_requires_distributed_sampler), Ray Train (prepare_data_loader) check
    isinstance(loader.sampler, DistributedSampler) and otherwise replace the sampler."""
    for name in ("torch", "eval", "weighted", "blended", "sharded", "wrapper"):
        sampler = SAMPLERS[name][0](2, 1)
        assert isinstance(sampler, TorchDistributedSampler), name
        for attribute in ("num_replicas", "rank", "drop_last", "shuffle", "num_samples",
                          "total_size", "epoch", "seed"):
            getattr(sampler, attribute)


def lightning_process_dataloader(dataloader, world_size, rank):
    """Lightning 2.x's decision, emulated (trainer/connectors/data_connector.py and
    utilities/data.py): a distributed run replaces a DataLoader's sampler unless it is already a
    DistributedSampler, rebuilding the loader from its attributes; set_epoch then reaches
    loader.sampler and loader.batch_sampler.sampler."""
    if not isinstance(dataloader.sampler, TorchDistributedSampler):
        sampler = TorchDistributedSampler(dataloader.dataset, world_size, rank, shuffle=True)
        signature = inspect.signature(type(dataloader).__init__).parameters
        kwargs = {key: getattr(dataloader, key) for key in ("num_workers", "collate_fn",
                                                            "pin_memory", "drop_last")
                  if key in signature}
        dataloader = type(dataloader)(dataloader.dataset, batch_size=dataloader.batch_size,
                                      sampler=sampler, **kwargs)
    return dataloader


def lightning_set_epoch(dataloader, epoch):
    objects = {id(o): o for o in (getattr(dataloader, "sampler", None),
                                  getattr(getattr(dataloader, "batch_sampler", None), "sampler",
                                          None)) if o is not None}
    for o in objects.values():
        if callable(getattr(o, "set_epoch", None)):
            o.set_epoch(epoch)


def test_a_lightning_style_replacement_leaves_the_sampler_in_place():
    ours = DistributedSampler(Indices(), 2, 1, seed=9)
    dl = DataLoader(Indices(), sampler=ours, batch_size=4, num_workers=2)
    processed = lightning_process_dataloader(dl, 2, 1)
    assert processed is dl and processed.sampler is ours
    # ... where torch's RandomSampler would be replaced (the emulation does replace).
    plain = DataLoader(Indices(), shuffle=True, batch_size=4)
    assert isinstance(lightning_process_dataloader(plain, 2, 1).sampler, TorchDistributedSampler)
    # set_epoch reaches our sampler, and a batch sampler through its .sampler.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for epoch in range(2):
            lightning_set_epoch(processed, epoch)
            assert flat(processed) == ours.indices(epoch).tolist()
        batches = DistributedBatchSampler(Indices(), 4, 2, 1)
        bdl = DataLoader(Indices(), batch_sampler=batches, num_workers=2)
        for epoch in range(2):
            lightning_set_epoch(bdl, epoch)
            assert batches.epoch == epoch
            list(bdl)


# ---- ranks loading different checkpoints, with the collective faked ----

class FakeGroup:
    """A process group of `world` ranks in this process: rank r's payload of a collective is
    others(r, this rank's payload); call(r, this rank's call) the collective rank r is in."""

    def __init__(self, monkeypatch, world, others, call=lambda rank, call: call):
        self.world, self.others, self.call = world, others, call
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
        monkeypatch.setattr(dist, "all_gather_object", self.all_gather_object)

    def all_gather_object(self, out, obj, group=None):
        for r in range(self.world):
            out[r] = {"distsampler_call": self.call(r, obj["distsampler_call"]),
                      "payload": self.others(r, obj["payload"])}


@pytest.mark.parametrize("name", ["torch", "blended", "bucketed"])
def test_ranks_loading_different_checkpoints_stop_naming_what_differs(monkeypatch, name):
    factory = SAMPLERS[name][0]
    donor = factory(3, 0)
    state = donor.state_dict()

    def other_epoch(rank, obj):
        return {**obj, "epoch": 1} if rank == 1 else obj

    FakeGroup(monkeypatch, 3, other_epoch)
    sampler = factory(3, 0)
    before = sampler.state_dict()
    with pytest.raises(CheckpointMismatch, match="epoch = 0 on ranks 0, 2; 1 on rank 1"):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == before  # nothing changed

    def rank_2_failed(rank, obj):
        return {"error": "ValueError: state checksum"} if rank == 2 else obj

    FakeGroup(monkeypatch, 3, rank_2_failed)
    with pytest.raises(CheckpointMismatch, match="rank 2: ValueError: state checksum"):
        factory(3, 0).load_state_dict(state)
    # The same checkpoint everywhere loads.
    FakeGroup(monkeypatch, 3, lambda rank, obj: obj)
    factory(3, 0).load_state_dict(state)


# ---- every policy sampler's state ----

@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_policy_states_reject_edits_other_configurations_and_survive_pickling(name):
    factory, _ = SAMPLERS[name]
    sampler = factory(2, 0)
    iterator = iter(sampler)
    for _ in range(3):
        next(iterator)
    state = sampler.state_dict()
    assert state["consumed"] == 6 and state["epoch"] == 0
    if name != "wrapper":  # torch's RandomSampler with a generator does not pickle
        clone = pickle.loads(pickle.dumps(sampler))
        assert clone.state_dict() == state
    if name in ("torch", "feistel"):
        return  # the C++ state format: tests/python/test_torch_sampler.py
    edited = {**state, "consumed": 8}
    with pytest.raises(ValueError, match="checksum"):
        factory(2, 0).load_state_dict(edited)
    other = next(n for n in SAMPLERS if n != name and n not in ("torch", "feistel"))
    with pytest.raises(ValueError, match=f"state kind = '{type(sampler).__name__}' but"):
        SAMPLERS[other][0](2, 0).load_state_dict(state)


def test_a_policy_state_of_another_configuration_names_the_field():
    state = BlendedDistributedSampler([40, 63], [0.25, 0.75], 97, 2, 0, seed=5).state_dict()
    with pytest.raises(ValueError, match="state seed = 5 but this sampler's seed = 6"):
        BlendedDistributedSampler([40, 63], [0.25, 0.75], 97, 2, 0, seed=6).load_state_dict(state)


# ---- the IterableDataset adapter ----

@pytest.mark.parametrize("workers,persistent", [(0, False), (1, False), (1, True), (2, False),
                                                (2, True)])
def test_the_iterable_adapter_reads_the_share_in_order_across_workers(workers, persistent):
    world = 3
    for rank in range(world):
        adapter = DistributedIterableDataset(Indices(), 4, world, rank, seed=8)
        dl = DataLoader(adapter, batch_size=4, num_workers=workers,
                        persistent_workers=persistent)
        reference = DistributedSampler(Indices(), world, rank, seed=8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for epoch in range(3):
                adapter.set_epoch(epoch)
                assert flat(dl) == reference.indices(epoch).tolist()
        # Without set_epoch the pass replays the epoch, as PyTorch's sampler would (and warns);
        # with auto_epoch=True the loader advances the epoch itself, workers included.
        with pytest.warns(UserWarning, match="replays epoch 2.*set_epoch"):
            assert flat(dl) == reference.indices(2).tolist()
        adapter = DistributedIterableDataset(Indices(), 4, world, rank, seed=8, auto_epoch=True)
        dl = DataLoader(adapter, batch_size=4, num_workers=workers,
                        persistent_workers=persistent)
        assert flat(dl) == reference.indices(0).tolist()
        with pytest.warns(UserWarning, match="advances to epoch 1"):
            assert flat(dl) == reference.indices(1).tolist()


@pytest.mark.parametrize("trial", range(4))
def test_the_iterable_adapter_resumes_exactly_on_another_world_size(trial):
    rng = random.Random(trial)
    world, world_after = rng.choice([1, 2, 3]), rng.choice([1, 2, 4])
    positions = {}
    steps, state = None, None
    for rank in range(world):
        adapter = DistributedIterableDataset(Indices(), 4, world, rank, seed=8)
        dl = DataLoader(adapter, batch_size=4, num_workers=2, prefetch_factor=2)
        adapter.set_epoch(1)
        steps = rng.randrange(len(adapter) // 4 + 1) if steps is None else steps
        iterator = iter(dl)
        got = flat(next(iterator) for _ in range(steps))
        for j, index in enumerate(got):
            positions.setdefault(rank + j * world, []).append(index)
        state = dl.state_dict()
        del iterator
    consumed = state["dataset"]["consumed"]
    assert consumed == steps * 4 * world
    for rank in range(world_after):
        adapter = DistributedIterableDataset(Indices(), 4, world_after, rank, seed=8)
        dl = DataLoader(adapter, batch_size=4, num_workers=2)
        dl.load_state_dict(state)
        for j, index in enumerate(flat(dl)):
            positions.setdefault(consumed + rank + j * world_after, []).append(index)
    order = DistributedSampler(Indices(), 1, 0, seed=8).indices(1).tolist()
    assert all(len(v) == 1 and v[0] == order[p % N] for p, v in positions.items())
    assert {p for p in positions if p < N} == set(range(N))


def test_the_iterable_adapter_and_the_loader_must_agree_on_the_batch_size():
    adapter = DistributedIterableDataset(Indices(), 4, 1, 0)
    with pytest.raises(ValueError, match="batch_size = 4 but the DataLoader's batch_size = 8"):
        DataLoader(adapter, batch_size=8)
    with pytest.raises(ValueError, match="batch_size = 0"):
        DistributedIterableDataset(Indices(), 0, 1, 0)


@pytest.mark.parametrize("batch_size", [None, 5])
def test_a_loaded_state_resumes_through_a_plain_torch_loader_with_workers(batch_size):
    """The issue as reported: a torch DataLoader with workers (which calls iter() twice) resuming
    from (epoch 0, consumed 50 of 100) read all of epoch 1."""
    donor = DistributedSampler(Indices(100), 1, 0, seed=3)
    iterator = iter(donor)
    head = [next(iterator) for _ in range(50)]
    sampler = DistributedSampler(Indices(100), 1, 0, seed=3)
    sampler.load_state_dict(donor.state_dict())
    rest = flat(tud.DataLoader(Indices(100), sampler=sampler, batch_size=batch_size,
                               num_workers=2))
    assert head + rest == donor.indices(0).tolist()


# ---- Defects that PyTorch's and torchdata's own DataLoader tests found (issue 19) ---------------

def test_a_loader_held_only_by_its_iterator_with_persistent_workers_reads_its_data():
    """Defect 1: a loader nothing else holds, with persistent workers, raised ReferenceError at
    the first batch (its iterator held it through a weak proxy)."""
    assert flat(DataLoader(Indices(20), batch_size=4, num_workers=1,
                           persistent_workers=True)) == list(range(20))
    iterator = iter(DataLoader(Indices(20), sampler=DistributedSampler(Indices(20), 2, 1),
                               batch_size=3, num_workers=2, persistent_workers=True))
    assert flat(iterator) == list(DistributedSampler(Indices(20), 2, 1))


@pytest.mark.parametrize("source", ["drop-in", "foreign", "stateless"])
def test_a_state_taken_right_after_a_resume_is_the_loaded_state(source):
    """Defect 2: state_dict() right after load_state_dict(), before any batch, returned
    {"batches": 0, ...}: a checkpoint taken right after a resume rewound."""
    def make():
        if source == "drop-in":
            sampler = DistributedSampler(Indices(40), 1, 0, shuffle=False)
            return DataLoader(Indices(40), sampler=sampler, batch_size=4, num_workers=2)
        if source == "foreign":
            return DataLoader(Indices(40), sampler=CountingSampler(40), batch_size=4,
                              num_workers=2)
        return DataLoader(Indices(40), batch_size=4, num_workers=2)

    first = make()
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    state = first.state_dict()
    del iterator
    assert state["batches"] == 3
    resumed = make()
    resumed.load_state_dict(copy.deepcopy(state))
    assert resumed.state_dict() == state
    assert flat(resumed) == list(range(12, 40))


class CountingSampler(tud.Sampler):
    """torchdata's protocol on a foreign sampler: state_dict/load_state_dict."""

    def __init__(self, size):
        self.size, self.start, self.yielded = size, 0, 0

    def __len__(self):
        return self.size - self.start

    def __iter__(self):
        start, self.start, self.yielded = self.start, 0, 0
        for index in range(start, self.size):
            self.yielded = index + 1
            yield index

    def state_dict(self):
        return {"yielded": self.yielded}

    def load_state_dict(self, state):
        self.start = state["yielded"]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateless_sampler_resumed_twice_reads_each_batch_once(workers):
    """Defect 3: with a sampler without state (replayed on resume), save after 3 batches,
    resume, take 2, save, resume again: the job read [0, 1, 2, 3, 4, 2, 3, 4, ...]."""
    read = []
    dl = DataLoader(Indices(30), batch_size=1, num_workers=workers)
    iterator = iter(dl)
    read += flat(next(iterator) for _ in range(3))
    state = dl.state_dict()
    del iterator
    dl = DataLoader(Indices(30), batch_size=1, num_workers=workers)
    dl.load_state_dict(state)
    iterator = iter(dl)
    read += flat(next(iterator) for _ in range(2))
    state = dl.state_dict()
    assert state["batches"] == 5
    del iterator
    dl = DataLoader(Indices(30), batch_size=1, num_workers=workers)
    dl.load_state_dict(state)
    read += flat(dl)
    assert read == list(range(30))
    assert dl.state_dict()["batches"] == 0  # the pass ended: the next one starts afresh


def test_the_loader_is_generic_like_torchs():
    """Defect 4: DataLoader[List[Tensor]] raised 'is not a generic class'."""
    from typing import List
    alias = DataLoader[List[torch.Tensor]]
    assert flat(alias(Indices(5), batch_size=2)) == list(range(5))


def test_in_order_false_with_workers_is_refused_in_one_line():
    if "in_order" not in inspect.signature(tud.DataLoader.__init__).parameters:
        pytest.skip(f"torch {torch.__version__}'s DataLoader has no in_order")
    with pytest.raises(ValueError, match=r"^in_order = False is not supported .*allowed: "
                                         r"in_order=True$"):
        DataLoader(Indices(10), batch_size=2, num_workers=2, in_order=False)
    # One process reads in order anyway.
    assert flat(DataLoader(Indices(10), batch_size=2, in_order=False)) == list(range(10))


def test_a_loader_resumed_in_the_middle_of_an_epoch_with_persistent_workers_then_goes_on():
    """A resumed pass, then the next epochs on the same persistent workers: each epoch's share
    is PyTorch's."""
    sampler = DistributedSampler(Indices(), 2, 1, seed=4)
    dl = DataLoader(Indices(), sampler=sampler, batch_size=5, num_workers=2,
                    persistent_workers=True)
    first = DataLoader(Indices(), sampler=DistributedSampler(Indices(), 2, 1, seed=4),
                       batch_size=5)
    iterator = iter(first)
    head = flat([next(iterator), next(iterator)])
    dl.load_state_dict(first.state_dict())
    for epoch in range(3):
        sampler.set_epoch(epoch)
        torch_sampler = TorchDistributedSampler(Indices(), 2, 1, seed=4)
        torch_sampler.set_epoch(epoch)
        got = flat(dl)
        assert (head + got if epoch == 0 else got) == list(torch_sampler)


@pytest.mark.skipif(not TORCHDATA, reason=NO_TORCHDATA)
@pytest.mark.parametrize("workers", [0, 2])
def test_torchdatas_loader_resumes_the_iterable_adapter_per_worker(workers):
    """torchdata's StatefulDataLoader keeps each worker's iterator state: the adapter's iterator
    is Stateful, so each rank resumes exactly (same world size, rank and workers); a state of
    another rank is refused, naming the field."""
    stateful = torchdata_stateful()
    world, epoch = 2, 3
    states = []
    for rank in range(world):
        def make():
            adapter = DistributedIterableDataset(Indices(), 4, world, rank, seed=5)
            adapter.set_epoch(epoch)
            return stateful.StatefulDataLoader(adapter, batch_size=4, num_workers=workers)
        share = DistributedSampler(Indices(), world, rank, seed=5).indices(epoch).tolist()
        dl = make()
        iterator = iter(dl)
        head = flat(next(iterator) for _ in range(5))
        states.append(dl.state_dict())
        del iterator
        resumed = make()
        resumed.load_state_dict(copy.deepcopy(states[-1]))
        assert head + flat(resumed) == share
    wrong = make()  # rank 1's loader, rank 0's state
    wrong.load_state_dict(states[0])
    with pytest.raises(ValueError, match="rank = 0 but this worker's rank = 1") as raised:
        list(wrong)
    # The error's traceback holds the loader's iterator (with its 2 workers) in a reference cycle
    # (the frame of torch's ExceptionWrapper.reraise holds the error). Left to pytest's teardown or
    # the garbage collector, the workers' shutdown took 20 s on torch 2.13 (torch's 5 s status
    # interval per wait); freed here, while its queues are alive, it takes a fraction of a second.
    raised.value.__traceback__ = None
    del raised


# ---- States that do not fit, and ranks out of step (issue 21, defect 8) ------------------------

def test_only_one_rank_loading_a_checkpoint_stops_every_rank_naming_the_call(monkeypatch):
    """Rank 0 calls load_state_dict while the others start their first pass (the configuration
    check): every rank gets one clear error, not another collective's payload (TypeError)."""
    state = DistributedSampler(Indices(), 3, 0, seed=11).state_dict()
    FakeGroup(monkeypatch, 3, lambda rank, obj: obj,
              call=lambda rank, call: call if rank == 0 else "check_configuration")
    sampler = DistributedSampler(Indices(), 3, 0, seed=11)
    with pytest.raises(CheckpointMismatch, match=r"call = 'load_state_dict' on rank 0; "
                                                 r"'check_configuration' on ranks 1, 2.*every "
                                                 r"rank must call load_state_dict"):
        sampler.load_state_dict(state)
    # The other ranks' side: their configuration check meets rank 0's load.
    FakeGroup(monkeypatch, 3, lambda rank, obj: obj,
              call=lambda rank, call: "load_state_dict" if rank == 0 else call)
    with pytest.raises(ConfigurationMismatch, match="every rank must call check_configuration"):
        next(iter(DistributedSampler(Indices(), 3, 1, seed=11)))


@pytest.mark.parametrize("name", ["blended", "weighted", "bucketed", "eval"])
def test_a_state_of_another_kind_names_the_kind(name):
    policy = SAMPLERS[name][0](2, 0)
    kind = type(policy).__name__
    with pytest.raises(ValueError, match=f"state kind = '{kind}': a {kind}'s state_dict\\(\\), "
                                         "not a DistributedSampler's"):
        DistributedSampler(Indices(), 2, 0).load_state_dict(policy.state_dict())
    with pytest.raises(ValueError, match="a distsampler.torch.DistributedSampler's state_dict"):
        policy.load_state_dict(DistributedSampler(Indices(), 2, 0).state_dict())


@pytest.mark.parametrize("field,value", [("consumed", 10**30), ("consumed", -1),
                                         ("world_size", -3), ("world_size", 0),
                                         ("world_size", 2**64), ("epoch", 2**64)])
def test_a_policy_state_edited_with_its_checksum_recomputed_is_still_refused(field, value):
    """The checksum only catches accidents: an edit with the checksum recomputed must still
    meet the fields' ranges, naming the field."""
    sampler = SAMPLERS["blended"][0](2, 0)
    state = sampler.state_dict()
    fields = {key: v for key, v in state.items() if key != "checksum"}
    fields[field] = value
    # The policy format's checksum (state_dict.h), recomputed as a deliberate forger would.
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    edited = {**fields, "checksum": zlib.crc32(canonical)}
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=f"state {field} = {value} is out of range"):
        sampler.load_state_dict(edited)
    assert sampler.state_dict() == before


def test_checkpoint_mismatch_is_importable_where_it_is_raised():
    import distsampler.data
    import distsampler.policies
    import distsampler.torch
    assert (distsampler.data.CheckpointMismatch is distsampler.policies.CheckpointMismatch
            is distsampler.torch.CheckpointMismatch)
