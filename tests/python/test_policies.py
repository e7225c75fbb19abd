"""distsampler.policies through Python: each guarantee of docs/design.md "Policies", the same
global stream for W = 1, 3, 8 where it is claimed, parity with the CLI and with PyTorch, and bad
inputs as ValueError naming the parameter."""
import collections
import fractions
import random
import warnings

import numpy as np
import pytest

import torch  # noqa: E402  (a dependency of the suite: missing, it fails)
import torch.utils.data as tud  # noqa: E402

from distsampler import _core  # noqa: E402
from distsampler.policies import (  # noqa: E402
    BlendedDistributedSampler, BucketedBatchSampler, DistributedBatchSampler,
    DistributedEvalSampler, DistributedSamplerWrapper, MaskedDataset, ShardedDistributedSampler,
    WeightedDistributedSampler, class_balanced_weights)

WORLD_SIZES = (1, 3, 8)


def epoch_of(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def interleave(per_rank):
    """Rank r's i-th item is global position r + i * W: the job's stream, padding included."""
    world_size = len(per_rank)
    out = [None] * sum(len(xs) for xs in per_rank)
    for rank, xs in enumerate(per_rank):
        out[rank::world_size] = xs
    return out


def ranks(make, world_size, epoch=0):
    return [epoch_of(make(world_size, rank), epoch) for rank in range(world_size)]


# ---- Duplicate-free evaluation ------------------------------------------------------------------

@pytest.mark.parametrize("shuffle", [False, True])
def test_uneven_reads_every_sample_once_and_the_stream_is_the_same_for_every_world_size(shuffle):
    for n in list(range(0, 30)) + [97, 1000]:
        streams = []
        for w in WORLD_SIZES:
            per_rank = ranks(lambda w, r: DistributedEvalSampler(range(n), w, r, shuffle=shuffle,
                                                                 seed=5), w, epoch=2)
            lengths = [len(xs) for xs in per_rank]
            assert max(lengths) - min(lengths) <= 1, (n, w)
            assert lengths == [len(DistributedEvalSampler(range(n), w, r)) for r in range(w)]
            assert sum(lengths) == n
            stream = interleave(per_rank)
            assert sorted(stream) == list(range(n)), (n, w)
            streams.append(stream)
        assert all(s == streams[0] for s in streams), n


@pytest.mark.parametrize("n,w", [(10, 3), (9999, 3), (7, 8), (16, 4), (1, 3), (0, 2)])
def test_padded_with_mask_is_pytorchs_sampler_with_the_repeats_flagged(n, w):
    real = []
    for rank in range(w):
        ours = DistributedEvalSampler(range(n), w, rank, shuffle=True, seed=3, padded=True)
        torchs = tud.DistributedSampler(range(n), w, rank, shuffle=True, seed=3)
        ours.set_epoch(4)
        torchs.set_epoch(4)
        indices = list(ours)
        assert indices == list(torchs) and len(ours) == len(torchs)
        mask = ours.mask
        assert mask.dtype == torch.bool and len(mask) == len(indices)
        assert int(mask.sum()) == ours.num_real
        assert not mask[ours.num_real:].any()  # the padding is last
        real += [i for i, keep in zip(indices, mask.tolist()) if keep]
        ours.set_epoch(4)
        ours.with_mask = True
        assert list(ours) == list(zip(indices, mask.tolist()))
    assert sorted(real) == list(range(n))


@pytest.mark.parametrize("mode", ["uneven", "mask"])
def test_eval_matches_the_cli(cli, mode):
    n, w, seed, epoch = 1001, 3, 11, 2
    for rank in range(w):
        args = ["indices", "--size", n, "--world-size", w, "--rank", rank, "--seed", seed,
                "--epoch", epoch, "--" + mode]
        lines = [line.split() for line in cli(*args).stdout.splitlines()]
        sampler = DistributedEvalSampler(range(n), w, rank, shuffle=True, seed=seed,
                                         padded=mode == "mask", with_mask=True,
                                         randperm="current")
        pairs = epoch_of(sampler, epoch)
        if mode == "uneven":
            assert [int(x[0]) for x in lines] == [i for i, _ in pairs]
            assert all(real for _, real in pairs)
        else:
            assert [(int(i), pad == "0") for i, pad in lines] == pairs


def test_masked_dataset_carries_the_mask_through_a_dataloader():
    n, w = 10, 3
    data = torch.arange(n, dtype=torch.float32) * 10
    seen = []
    steps = set()
    for rank in range(w):
        sampler = DistributedEvalSampler(range(n), w, rank, padded=True, with_mask=True)
        loader = tud.DataLoader(MaskedDataset(data), batch_size=2, sampler=sampler)
        count = 0
        for samples, mask in loader:
            assert mask.dtype == torch.bool
            seen += samples[mask].tolist()
            count += 1
        steps.add(count)
    assert len(steps) == 1  # every rank the same number of steps
    assert sorted(seen) == (data).tolist()
    assert MaskedDataset(data)[3] == (data[3], True)


def test_eval_bad_inputs():
    with pytest.raises(ValueError, match="Invalid rank"):
        DistributedEvalSampler(range(10), 3, 3)
    with pytest.raises(ValueError, match="order"):
        DistributedEvalSampler(range(10), 3, 0, order="random")
    with pytest.raises(ValueError, match="seed"):
        DistributedEvalSampler(range(10), 3, 0, seed=2**64)
    with pytest.raises(ValueError, match="randperm"):
        DistributedEvalSampler(range(10), 3, 0, randperm="new")


# ---- Weighted -----------------------------------------------------------------------------------

WEIGHTS = [0.0, 1.0, 2.0, 3.0, 0.5, 10.0, 0.0, 4.0]


@pytest.mark.parametrize("num_samples", [1, 100, 1001])
def test_weighted_stream_is_the_same_for_every_world_size(num_samples):
    reference = None
    for w in WORLD_SIZES:
        for epoch in (0, 3):
            per_rank = ranks(lambda w, r: WeightedDistributedSampler(WEIGHTS, num_samples, w, r,
                                                                     seed=9), w, epoch)
            assert all(len(xs) == -(-num_samples // w) for xs in per_rank)
            stream = interleave(per_rank)
            if w == 1:
                reference = reference or {}
                reference[epoch] = stream
            # Without drop_last the ranks draw past num_samples: the stream simply continues.
            assert stream[:num_samples] == reference[epoch], (w, epoch)
    assert reference[0] != reference[3] or num_samples == 1


def test_weighted_drop_last_and_random_access_match_the_global_stream():
    one = WeightedDistributedSampler(WEIGHTS, 1000, 1, 0, seed=4)
    stream = epoch_of(one, 2)
    core = _core.WeightedSampler(np.array(WEIGHTS), len(WEIGHTS), 1000, 1, 0, 4, False)
    assert [core.global_draw(2, g) for g in range(1000)] == stream
    per_rank = ranks(lambda w, r: WeightedDistributedSampler(WEIGHTS, 1000, w, r, seed=4,
                                                             drop_last=True), 3, epoch=2)
    assert [len(xs) for xs in per_rank] == [333] * 3
    assert interleave(per_rank) == stream[:999]


def test_weighted_frequencies_follow_the_weights():
    draws = 200_000
    counts = np.bincount(epoch_of(WeightedDistributedSampler(WEIGHTS, draws, 1, 0), 0),
                         minlength=len(WEIGHTS))
    p = np.array(WEIGHTS) / sum(WEIGHTS)
    assert counts[0] == 0 and counts[6] == 0  # weight zero is never drawn
    expected = p * draws
    chi2 = sum((counts[k] - expected[k]) ** 2 / expected[k] for k in range(len(p)) if p[k] > 0)
    assert chi2 < 30  # 5 degrees of freedom: P(chi2 > 30) < 2e-5 for a correct sampler


def test_class_balanced_weights_balance_the_classes():
    labels = [0] * 900 + [1] * 90 + [7] * 10
    weights = class_balanced_weights(labels)
    assert weights.dtype == torch.float64
    assert torch.allclose(weights[:2], torch.tensor([1 / 900] * 2, dtype=torch.float64))
    assert float(weights[-1]) == pytest.approx(0.1)
    drawn = epoch_of(WeightedDistributedSampler(weights, 30_000, 1, 0), 0)
    per_class = collections.Counter(labels[i] for i in drawn)
    assert all(abs(per_class[c] - 10_000) < 500 for c in (0, 1, 7)), per_class
    assert torch.equal(class_balanced_weights(torch.tensor(labels)), weights)
    with pytest.raises(ValueError, match="labels"):
        class_balanced_weights([])
    with pytest.raises(ValueError, match="labels"):
        class_balanced_weights([0.5, 1.0])


@pytest.mark.parametrize("weights,message", [
    ([1.0, -1.0, 2.0], r"weights\[1\]"), ([1.0, float("nan")], r"weights\[1\]"),
    ([float("inf"), 1.0], r"weights\[0\]"), ([0.0, 0.0], "weights are all zero"),
    ([], "weights is empty")])
def test_weighted_bad_weights_name_the_weight(weights, message):
    with pytest.raises(ValueError, match=message):
        WeightedDistributedSampler(weights, 10, 1, 0)


def test_weighted_other_bad_inputs():
    with pytest.raises(ValueError, match="weights has length 3; allowed: length == size = 4"):
        WeightedDistributedSampler([1.0, 2.0, 3.0], 10, 1, 0, dataset=range(4))
    with pytest.raises(ValueError, match="num_samples = -1"):
        WeightedDistributedSampler([1.0], -1, 1, 0)
    with pytest.raises(ValueError, match="Invalid rank"):
        WeightedDistributedSampler([1.0], 5, 2, 2)
    with pytest.raises(ValueError, match="epoch"):
        WeightedDistributedSampler([1.0], 5, 1, 0).set_epoch(-1)


def test_auto_epoch_advances_and_warns_once_explicit_epoch_wins():
    sampler = WeightedDistributedSampler(WEIGHTS, 50, 2, 1, seed=1, auto_epoch=True)
    first = list(sampler)
    with pytest.warns(UserWarning, match="set_epoch"):
        second = list(sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        third = list(sampler)
    assert sampler.epoch == 2 and first != second != third
    assert epoch_of(sampler, 1) == second
    off = WeightedDistributedSampler(WEIGHTS, 50, 2, 1, seed=1)  # PyTorch's: replays, warns
    with pytest.warns(UserWarning, match="replays epoch 0"):
        assert list(off) == list(off) == first


# ---- Blended datasets ---------------------------------------------------------------------------

SIZES = [7, 100, 33, 5, 1000]
SKEWED = [0.5, 0.25, 0.15, 0.07, 0.03]


def test_blend_quota_error_stays_within_one_on_every_prefix():
    schedule = _core.QuotaSchedule(np.array(SKEWED))
    assert schedule.error_bound < 1
    total = 1_000_000
    datasets = np.empty(total, dtype=np.uint64)
    schedule.datasets(0, datasets)
    positions = np.arange(1, total + 1)
    weights = np.array(SKEWED) / sum(SKEWED)
    worst = 0.0
    for k in range(len(SKEWED)):
        counts = np.cumsum(datasets == k)
        worst = max(worst, float(np.abs(counts - positions * weights[k]).max()))
        assert schedule.count(k, total) == counts[-1]
    assert worst <= schedule.error_bound + 1e-6 and worst < 1, worst
    far = 10**15 + 12345  # random access far into the stream
    dataset, earlier = schedule.at(far)
    assert earlier == schedule.count(dataset, far)
    assert schedule.count(dataset, far + 1) == earlier + 1


@pytest.mark.parametrize("weights", [[1, 2, 3], SKEWED, [1000, 100, 10, 1, 0.1],
                                     list(range(1, 65)), [1.3**k for k in range(40)]])
def test_blend_quota_error_is_within_the_bound_at_the_end_of_the_stream(weights):
    # Exact: |c_k(i) - i W_k / T| <= error_bound with Python integers and fractions, where
    # W_k / T are the weights themselves whenever quota_exact (was 1.67 at 10^17 and 410 at 2^64
    # for weights 1, 2, 3 against a promised 0.8).
    schedule = _core.QuotaSchedule(np.array(weights, dtype=np.float64))
    quota, total = schedule.quota_weights, schedule.quota_total
    assert sum(quota) == total <= 2**62 and schedule.error_bound < 1.68
    if schedule.quota_exact:
        exact = [fractions.Fraction(w) / sum(map(fractions.Fraction, weights)) for w in weights]
        assert [fractions.Fraction(q, total) for q in quota] == exact
    bound = fractions.Fraction(schedule.error_bound)
    for i in (10**17, 2**63, 2**64 - 2, 2**64 - 1):
        counts = [schedule.count(k, i) for k in range(len(weights))]
        assert sum(counts) == i
        for c, q in zip(counts, quota):
            assert abs(fractions.Fraction(c) - fractions.Fraction(i * q, total)) <= bound, (i, c)
        dataset, earlier = schedule.at(i)
        assert earlier == counts[dataset]


def test_blend_refuses_sizes_whose_flat_indices_would_wrap():
    with pytest.raises(ValueError, match="sizes sum to 18446744073709551621"):
        BlendedDistributedSampler([2**63, 2**63, 5], [1.0, 1.0, 1.0], 10, 1, 0)
    sampler = BlendedDistributedSampler([2**63, 2**63 - 1], [1.0, 1.0], 10, 1, 0)
    assert max(sampler) < 2**64 - 1


@pytest.mark.parametrize("flat", [True, False])
def test_blend_stream_is_the_same_for_every_world_size(flat):
    reference = {}
    for w in WORLD_SIZES:
        for epoch in (0, 2):
            per_rank = ranks(lambda w, r: BlendedDistributedSampler(
                [range(s) for s in SIZES], SKEWED, 1001, w, r, seed=17, flat=flat), w, epoch)
            stream = interleave(per_rank)[:1001]
            reference.setdefault(epoch, stream)
            assert stream == reference[epoch], (w, epoch)
    core = _core.BlendedSampler(np.array(SIZES, dtype=np.uint64), np.array(SKEWED), 1001, 1, 0,
                                17, False)
    offsets = np.concatenate([[0], np.cumsum(SIZES)[:-1]])
    expected = [core.global_sample(2 * 1001 + g) for g in range(1001)]
    if flat:
        expected = [int(offsets[k]) + i for k, i in expected]
    assert reference[2] == expected


def test_blend_flat_indices_address_a_concat_dataset():
    datasets = [[f"{k}:{i}" for i in range(s)] for k, s in enumerate(SIZES)]
    pairs = epoch_of(BlendedDistributedSampler(datasets, SKEWED, 500, 3, 1, flat=False), 1)
    flat = epoch_of(BlendedDistributedSampler(datasets, SKEWED, 500, 3, 1), 1)
    concat = tud.ConcatDataset(datasets)
    assert [concat[i] for i in flat] == [f"{k}:{i}" for k, i in pairs]


def test_blend_each_dataset_is_shuffled_through_its_own_epochs():
    pairs = epoch_of(BlendedDistributedSampler(SIZES, SKEWED, 20000, 1, 0, flat=False), 0)
    drawn = collections.defaultdict(list)
    for k, i in pairs:
        drawn[k].append(i)
    for k, size in enumerate(SIZES):
        xs = drawn[k]
        for e in range(len(xs) // size):
            assert sorted(xs[e * size:(e + 1) * size]) == list(range(size)), (k, e)
        if size >= 5 and len(xs) >= 2 * size:
            assert xs[:size] != xs[size:2 * size]


def test_blend_bad_inputs():
    with pytest.raises(ValueError, match="sizes has length 2"):
        BlendedDistributedSampler([3, 4], [1.0, 1.0, 1.0], 10, 1, 0)
    with pytest.raises(ValueError, match=r"weights\[1\]"):
        BlendedDistributedSampler([3, 4], [1.0, -1.0], 10, 1, 0)
    with pytest.raises(ValueError, match=r"sizes\[1\] = 0"):
        BlendedDistributedSampler([3, 0], [1.0, 1.0], 10, 1, 0)
    with pytest.raises(ValueError, match="samples_per_epoch = -5"):
        BlendedDistributedSampler([3, 4], [1.0, 1.0], -5, 1, 0)
    with pytest.raises(ValueError, match=r"sizes = True is a bool"):
        BlendedDistributedSampler([True, 4], [1.0, 1.0], 10, 1, 0)
    # Sizes as numpy integers are sizes, not datasets.
    assert BlendedDistributedSampler(np.array([3, 4]), [1.0, 1.0], 10, 1, 0).sizes == [3, 4]
    with pytest.raises(ValueError, match="weights is empty"):
        _core.QuotaSchedule(np.array([]))


# ---- Batches ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,batch_size", [(100, 8), (96, 8), (5, 8), (1001, 32)])
def test_batches_are_cut_from_pytorchs_order_and_the_same_for_every_world_size(n, batch_size):
    gen = torch.Generator()
    gen.manual_seed(3 + 2)  # PyTorch's order of epoch 2, seed 3
    order = torch.randperm(n, generator=gen).tolist()
    batches = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    for w in WORLD_SIZES:
        per_rank = ranks(lambda w, r: DistributedBatchSampler(range(n), batch_size, w, r, seed=3),
                         w, epoch=2)
        assert all(len(xs) == -(-len(batches) // w) for xs in per_rank)
        assert [len(s) for s in per_rank] == \
            [len(DistributedBatchSampler(range(n), batch_size, w, r)) for r in range(w)]
        stream = interleave(per_rank)  # the last round wraps around to the first batches
        assert stream == [batches[p % len(batches)] for p in range(len(stream))], w
        dropped = ranks(lambda w, r: DistributedBatchSampler(range(n), batch_size, w, r, seed=3,
                                                             drop_last=True), w, epoch=2)
        full = n // batch_size
        assert interleave(dropped) == batches[:full - full % w]


def test_batch_sampler_in_a_dataloader():
    data = torch.arange(50)
    sampler = DistributedBatchSampler(data, 8, 2, 1, order="feistel", seed=1)
    got = [b.tolist() for b in tud.DataLoader(data, batch_sampler=sampler)]
    sampler.set_epoch(0)
    assert got == list(sampler) and len(got) == len(sampler) == 4  # 7 batches on 2 ranks


@pytest.mark.parametrize("version", [1, 2])
def test_batch_sampler_cuts_the_feistel_order_of_its_version(version):
    from distsampler.torch import DistributedSampler
    sampler = DistributedBatchSampler(range(50), 5, 1, 0, order="feistel", seed=3,
                                      feistel_version=version)
    order = list(DistributedSampler(range(50), 1, 0, seed=3, order="feistel",
                                    feistel_version=version))
    assert [i for b in epoch_of(sampler, 0) for i in b] == order


def test_a_version_1_batch_sampler_state_resumes_on_version_1_only():
    """A state saved before feistel version 2 existed has no feistel_version in its config, as
    a version-1 sampler's state has none now: it loads there, and a version-2 sampler refuses."""
    old = DistributedBatchSampler(range(50), 5, 2, 0, order="feistel", seed=3, feistel_version=1)
    it = iter(old)
    next(it)
    state = old.state_dict()
    assert "feistel_version" not in state["config"]
    rest = list(it)
    again = DistributedBatchSampler(range(50), 5, 2, 0, order="feistel", seed=3,
                                    feistel_version=1)
    again.load_state_dict(state)
    assert list(again) == rest
    with pytest.raises(ValueError, match="feistel_version"):
        DistributedBatchSampler(range(50), 5, 2, 0, order="feistel", seed=3).load_state_dict(state)


@pytest.mark.parametrize("kind", ["eval", "iterable"])
def test_a_state_resumes_on_its_feistel_version_only(kind):
    """The eval sampler and the iterable adapter carry feistel_version in their config where it
    is not the table's value when absent (1): a state of either version loads into a sampler of
    that version only, naming the field otherwise (never the other version's order silently)."""
    from distsampler.data import DistributedIterableDataset

    def make(version):
        if kind == "eval":
            return DistributedEvalSampler(range(50), 2, 0, order="feistel", seed=3,
                                          feistel_version=version)
        return DistributedIterableDataset(range(50), 5, 2, 0, order="feistel", seed=3,
                                          feistel_version=version)

    for saved, other in ((1, 2), (2, 1)):
        state = make(saved).state_dict()
        assert ("feistel_version" in state["config"]) == (saved == 2)
        make(saved).load_state_dict(state)
        with pytest.raises(ValueError, match="feistel_version"):
            make(other).load_state_dict(state)


def waste(batches, lengths):
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - sum(lengths[i] for b in batches for i in b) / slots


def test_bucketed_batches_are_a_partition_of_sorted_batches_with_less_waste():
    rng = random.Random(5)
    lengths = [int(rng.lognormvariate(3, 1)) + 1 for _ in range(4003)]
    batch_size = 16
    epochs = []
    for epoch in (0, 1):
        batches = epoch_of(BucketedBatchSampler(lengths, batch_size, 1, 0, seed=2,
                                                window_batches=32), epoch)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert all(len(b) == batch_size for b in batches[:-1])
        for b in batches:  # each batch is a run of a window sorted by (length, index)
            keys = [(lengths[i], i) for i in b]
            assert keys == sorted(keys)
        epochs.append(batches)
    assert epochs[0] != epochs[1]
    random_batches = epoch_of(DistributedBatchSampler(range(len(lengths)), batch_size, 1, 0,
                                                      order="feistel"), 0)
    assert waste(epochs[0], lengths) < waste(random_batches, lengths) / 3
    # The same list of batches for every world size.
    for w in (3, 8):
        per_rank = ranks(lambda w, r: BucketedBatchSampler(lengths, batch_size, w, r, seed=2,
                                                           window_batches=32), w, epoch=1)
        assert interleave(per_rank)[:len(epochs[1])] == epochs[1]


def test_batch_bad_inputs():
    with pytest.raises(ValueError, match="batch_size = 0"):
        DistributedBatchSampler(range(10), 0, 1, 0)
    # A bool is not a size, as torch's BatchSampler and WeightedRandomSampler say.
    with pytest.raises(ValueError, match="batch_size = True is a bool"):
        DistributedBatchSampler(range(10), True, 1, 0)
    with pytest.raises(ValueError, match="num_samples = True is a bool"):
        WeightedDistributedSampler([1.0, 2.0], True, 1, 0)
    with pytest.raises(ValueError, match="window = False is a bool"):
        ShardedDistributedSampler([3, 4], 1, 0, window=False)
    with pytest.raises(ValueError, match="order"):
        DistributedBatchSampler(range(10), 2, 1, 0, order="nope")
    with pytest.raises(ValueError, match=r"lengths\[2\] = -1"):
        BucketedBatchSampler([3, 4, -1], 2, 1, 0)
    with pytest.raises(ValueError, match="lengths has dtype float"):
        BucketedBatchSampler([3, 4, 1.5], 2, 1, 0)
    with pytest.raises(ValueError, match="window_batches = 0"):
        BucketedBatchSampler([3, 4, 1], 2, 1, 0, window_batches=0)
    with pytest.raises(ValueError, match="batch_size = 0"):
        BucketedBatchSampler([3, 4, 1], 0, 1, 0)


# ---- Shards -------------------------------------------------------------------------------------

def test_shard_order_is_a_permutation_with_window_locality():
    shard, count, window = 50, 40, 4
    sizes = [shard] * count
    shard_of = np.repeat(np.arange(count), shard)
    for epoch in (0, 1):
        order = epoch_of(ShardedDistributedSampler(sizes, 1, 0, seed=6, window=window), epoch)
        assert sorted(order) == list(range(shard * count))
        span = shard * window
        for first in range(0, len(order), span):  # each window: exactly `window` shards
            assert len(set(shard_of[order[first:first + span]])) == window
        # The same global stream for every world size.
        for w in (3, 8):
            per_rank = ranks(lambda w, r: ShardedDistributedSampler(sizes, w, r, seed=6,
                                                                    window=window), w, epoch)
            assert interleave(per_rank)[:len(order)] == order
    # Locality: rank 3 of 8's first 25 samples (global positions < 200, the first window) touch
    # at most `window` shards; the same stretch of a full shuffle touches many more.
    rank_order = epoch_of(ShardedDistributedSampler(sizes, 8, 3, seed=6, window=window), 0)
    full = epoch_of(ShardedDistributedSampler(sizes, 8, 3, seed=6, window=count), 0)
    assert len(set(shard_of[rank_order[:25]])) <= window
    assert len(set(shard_of[full[:25]])) > 2 * window


def test_shard_bad_inputs():
    with pytest.raises(ValueError, match="shard_sizes"):
        ShardedDistributedSampler([3, 0, 2], 1, 0)
    with pytest.raises(ValueError, match=r"shard_sizes\[0\] = -3"):
        ShardedDistributedSampler([-3, 2], 1, 0)
    with pytest.raises(ValueError, match="window = 0"):
        ShardedDistributedSampler([3, 2], 1, 0, window=0)


# ---- Wrapper ------------------------------------------------------------------------------------

class EpochShuffled(tud.Sampler):
    """A deterministic user sampler with set_epoch: a seeded shuffle that repeats index 0."""

    def __init__(self, n, seed):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        xs = list(range(self.n)) + [0]
        random.Random(self.seed * 1000 + self.epoch).shuffle(xs)
        return iter(xs)

    def __len__(self):
        return self.n + 1


def test_wrapper_distributes_a_user_sampler_and_forwards_set_epoch():
    n = 23
    for epoch in (0, 5):
        inner = EpochShuffled(n, 7)
        inner.set_epoch(epoch)
        expected = list(inner)
        for w in WORLD_SIZES:
            per_rank = ranks(lambda w, r: DistributedSamplerWrapper(EpochShuffled(n, 7), w, r),
                             w, epoch)
            assert all(len(xs) == -(-(n + 1) // w) for xs in per_rank)
            stream = interleave(per_rank)
            assert stream[:n + 1] == expected
            assert stream[n + 1:] == expected[:len(stream) - n - 1]
    wrapper = DistributedSamplerWrapper(EpochShuffled(n, 7), 3, 1, drop_last=True,
                                        auto_epoch=True)
    wrapper.set_epoch(4)
    list(wrapper)
    assert wrapper.sampler.epoch == 4 and len(wrapper) == (n + 1) // 3
    with pytest.warns(UserWarning):
        list(wrapper)
    assert wrapper.sampler.epoch == 5  # auto_epoch forwards the epoch it advances to


def test_wrapper_of_a_sequential_sampler_is_pytorchs_unshuffled_sampler():
    for n, w, drop_last in [(10, 3, False), (10, 3, True), (2, 5, False)]:
        for rank in range(w):
            ours = DistributedSamplerWrapper(tud.SequentialSampler(range(n)), w, rank,
                                             drop_last=drop_last)
            torchs = tud.DistributedSampler(range(n), w, rank, shuffle=False, drop_last=drop_last)
            assert list(ours) == list(torchs) and len(ours) == len(torchs)


def test_wrapper_bad_inputs():
    class Negative(tud.Sampler):
        def __init__(self):  # torch 1.13's Sampler.__init__ takes a data_source, 2.x's does not
            pass

        def __iter__(self):
            return iter([1, -2])

        def __len__(self):
            return 2

    with pytest.raises(ValueError, match=r"sampler output\[1\] = -2"):
        list(DistributedSamplerWrapper(Negative(), 2, 0))
    with pytest.raises(ValueError, match="Invalid rank"):
        DistributedSamplerWrapper(tud.SequentialSampler(range(3)), 2, -1)


# ---- World size and rank from torch.distributed -------------------------------------------------

def every_sampler(**world):
    return [DistributedEvalSampler(range(10), **world),
            WeightedDistributedSampler([1.0, 2.0], 10, **world),
            BlendedDistributedSampler([3, 4], [1.0, 1.0], 10, **world),
            DistributedBatchSampler(range(10), 3, **world),
            BucketedBatchSampler([1, 2, 3], 2, **world),
            ShardedDistributedSampler([3, 4], **world),
            DistributedSamplerWrapper(tud.SequentialSampler(range(5)), **world)]


def test_world_size_and_rank_come_from_the_process_group(tmp_path):
    import torch.distributed as dist
    assert not dist.is_initialized()
    # What torch.distributed raises without a process group: RuntimeError in 1.13, ValueError in 2.x.
    with pytest.raises((RuntimeError, ValueError), match="process group"):
        DistributedEvalSampler(range(10))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        for sampler, explicit in zip(every_sampler(), every_sampler(num_replicas=1, rank=0)):
            assert (sampler.num_replicas, sampler.rank) == (1, 0)
            assert list(sampler) == list(explicit) and len(sampler) == len(explicit)
    finally:
        dist.destroy_process_group()
