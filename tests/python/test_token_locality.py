"""The locality order of a token source (TokenStream(locality=...): blocks of contiguous documents,
shuffled within windows of blocks, for sources in an object store): every document once an
epoch, few blocks a stretch, the same stream through workers and resumed on another W, and a
checkpoint that records it."""
import os

import numpy as np
import pytest
from distsampler import _core
from distsampler.indexed import write_indexed
from distsampler.tokens import TokenStream

SEQ_LEN, BATCH = 31, 8
BLOCK, WINDOW = 20, 3


def sources(tmp_path):
    made = []
    for s, count in enumerate((1200, 700)):
        prefix = os.path.join(tmp_path, f"s{s}")
        write_indexed(prefix, [[(s * 7 + d + t) % 997 for t in range(1 + (d * 13) % 9)]
                               for d in range(count)])
        made.append((prefix, 1.0 + s))
    return made


def stream(srcs, locality=((BLOCK, WINDOW), None), rank=0, world=1, state=None, **kw):
    s = TokenStream(srcs, seq_len=SEQ_LEN, global_batch=BATCH, seed=3, rank=rank,
                    world_size=world, locality=locality, **kw)
    if state is not None:
        s.load_state_dict(state)
    return s


def documents_read(s, steps):
    """Per step, the (source, document, epoch) of the documents begun in it, in order (a
    sequence of L + 1 tokens shares its last with the next's first, so a document that starts
    there shows in both: it counts once, where it first shows)."""
    out, seen = [], set()
    for _ in range(steps):
        step = []
        for _, spans in s._plan.plan_step(1, 0):
            for src, doc, begin, _, epoch in spans:
                if begin == 0 and (src, doc, epoch) not in seen:
                    seen.add((src, doc, epoch))
                    step.append((src, doc, epoch))
        out.append(step)
    return out


