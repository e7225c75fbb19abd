"""The state.h bindings (distsampler._core) against an independent encoder of the byte format
(struct and zlib, from docs/design.md's table), and the configuration agreement of
distsampler.torch.DistributedSampler with torch.distributed's collective replaced by a fake."""
import json
import random
import struct
import zlib

import pytest

from distsampler import _core

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)
import torch.distributed as dist  # noqa: E402

from distsampler.torch import ConfigurationMismatch, DistributedSampler  # noqa: E402


def independent_encoding(size, seed, shuffle, drop_last, uneven, order, randperm, rounds, epoch,
                         consumed, feistel_version=1):
    flags = shuffle | drop_last << 1 | (seed < 0) << 2 | uneven << 3
    # Byte 20: 2 for feistel version 2, else 0 (version 1 as written before version 2 existed).
    body = b"DSSTATE\0" + struct.pack("<HHIBBBBBBHQQQQ", 1, 60, 1, order == "feistel",
                                      randperm == "classic", flags, rounds,
                                      2 if feistel_version == 2 else 0, 0, 0, size,
                                      seed % 2**64, epoch, consumed)
    return body + struct.pack("<I", zlib.crc32(body))


def random_sampler(rng):
    size = rng.randrange(0, 5000)
    world = rng.randrange(1, 9)
    return dict(size=size, world_size=world, rank=rng.randrange(world),
                seed=rng.choice([rng.randrange(-2**63, 0), rng.randrange(2**64)]),
                shuffle=rng.random() < 0.5, drop_last=rng.random() < 0.5,
                order=rng.choice(["torch", "feistel"]),
                randperm=rng.choice([_core.RandpermVariant.current,
                                     _core.RandpermVariant.classic]),
                feistel_version=rng.choice([1, 2]))


@pytest.mark.parametrize("trial", range(50))
def test_encoding_matches_the_format_description(trial):
    rng = random.Random(500 + trial)
    config = random_sampler(rng)
    sampler = _core.DistributedSampler(**config)
    epoch, consumed = rng.randrange(2**64), rng.randrange(2**64)
    state = _core.make_state(sampler, epoch, consumed)
    torch_order = config["order"] == "torch"
    randperm = config["randperm"].name if torch_order else "current"
    version = 1 if torch_order else config["feistel_version"]
    # The sampler takes its version's default rounds, which the state names: 8 for either version.
    rounds = 0 if torch_order else 8
    expected = independent_encoding(config["size"], config["seed"], config["shuffle"],
                                    config["drop_last"], False, config["order"], randperm,
                                    rounds, epoch, consumed, version)
    encoded = _core.encode_state(state)
    assert encoded == expected
    assert _core.decode_state(encoded) == state
    text = _core.state_to_json(state)
    assert json.loads(text)["crc32"] == struct.unpack("<I", expected[56:])[0]
    assert _core.state_from_json(text) == state
    f = state.config
    assert (f.size, f.seed, f.shuffle, f.drop_last, f.uneven, f.order, f.randperm,
            f.feistel_rounds, f.algorithm_version, f.feistel_version) == (
        config["size"], config["seed"], config["shuffle"], config["drop_last"], False,
        config["order"], randperm, rounds, _core.ORDER_ALGORITHM_VERSION, version)
    assert ("feistel_version" in json.loads(text)) == (version == 2)


def test_an_uneven_state_written_independently_decodes():
    data = independent_encoding(1001, 5, True, False, True, "torch", "current", 0, 2, 500)
    state = _core.decode_state(data)
    assert state.config.uneven and (state.epoch, state.consumed) == (2, 500)
    assert _core.encode_state(state) == data
    assert json.loads(_core.state_to_json(state))["uneven"] is True
    # uneven excludes drop_last: a well-sealed state with both is refused by name.
    both = independent_encoding(1001, 5, True, True, True, "torch", "current", 0, 2, 500)
    with pytest.raises(ValueError, match="uneven = true with drop_last = true"):
        _core.decode_state(both)


def test_every_single_byte_flip_is_a_value_error():
    good = _core.encode_state(_core.make_state(
        _core.DistributedSampler(1000, 4, 0, -3, True, False, "torch",
                                 _core.RandpermVariant.classic), 7, 996))
    for i in range(len(good)):
        for x in range(1, 256):
            bad = bytearray(good)
            bad[i] ^= x
            with pytest.raises(ValueError, match="^state: "):
                _core.decode_state(bytes(bad))
    for n in range(len(good)):
        with pytest.raises(ValueError, match="truncated"):
            _core.decode_state(good[:n])


