"""distsampler.torch.DistributedSampler against live torch.utils.data.DistributedSampler
(Debian's python3-torch), plus auto_epoch and state_dict."""
import json
import random
import re
import warnings

import numpy as np
import pytest

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)
import torch.utils.data as tud  # noqa: E402

from distsampler import _core  # noqa: E402
from distsampler._core import PASS_CHUNK as _CHUNK  # noqa: E402  (indices per chunk)
from distsampler.torch import STATE_VERSION, DistributedSampler  # noqa: E402


def both(size, world_size, rank, seed=0, shuffle=True, drop_last=False, **ours):
    args = dict(num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                drop_last=drop_last)
    return DistributedSampler(range(size), **args, **ours), tud.DistributedSampler(range(size), **args)


def random_config(rng):
    size = rng.choice([rng.randrange(0, 100), rng.randrange(0, 20000),
                       2 ** rng.randrange(1, 17) + rng.randrange(-3, 4)])
    world_size = rng.randrange(1, 65)
    seed = rng.choice([0, rng.randrange(-2**63, 0), rng.randrange(2**64 - 2**33),
                       rng.randrange(2**32)])
    return dict(size=max(size, 0), world_size=world_size, rank=rng.randrange(world_size),
                seed=seed, shuffle=rng.random() < 0.85, drop_last=rng.random() < 0.5)


@pytest.mark.parametrize("trial", range(80))
def test_random_configurations_match_pytorch(trial):
    rng = random.Random(7000 + trial)
    config = random_config(rng)
    ours, theirs = both(**config)
    assert (len(ours), ours.num_samples, ours.total_size) == \
        (len(theirs), theirs.num_samples, theirs.total_size), config
    for epoch in [0, rng.randrange(1, 5), rng.randrange(2**31)]:
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs), (config, epoch)
        assert ours.epoch == theirs.epoch == epoch


def test_every_rank_of_64_replicas_and_more_than_one_chunk():
    # 3 * 65536 + 5 items on one rank cross many of the iterator's chunks; 64 ranks wrap around.
    for size, world_size, ranks in [(3 * 65536 + 5, 1, [0]), (1000, 64, range(64)),
                                    (10, 64, range(64))]:
        for rank in ranks:
            ours, theirs = both(size, world_size, rank, seed=3)
            for epoch in (0, 1):
                ours.set_epoch(epoch)
                theirs.set_epoch(epoch)
                assert list(ours) == list(theirs), (size, world_size, rank, epoch)


def test_indices_are_python_ints():
    assert all(type(i) is int for i in DistributedSampler(range(10), num_replicas=2, rank=1))


def test_pytorch_attributes():
    ours, theirs = both(10, 3, 2, seed=5, drop_last=True)
    for name in ("num_replicas", "rank", "shuffle", "seed", "drop_last", "num_samples",
                 "total_size", "epoch", "dataset"):
        assert getattr(ours, name) == getattr(theirs, name), name
    ours.epoch = 4  # assigning the attribute is set_epoch, as in PyTorch
    theirs.epoch = 4
    assert list(ours) == list(theirs)


def raised(make):
    try:
        make()
    except Exception as error:  # noqa: BLE001: any error PyTorch raises must be ours too
        return type(error), str(error)
    return None


@pytest.mark.parametrize("world_size,rank", [(2, 2), (2, 5), (3, -1), (0, 0), (-2, 0), (1, -7)])
def test_bad_rank_is_pytorchs_value_error(world_size, rank):
    ours = raised(lambda: DistributedSampler(range(10), num_replicas=world_size, rank=rank))
    theirs = raised(lambda: tud.DistributedSampler(range(10), num_replicas=world_size, rank=rank))
    assert theirs is not None and theirs[0] is ValueError
    assert ours == theirs


# PyTorch's error when a seed or a process group is missing: RuntimeError in 1.13, ValueError in
# 2.x (torch 2.13: "Overflow when unpacking long long", "Default process group has not been
# initialized"). Ours must be one that the installed torch's type catches.
TORCH_ERRORS = (RuntimeError, ValueError)