def test_each_document_once_an_epoch_and_few_blocks_a_stretch(tmp_path):
    srcs = sources(tmp_path)
    got = [d for step in documents_read(stream(srcs), 120) for d in step]
    for source, count in ((0, 1200),):
        epoch0 = [doc for src, doc, epoch in got if src == source and epoch == 0]
        assert sorted(epoch0) == list(range(count)), "each document once in 120 steps"
        # Any WINDOW * BLOCK consecutive documents of the source touch at most 2 windows' blocks.
        blocks = [doc // BLOCK for doc in epoch0]
        span = WINDOW * BLOCK
        worst = max(len(set(blocks[i:i + span])) for i in range(0, count - span))
        assert worst <= 2 * WINDOW
    # The global shuffle of the same source touches many more blocks in as many documents.
    plain = [doc for step in documents_read(stream(srcs, locality=None), 120) for src, doc, e
             in step if src == 0 and e == 0]
    assert len(set(d // BLOCK for d in plain[:WINDOW * BLOCK])) > 4 * WINDOW
    # The source without a locality order reads as it does without the option... once the
    # streams' mix is the same: the mix does not depend on the order, so source 1's documents
    # in order are those of the plain stream.
    ones = [doc for src, doc, _ in got if src == 1]
    plain_ones = [doc for step in documents_read(stream(srcs, locality=None), 120)
                  for src, doc, _ in step if src == 1]
    n = min(len(ones), len(plain_ones))
    assert n > 100 and ones[:n] == plain_ones[:n]


def test_the_same_batches_through_workers_and_resumed_on_another_w(tmp_path):
    srcs = sources(tmp_path)
    keys = ("tokens", "labels", "position_ids", "sequence")
    for world in (1, 2):
        for rank in range(world):
            fed = stream(srcs, rank=rank, world=world).loader(num_workers=2)
            inline = stream(srcs, rank=rank, world=world, planner="inline").loader()
            for _ in range(12):
                a, b = next(fed), next(inline)
                assert all(bool((a[k] == b[k]).all()) for k in keys)
    first = stream(srcs, world=2)
    it = first.loader()
    for _ in range(10):
        next(it)
    state = first.state_dict()
    whole = stream(srcs, world=1)
    wit = whole.loader()
    for _ in range(10):  # the same 10 steps on one rank
        next(wit)
    resumed = stream(srcs, world=4, rank=1, state=state).loader()
    alone = stream(srcs, world=4, rank=1, state=whole.state_dict()).loader()
    for _ in range(8):
        a, b = next(resumed), next(alone)
        assert all(bool((a[k] == b[k]).all()) for k in keys)


def test_checkpoints_record_the_orders(tmp_path):
    srcs = sources(tmp_path)
    s = stream(srcs)
    next(iter(s.loader()))
    state = s.state_dict()
    with pytest.raises(ValueError, match="orders"):
        stream(srcs, locality=None).load_state_dict(state)
    with pytest.raises(ValueError, match="orders"):
        stream(srcs, locality=((BLOCK, WINDOW + 1), None)).load_state_dict(state)
    stream(srcs).load_state_dict(state)
    # A stream without locality orders records none: its checkpoints are as before.
    assert "orders" not in repr(stream(srcs, locality=None).state_dict())


def test_bad_locality_is_one_clear_error(tmp_path):
    srcs = sources(tmp_path)
    for bad in [((0, 2), None), ((5, 0), None), ((True, 2), None)]:
        with pytest.raises(ValueError, match=r"locality\[0\]"):
            stream(srcs, locality=bad)
    with pytest.raises(ValueError, match="3 given for 2 sources"):
        stream(srcs, locality=[None, None, (4, 2)])


def test_the_order_is_the_shards_policys(tmp_path):
    # Source 0's epoch-0 documents in read order are BlockShardOrder's positions with the
    # source's key (tokens/mix.cc: derive_key(seed, source, kDomainTokens)), so one owner: the
    # shards policy. Checked through the order's contract instead of the key: a permutation
    # whose consecutive windows of WINDOW blocks hold whole blocks.
    srcs = sources(tmp_path)
    got = [doc for step in documents_read(stream(srcs), 120) for src, doc, e in step
           if src == 0 and e == 0]
    windows = [got[i:i + WINDOW * BLOCK] for i in range(0, 1200, WINDOW * BLOCK)]
    for w in windows:
        assert len({d // BLOCK for d in w}) == len(w) // BLOCK  # whole blocks, WINDOW of them
    order = _core.block_shard_order(1200, BLOCK, WINDOW, 99, 0, 0, 1200)
    assert sorted(order.tolist()) == list(range(1200))
    assert np.array_equal(np.sort(np.asarray(got)), np.arange(1200))


def test_appended_documents_join_the_epoch_in_a_locality_order(tmp_path):
    # An append to a source in a locality order: its documents join the unread rest of the
    # epoch (a keyed permutation, as with the global shuffle); each document is still read once.
    srcs = sources(tmp_path)
    extra = os.path.join(tmp_path, "extra")
    write_indexed(extra, [[5, 6, 7]] * 300)
    s = stream(srcs, appends=[(10, 0, extra)])
    got = [doc for step in documents_read(s, 160) for src, doc, e in step if src == 0 and e == 0]
    assert sorted(got) == list(range(1500))


def test_the_cli_plans_the_same_sequences_in_a_locality_order(tmp_path, cli):
    """`distsampler tokens plan --locality S:Q:K` is TokenStream(locality=...)'s plan."""
    import json
    from conftest import planned_lines
    srcs = sources(tmp_path)
    want = planned_lines(stream(srcs, locality=[None, (BLOCK, WINDOW)], rank=1, world=2),
                         2, 1, 3, 5)
    args = ["tokens", "plan", "--seq-len", SEQ_LEN, "--global-batch", BATCH, "--seed", 3,
            "--world-size", 2, "--rank", 1, "--steps", "3:5"]
    for prefix, weight in srcs:
        args += ["--source", f"{prefix}:{weight}"]
    args += ["--locality", f"1:{BLOCK}:{WINDOW}"]
    assert [json.loads(line) for line in cli(*args).stdout.splitlines()] == want
    # Without the flag the plan is another (the flag is read).
    assert [json.loads(line) for line in cli(*args[:-2]).stdout.splitlines()] != want
    for bad, message in (("1:20", "expected SOURCE:BLOCK:WINDOW"),
                         ("2:20:3", "source 2 of 2; allowed: 0 to 1"),
                         ("0:0:3", "a block of at least 1 document"),
                         ("0:20:x", "'x' is not an integer")):
        got = cli(*args[:-2], "--locality", bad, check=False)
        assert got.returncode != 0 and f"--locality {bad}" in got.stderr \
            and message in got.stderr, got.stderr
    twice = cli(*args, "--locality", "1:5:2", check=False)
    assert twice.returncode != 0 and "has a --locality already" in twice.stderr