def test_fingerprint_fields_are_the_tables_in_its_order():
    f = _core.fingerprint(_core.DistributedSampler(10, 2, 0, -3, True, False, "feistel",
                                                   _core.RandpermVariant.current, False, 2))
    fields = _core.fingerprint_fields(f)
    assert tuple(name for name, _ in fields) == _core.FINGERPRINT_FIELDS
    assert fields[2] == ("seed", -3) and fields[6] == ("order", "feistel")
    for name, value in fields:  # the attributes are the table's values, with the same types
        assert getattr(f, name) == value and type(getattr(f, name)) is type(value), name
    assert repr(f) == "Fingerprint(" + ", ".join(
        f"{name}={f.field_value(name)}" for name, _ in fields) + ")"
    # What a state written before a field existed means.
    assert _core.FINGERPRINT_ABSENT == {"uneven": False, "feistel_version": 1}


def test_fingerprints_disagreement_and_resume():
    a = _core.DistributedSampler(103, 4, 0, 0, True, False, "feistel",
                                 _core.RandpermVariant.current)
    b = _core.DistributedSampler(103, 3, 2, 7, True, False, "feistel",
                                 _core.RandpermVariant.classic)  # irrelevant to feistel
    fa, fb = _core.fingerprint(a), _core.fingerprint(b)
    assert _core.differing_fields(fa, fb) == ["seed"] and fa != fb
    assert fb.field_value("seed") == "7" and "seed=7" in repr(fb)
    assert _core.describe_disagreement([fa, fa, fa]) == ""
    assert _core.describe_disagreement([fa, fb, fa, fa]) == \
        "seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1"
    # Resume on another world size: b's view of a's state is b.epoch(e, C).
    c = _core.DistributedSampler(103, 3, 2, 0, True, False, "feistel",
                                 _core.RandpermVariant.current)
    view = _core.resume(c, _core.make_state(a, 3, 40))
    assert list(view) == list(c.epoch(3, 40)) and view.start == 40
    assert _core.consumed_after(view, 2) == 40 + 2 * 3
    with pytest.raises(IndexError, match="taken"):
        _core.consumed_after(view, len(view) + 1)
    with pytest.raises(ValueError, match="seed = 0 in the state, 7 here"):
        _core.resume(b, _core.make_state(a, 3, 40))
    assert len(_core.resume(c, _core.make_state(a, 3, 105))) == 0  # complete


# ---- configuration agreement, with the collective faked ----

class FakeGroup:
    """all_gather_object over `world` ranks whose other members send `others[r]` (bytes) as
    their payload of the same collective or, by default, the caller's own object."""

    def __init__(self, monkeypatch, world, others=None):
        self.calls = 0
        self.world, self.others = world, others or {}
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
        monkeypatch.setattr(dist, "all_gather_object", self.all_gather_object)

    def all_gather_object(self, out, obj, group=None):
        self.calls += 1
        assert len(out) == self.world
        for r in range(self.world):
            out[r] = {**obj, "payload": self.others[r]} if r in self.others else obj


def fingerprint_bytes(**kwargs):
    sampler = DistributedSampler(range(100), 4, 0, **kwargs)
    return _core.encode_state(_core.make_state(sampler._plain.sampler, 0, 0))


def test_agreement_runs_once_per_sampler(monkeypatch):
    group = FakeGroup(monkeypatch, 4)
    sampler = DistributedSampler(range(100), 4, 2, seed=5)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert len(list(sampler)) == 25
    assert group.calls == 1
    next(iter(DistributedSampler(range(100), 4, 2, seed=5, check_agreement=False)))
    assert group.calls == 1
    # A sampler for fewer replicas than the group (evaluation on rank 0 only, say) does not
    # check by itself: the other ranks may never iterate it. Explicitly, it does.
    alone = DistributedSampler(range(100), 1, 0, seed=5)
    assert len(list(alone)) == 100 and group.calls == 1
    alone.check_configuration()
    assert group.calls == 2


def test_a_rank_with_another_seed_stops_the_sampler_with_the_fields_and_ranks(monkeypatch):
    group = FakeGroup(monkeypatch, 4, {1: fingerprint_bytes(seed=7)})
    sampler = DistributedSampler(range(100), 4, 0, seed=0)
    for _ in range(2):  # raises again: a failed check is not remembered as passed
        with pytest.raises(ConfigurationMismatch) as error:
            next(iter(sampler))  # the pass, and its check, start at the first next()
        assert str(error.value) == (
            "the sampler configuration differs across ranks, refusing to start: seed differs "
            "across ranks: 0 on ranks 0, 2, 3; 7 on rank 1")
    assert group.calls == 2 and isinstance(error.value, ValueError)
    # Several fields, each on its own line.
    FakeGroup(monkeypatch, 3, {2: fingerprint_bytes(shuffle=False, order="feistel")})
    with pytest.raises(ConfigurationMismatch, match="(?s)shuffle differs across ranks: true on "
                       "ranks 0, 1; false on rank 2\norder differs across ranks: torch on ranks "
                       "0, 1; feistel on rank 2"):
        next(iter(DistributedSampler(range(100), 3, 0)))
    # Skipped when disabled.
    group = FakeGroup(monkeypatch, 4, {1: fingerprint_bytes(seed=7)})
    assert len(list(DistributedSampler(range(100), 4, 0, check_agreement=False))) == 25
    assert group.calls == 0