@pytest.mark.parametrize("kwargs", [{}, {"num_replicas": 2}, {"rank": 0}])
def test_without_a_process_group_both_raise_pytorchs_error(kwargs):
    assert not torch.distributed.is_initialized()
    ours = raised(lambda: DistributedSampler(range(10), **kwargs))
    theirs = raised(lambda: tud.DistributedSampler(range(10), **kwargs))
    assert theirs is not None and theirs[0] in TORCH_ERRORS
    assert ours == theirs


@pytest.mark.parametrize("seed,epoch", [(2**64 - 1, 1), (2**64 - 10, 10), (-2**63, -1)])
def test_seed_plus_epoch_overflow_is_pytorchs_error_when_iterating(seed, epoch):
    theirs = tud.DistributedSampler(range(5), num_replicas=2, rank=0, seed=seed)
    theirs.set_epoch(epoch)
    error = raised(lambda: list(theirs))
    assert error is not None and error[0] in TORCH_ERRORS and "Overflow" in error[1]
    if epoch < 0:  # ours takes epochs in [0, 2^64 - 1] only: rejected when set, by name
        with pytest.raises(ValueError, match="epoch = -1"):
            DistributedSampler(range(5), num_replicas=2, rank=0, seed=seed).set_epoch(epoch)
        return
    ours = DistributedSampler(range(5), num_replicas=2, rank=0, seed=seed)
    ours.set_epoch(epoch)
    iterator = iter(ours)  # a pass starts at its first next(), as do its errors
    with pytest.raises(error[0], match="seed"):  # what `except` of the installed torch catches
        next(iterator)
    assert ours.epoch == epoch and ours.state_dict()["consumed"] == 0


@pytest.mark.parametrize("seed", [2**64, -2**63 - 1, 10**30])
def test_seed_outside_pytorchs_range_is_rejected_when_constructed(seed):
    with pytest.raises(ValueError, match="seed"):
        DistributedSampler(range(5), num_replicas=2, rank=0, seed=seed)


def test_extreme_seeds_match_pytorch():
    for seed in (2**64 - 1, -2**63, 2**63, -1):
        ours, theirs = both(50, 3, 1, seed=seed)
        assert list(ours) == list(theirs), seed


def test_bad_order_and_randperm_name_the_parameter():
    with pytest.raises(ValueError, match="order"):
        DistributedSampler(range(5), num_replicas=1, rank=0, order="random")
    with pytest.raises(ValueError, match="randperm"):
        DistributedSampler(range(5), num_replicas=1, rank=0, randperm="newest")


def test_fill_never_copies_into_another_dtype():
    view = _core.DistributedSampler(10, 1, 0, 0, True, False, "torch",
                                    _core.RandpermVariant.classic).epoch(0)
    with pytest.raises(TypeError):
        view.fill(0, np.zeros(10, dtype=np.int64))
    with pytest.raises(IndexError):
        view.fill(5, np.zeros(6, dtype=np.uint64))


# auto_epoch: the set_epoch pitfall.

def test_by_default_iterating_again_repeats_the_order_as_pytorch_does_and_warns_once():
    ours, theirs = both(100, 4, 1, seed=9)
    assert ours.auto_epoch is False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        passes = [list(ours) for _ in range(3)]
    assert passes == [list(theirs)] * 3
    assert ours.epoch == 0
    assert len(caught) == 1 and caught[0].category is UserWarning
    assert re.search(r"replays epoch 0's order.*set_epoch\(epoch\)", str(caught[0].message))


def test_an_unshuffled_sampler_replays_silently():
    ours, theirs = both(50, 3, 2, shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [list(ours) for _ in range(2)] == [list(theirs)] * 2


def test_auto_epoch_gives_two_orders_and_one_warning():
    ours = DistributedSampler(range(100), num_replicas=4, rank=1, seed=9, auto_epoch=True)
    theirs = tud.DistributedSampler(range(100), num_replicas=4, rank=1, seed=9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        passes = [list(ours) for _ in range(3)]
    assert len(caught) == 1
    assert caught[0].category is UserWarning and "set_epoch" in str(caught[0].message)
    assert "advances to epoch 1" in str(caught[0].message)
    assert len(set(map(tuple, passes))) == 3
    for epoch, indices in enumerate(passes):
        theirs.set_epoch(epoch)
        assert indices == list(theirs)
    assert ours.epoch == 2


def test_auto_epoch_hazard_a_rank_that_iterates_once_more_reads_another_epoch():
    """Why auto_epoch is opt-in: rank 0 iterates its sampler once more than rank 1 (a log line's
    len(list(sampler))), and the two ranks' shares of "epoch 0" then overlap."""
    ranks = [DistributedSampler(range(40), 2, r, seed=3, auto_epoch=True) for r in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        len(list(ranks[0]))  # the extra pass
        shares = [set(sampler) for sampler in ranks]
    assert shares[0] & shares[1]
    # PyTorch's behaviour (the default) keeps the ranks on one epoch.
    ranks = [DistributedSampler(range(40), 2, r, seed=3) for r in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        len(list(ranks[0]))
        shares = [set(sampler) for sampler in ranks]
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(40))


def test_set_epoch_always_wins_and_never_warns():
    ours, theirs = both(64, 2, 0, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for epoch in (0, 0, 5, 3, 3):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)
    ours.set_epoch(7)
    list(ours)
    with pytest.warns(UserWarning, match="set_epoch"):
        list(ours)
    assert ours.epoch == 7


def test_every_rank_advances_alike():
    ranks = [DistributedSampler(range(30), num_replicas=4, rank=r, seed=2, auto_epoch=True)
             for r in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sampler in ranks:
            list(sampler)
        second = [list(sampler) for sampler in ranks]
    for rank, indices in enumerate(second):
        theirs = tud.DistributedSampler(range(30), num_replicas=4, rank=rank, seed=2)
        theirs.set_epoch(1)
        assert indices == list(theirs)


# indices(epoch): the whole share as one array.

@pytest.mark.parametrize("trial", range(20))
def test_indices_is_the_share_iteration_yields(trial):
    rng = random.Random(11000 + trial)
    config = random_config(rng)
    order = rng.choice(["torch", "feistel"])
    ours, theirs = both(**config, order=order)
    for epoch in [0, rng.randrange(1, 5), rng.randrange(2**31)]:
        before = ours.state_dict()
        array = ours.indices(epoch)
        assert array.dtype == np.int64 and array.shape == (len(ours),)
        assert ours.state_dict() == before  # neither read nor changed
        ours.set_epoch(epoch)
        assert array.tolist() == list(ours), (config, order, epoch)
        if order == "torch":
            theirs.set_epoch(epoch)
            assert array.tolist() == list(theirs), (config, epoch)


def test_indices_rejects_what_set_epoch_and_iteration_reject():
    sampler = DistributedSampler(range(10), 2, 0, seed=2**64 - 2)
    for epoch in (-1, 2**64):
        with pytest.raises(ValueError, match="epoch"):
            sampler.indices(epoch)
    with pytest.raises(TypeError):
        sampler.indices(1.0)
    with pytest.raises(RuntimeError):  # seed + epoch beyond 2^64 - 1, as iter() after set_epoch
        sampler.indices(2)


# state_dict / load_state_dict.

def take(iterator, k):
    return [next(iterator) for _ in range(k)]


@pytest.mark.parametrize("trial", range(30))
def test_resuming_mid_epoch_yields_exactly_the_remaining_indices(trial):
    rng = random.Random(9000 + trial)
    config = random_config(rng)
    order = rng.choice(["torch", "feistel"])
    size, world_size = config.pop("size"), config.pop("world_size")
    config.pop("rank")
    epoch = rng.randrange(4)
    ranks = [DistributedSampler(range(size), world_size, r, order=order, **config)
             for r in range(world_size)]
    full = []
    for sampler in ranks:
        sampler.set_epoch(epoch)
        full.append(list(sampler))
    k = rng.randrange(len(ranks[0]) + 1)
    iterators = []
    for sampler in ranks:
        sampler.set_epoch(epoch)
        iterators.append(iter(sampler))
        take(iterators[-1], k)
    states = [sampler.state_dict() for sampler in ranks]
    assert all(state == states[0] for state in states)  # rank-independent: one file for all
    state = json.loads(json.dumps(states[0]))  # plain data
    assert state["consumed"] == k * world_size and state["epoch"] == epoch
    for rank in range(world_size):
        fresh = DistributedSampler(range(size), world_size, rank, order=order, **config)
        fresh.load_state_dict(state)
        fresh.set_epoch(epoch)  # a resuming loop sets the state's epoch: the position is kept
        assert fresh.state_dict() == state
        assert list(fresh) == full[rank][k:], (size, world_size, rank, k)
        assert fresh.state_dict()["consumed"] == fresh.total_size  # the whole epoch, padding too


def test_the_count_is_exact_at_every_chunk_boundary():
    # The iterator hands out lists of _CHUNK indices; the state counts what was taken of each.
    size, world_size = 2 * (3 * _CHUNK + 5) - 1, 2
    full = list(DistributedSampler(range(size), world_size, 1, seed=6, order="feistel"))
    for k in (0, 1, _CHUNK - 1, _CHUNK, _CHUNK + 1, 2 * _CHUNK, len(full) - 1, len(full)):
        sampler = DistributedSampler(range(size), world_size, 1, seed=6, order="feistel")
        taken = take(iter(sampler), k)
        state = sampler.state_dict()
        assert taken == full[:k] and state["consumed"] == k * world_size, k
        fresh = DistributedSampler(range(size), world_size, 1, seed=6, order="feistel")
        fresh.load_state_dict(state)
        fresh.set_epoch(0)
        assert list(fresh) == full[k:], k


def test_resume_twice_and_then_the_next_epoch():
    ours, theirs = both(101, 3, 2, seed=4)
    full = list(theirs)
    it = iter(ours)
    first = take(it, 10)
    second_sampler = DistributedSampler(range(101), 3, 2, seed=4)
    second_sampler.load_state_dict(ours.state_dict())
    it = iter(second_sampler)
    middle = take(it, 7)
    third = DistributedSampler(range(101), 3, 2, seed=4)
    third.load_state_dict(second_sampler.state_dict())
    assert first + middle + list(third) == full
    # The resumed epoch is over: the next pass replays epoch 0 from the start, as PyTorch's.
    with pytest.warns(UserWarning, match="replays epoch 0"):
        assert list(third) == list(theirs)


def test_a_complete_epoch_resumes_with_nothing_left_then_moves_on():
    theirs = [tud.DistributedSampler(range(20), 3, 0) for _ in range(2)]
    theirs[1].set_epoch(1)
    for auto_epoch in (True, False):
        ours = DistributedSampler(range(20), 3, 0, auto_epoch=auto_epoch)
        list(ours)
        state = ours.state_dict()
        assert state["consumed"] == ours.total_size
        fresh = DistributedSampler(range(20), 3, 0, auto_epoch=auto_epoch)
        fresh.load_state_dict(state)
        assert fresh.state_dict() == state
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert list(fresh) == []  # the rest of epoch 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if auto_epoch:  # then, without set_epoch, epoch 1
                assert list(fresh) == list(theirs[1])
            else:  # or PyTorch's repeat of epoch 0
                assert list(fresh) == list(theirs[0])
        # A loop that sets the state's epoch gets that epoch's remainder: nothing.
        again = DistributedSampler(range(20), 3, 0, auto_epoch=auto_epoch)
        again.load_state_dict(state)
        again.set_epoch(0)
        assert list(again) == []


def test_state_fields():
    sampler = DistributedSampler(range(10), 2, 1, seed=-5, drop_last=True, order="feistel")
    state = sampler.state_dict()
    text = state.pop("state")
    # Normalized fingerprint: randperm applies to the torch order only.
    assert state == {"version": STATE_VERSION, "epoch": 0, "consumed": 0, "world_size": 2,
                     "algorithm_version": 1, "size": 10, "seed": -5, "shuffle": True,
                     "drop_last": True, "uneven": False, "order": "feistel",
                     "randperm": "current", "feistel_rounds": 8, "feistel_version": 2}
    assert json.loads(text)["crc32"] == _core.crc32(_core.encode_state(_core.make_state(
        sampler._plain.sampler, 0, 0))[:56])


def good_state():
    sampler = DistributedSampler(range(10), 2, 0, seed=3)
    sampler.set_epoch(2)
    take(iter(sampler), 2)
    return sampler.state_dict()


def bad_states():
    good = good_state()
    # Readable entries that disagree with the checksummed state, and malformed ones.
    edits = {"version": [3, 0, "2", None], "epoch": [-1, 2**64, 1.0, "2", 3],
             "consumed": [-1, 12, True, 4.0, 5], "size": [11], "seed": [4, 3.0],
             "shuffle": [False, 1], "drop_last": [True], "uneven": [True, 0],
             "order": ["feistel"], "feistel_rounds": [24],
             # the other variant than "auto" picked: classic on torch < 2.6, current from 2.6
             "randperm": [{"classic": "current", "current": "classic"}[good["randperm"]]],
             "algorithm_version": [2], "world_size": [0, "2", 2.0, None]}
    for key, values in edits.items():
        for value in values:
            yield key, {**good, key: value}
        yield key, {k: v for k, v in good.items() if k != key}
    yield "state must be a dict", [1, 2]
    yield ("state state = .* is not the state's JSON text",
           {**good, "state": json.loads(good["state"])})
    # The checksummed text edited, corrupted, truncated, or from a foreign format version.
    text = good["state"]
    for reason, edited in [("checksum mismatch", text.replace('"consumed": 4', '"consumed": 6')),
                           ("checksum mismatch", text.replace('"seed": 3', '"seed": 4')),
                           ("JSON ends before its object does", text[:-1]), ("JSON has trailing", text + "x"),
                           ("format version 2", text.replace('"version": 1', '"version": 2')),
                           ("JSON ends before its object does", "")]:
        yield "state: " + reason, {**good, "state": edited}


@pytest.mark.parametrize("key,state", list(bad_states()))
def test_a_bad_state_is_rejected_and_changes_nothing(key, state):
    sampler = DistributedSampler(range(10), 2, 0, seed=3)
    sampler.set_epoch(2)
    it = iter(sampler)
    take(it, 2)
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=key):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == before
    rest = DistributedSampler(range(10), 2, 0, seed=3)
    rest.load_state_dict(before)
    rest.set_epoch(2)
    assert before["consumed"] == 4 and len(list(rest)) == len(sampler) - 2 == len(rest) - 2


@pytest.mark.parametrize("field,value", [("seed", 4), ("shuffle", False), ("drop_last", True),
                                         ("order", "feistel")])
def test_a_state_of_another_configuration_is_rejected_naming_the_field(field, value):
    config = dict(seed=3, shuffle=True, drop_last=False, order="torch")
    state = good_state()
    other = DistributedSampler(range(10), 3, 1, **{**config, field: value})
    before = other.state_dict()
    with pytest.raises(ValueError, match=f"state {field} = .* but this sampler's {field} = "):
        other.load_state_dict(state)
    assert other.state_dict() == before
    other = DistributedSampler(range(11), 3, 1, **config)
    with pytest.raises(ValueError, match="state size = 10 but this sampler's size = 11"):
        other.load_state_dict(state)


def global_order(size, epoch, **config):
    whole = DistributedSampler(range(size), 1, 0, **config)
    whole.set_epoch(epoch)
    return list(whole)


@pytest.mark.parametrize("trial", range(40))
def test_resuming_on_another_world_size_reads_the_rest_exactly_once(trial):
    """The elastic rule end to end in one process: W ranks read k samples each, save, and W2
    ranks resume (several times over); every rank's indices are the order's global positions
    C + r, C + r + W2, ..., and all reads together are every index once (plus PyTorch's padding
    from the order's start in the final step, or minus a tail shorter than the last W with
    drop_last)."""
    rng = random.Random(11000 + trial)
    size = rng.choice([rng.randrange(0, 40), rng.randrange(40, 3000)])
    config = dict(seed=rng.randrange(-5, 2**40), shuffle=rng.random() < 0.9,
                  drop_last=rng.random() < 0.5, order=rng.choice(["torch", "feistel"]))
    epoch = rng.randrange(3)
    order = global_order(size, epoch, **config)
    reads, state, world, final_world = [], None, None, 1
    runs = rng.randrange(1, 5)
    for resume in range(runs):
        world = rng.randrange(1, 17)
        ranks = [DistributedSampler(range(size), world, r, **config) for r in range(world)]
        iterators = []
        for rank, sampler in enumerate(ranks):
            if state is not None:
                sampler.load_state_dict(json.loads(json.dumps(state)))
            sampler.set_epoch(epoch)
            iterators.append(iter(sampler))
        start = 0 if state is None else state["consumed"]
        last = resume == runs - 1 or rng.random() < 0.3
        share = len(ranks[0]) if state is None else ranks[0]._core.remaining(min(start, size))
        k = share if last else rng.randrange(share + 1)
        for rank, it in enumerate(iterators):
            got = take(it, k)
            assert got == [order[(start + rank + i * world) % size] for i in range(k)]
            reads += got
        final_world = world if k else final_world  # the run that took the final step
        states = [sampler.state_dict() for sampler in ranks]
        assert all(s == states[0] for s in states)
        state = states[0]
        assert state["consumed"] == start + k * world and state["world_size"] == world
        if last:
            break
    if not config["drop_last"]:
        # Global positions [0, T) with position p reading order[p mod n]; T - n < the last W.
        assert 0 <= len(reads) - size < final_world
        assert sorted(reads) == sorted(order[p % size] for p in range(len(reads)))
    else:
        assert len(set(reads)) == len(reads)
        unread = size - len(reads)
        assert unread < world or unread == 0
        assert set(reads) == set(order[:len(reads)])


def test_a_version_1_state_loads_on_any_world_size():
    """Issue 3's dict (no checksum) is converted; its configuration must still match."""
    v1 = {"version": 1, "epoch": 1, "consumed": 6, "size": 20, "world_size": 3, "seed": 7,
          "shuffle": True, "drop_last": False, "order": "feistel",
          "randperm": DistributedSampler(range(1), 1, 0).state_dict()["randperm"]}
    # Issue 3's states predate version 2 of the feistel order: they resume on version 1 only.
    order = global_order(20, 1, seed=7, order="feistel", feistel_version=1)
    with pytest.raises(ValueError, match="feistel_version = 2; allowed: feistel_version=1"):
        DistributedSampler(range(20), 3, 0, seed=7, order="feistel").load_state_dict(v1)
    for world in (3, 2, 5):
        reads = []
        for rank in range(world):
            sampler = DistributedSampler(range(20), world, rank, seed=7, order="feistel",
                                         feistel_version=1)
            sampler.load_state_dict(v1)
            sampler.set_epoch(1)
            reads.append(list(sampler))
            assert reads[-1] == [order[(6 + rank + i * world) % 20]
                                 for i in range(len(reads[-1]))]
        total = sum(map(len, reads))
        assert sorted(sum(reads, [])) == sorted(order[p % 20] for p in range(6, 6 + total))
    sampler = DistributedSampler(range(20), 2, 0, seed=8, order="feistel", feistel_version=1)
    with pytest.raises(ValueError, match="state seed = 7 does not match"):
        sampler.load_state_dict(v1)
    with pytest.raises(ValueError, match="state consumed = 23"):
        sampler.load_state_dict({**v1, "seed": 8, "consumed": 23})


@pytest.mark.parametrize("version", [1, 2])
def test_feistel_order_matches_the_cli(cli, version):
    ours = DistributedSampler(range(1000), num_replicas=3, rank=2, seed=11, order="feistel",
                              feistel_version=version)
    ours.set_epoch(4)
    expected = cli("indices", "--order", "feistel", "--feistel-version", version, "--size", 1000,
                   "--world-size", 3, "--rank", 2, "--seed", 11, "--epoch", 4).stdout.split()
    assert list(ours) == [int(x) for x in expected]
    assert ours.feistel_version == version


def test_feistel_version_2_is_the_default_and_differs_from_version_1():
    v2 = DistributedSampler(range(1000), 1, 0, seed=3, order="feistel")
    v1 = DistributedSampler(range(1000), 1, 0, seed=3, order="feistel", feistel_version=1)
    assert v2.feistel_version == 2 and DistributedSampler(range(5), 1, 0).feistel_version == 1
    assert sum(a == b for a, b in zip(v1, v2)) < 10
    for bad in (0, 3, "2", 2.0):
        with pytest.raises(ValueError, match="feistel_version = .* allowed: 1, 2"):
            DistributedSampler(range(10), 1, 0, order="feistel", feistel_version=bad)


def test_a_state_dict_of_the_previous_release_resumes_on_feistel_version_1():
    """A state_dict() written before feistel version 2 existed: no "feistel_version" entry, and
    none in its JSON. It means version 1: it resumes there bit for bit and nowhere else."""
    old = DistributedSampler(range(100), 2, 1, seed=4, order="feistel", feistel_version=1)
    old.set_epoch(3)
    it = iter(old)
    take(it, 7)
    state = old.state_dict()
    assert state.pop("feistel_version") == 1
    assert "feistel_version" not in json.loads(state["state"])  # as the old release wrote it
    rest = list(it)
    resumed = DistributedSampler(range(100), 2, 1, seed=4, order="feistel", feistel_version=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)
    assert list(resumed) == rest
    with pytest.raises(ValueError, match="state feistel_version = 1 but this sampler's "
                                         "feistel_version = 2"):
        DistributedSampler(range(100), 2, 1, seed=4, order="feistel").load_state_dict(state)


# The GIL is released around bulk work: another Python thread runs meanwhile.

def longest_pause_during(call):
    """Runs call() in a thread while this thread keeps reading the clock; returns the call's
    duration and the longest stretch this thread could not run inside it. Holding the GIL, the
    call would stall this thread for about its whole duration."""
    import threading
    import time
    window = []

    def work():
        window.append(time.perf_counter())
        call()
        window.append(time.perf_counter())

    stamps = []
    thread = threading.Thread(target=work)
    thread.start()
    while thread.is_alive():
        stamps.append(time.perf_counter())
    thread.join()
    begin, end = window
    inside = [begin] + [t for t in stamps if begin < t < end] + [end]
    return end - begin, max(b - a for a, b in zip(inside, inside[1:]))


def test_building_an_epoch_and_filling_a_window_release_the_gil():
    # The probe catches a call that holds the GIL: sum over a range runs in C without releasing.
    duration, pause = longest_pause_during(lambda: sum(range(2 * 10**7)))
    assert pause > duration / 2, (duration, pause)
    core = _core.DistributedSampler(2 * 10**7, 1, 0, 0, True, False, "torch",
                                    _core.RandpermVariant.classic)
    duration, pause = longest_pause_during(lambda: core.epoch(3))
    assert pause < duration / 2, (duration, pause)
    view = _core.DistributedSampler(10**9, 1, 0, 0, True, False, "feistel",
                                    _core.RandpermVariant.classic).epoch(0)
    out = np.empty(16 * 10**6, dtype=np.uint64)
    duration, pause = longest_pause_during(lambda: view.fill(0, out))
    assert pause < duration / 2, (duration, pause)
