"""distsampler.tokens.TokenStream: for W in {1, 2, 3, 4, 8}, DataLoader workers {0, 2}, and resumes
at random steps onto another W', the ranks' batches together are the W = 1 run's global stream,
token for token; the tokens are the sources' tokens at the planned spans; the CLI's plan is the
same plan; bad states are refused and change nothing.

The sources are written with megatron-core's IndexedDatasetBuilder where it is installed (the
torch 2 stack pins it: DISTSAMPLER_REQUIRE_MEGATRON=1 there makes its absence a failure), else by
write_indexed below, whose bytes the torch 2 run checks equal megatron-core's.
"""
import json
import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import planned_lines  # noqa: E402
from distsampler.tokens import TokenStream  # noqa: E402

from distsampler.indexed import write_indexed  # noqa: E402  (checked below)

L, B = 32, 24


def megatron_builder():
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    except ImportError:
        if os.environ.get("DISTSAMPLER_REQUIRE_MEGATRON") == "1":
            raise
        return None
    return IndexedDatasetBuilder


def token(source, document, offset):
    return (source * 7919 + document * 131 + offset * 17) % 60000


def make_documents(source, count, rng):
    lengths = [rng.choice([0, 1, rng.randint(2, 20), rng.randint(20, 90)]) for _ in range(count)]
    lengths[0] = 3
    return [[token(source, d, t) for t in range(n)] for d, n in enumerate(lengths)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three sources, the second in two shards: [(prefixes, weight)] and the documents."""
    root = tmp_path_factory.mktemp("tokens")
    rng = random.Random(5)
    builder = megatron_builder()
    sources, documents = [], []
    for s, (count, weight, shards) in enumerate([(40, 0.5, 1), (60, 0.3, 2), (25, 0.2, 1)]):
        docs = make_documents(s, count, rng)
        documents.append(docs)
        prefixes = []
        cut = [0, count // 2, count] if shards == 2 else [0, count]
        for i in range(shards):
            prefix = str(root / f"source{s}_{i}")
            part = docs[cut[i]:cut[i + 1]]
            if builder is not None:
                b = builder(prefix + ".bin", dtype=np.uint16)
                for doc in part:
                    b.add_item(torch.tensor(doc, dtype=torch.int64))
                    b.end_document()
                b.finalize(prefix + ".idx")
                mine = str(root / f"mine{s}_{i}")
                write_indexed(mine, part)
                for ext in (".bin", ".idx"):
                    with open(prefix + ext, "rb") as a, open(mine + ext, "rb") as c:
                        assert a.read() == c.read(), f"write_indexed's {ext} differs from megatron's"
            else:
                write_indexed(prefix, part)
            prefixes.append(prefix)
        sources.append((prefixes, weight))
    return sources, documents


def stream(corpus, packing, world_size=1, rank=0, **kwargs):
    return TokenStream(corpus[0], seq_len=L, global_batch=B, seed=3, packing=packing,
                       window=16, rank=rank, world_size=world_size, **kwargs)


def read(s, steps, workers):
    """{sequence: (tokens + last label, loss mask)} of `steps` steps through s.loader()."""
    out, it = {}, s.loader(num_workers=workers)
    per_rank = B // s.world_size
    per_step, first = per_rank // s.micro_batch, s.step
    for i in range(steps * per_step):
        batch = next(it)
        step, j = first + i // per_step, i % per_step  # in order: step by step, rank's share
        start = step * B + s.rank * per_rank + j * s.micro_batch
        assert batch["step"] == step
        assert batch["sequence"].tolist() == list(range(start, start + s.micro_batch))
        rows = torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
        for k, row, mask in zip(batch["sequence"].tolist(), rows, batch["loss_mask"]):
            assert k not in out, f"sequence {k} read twice"
            out[k] = (row.tolist(), mask.tolist())
    return out


@pytest.fixture(scope="module", params=["concat", "best-fit"])
def reference(request, corpus):
    s = stream(corpus, request.param)
    return request.param, read(s, 9, 0)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_every_world_size_and_worker_count_reads_the_one_stream(corpus, reference, world_size,
                                                                workers):
    packing, expected = reference
    got = {}
    for rank in range(world_size):
        mine = read(stream(corpus, packing, world_size, rank), 9, workers)
        assert not set(mine) & set(got), "two ranks read one sequence"
        got.update(mine)
    assert sorted(got) == list(range(9 * B))
    assert got == expected


def test_micro_batches_through_workers_keep_the_order(corpus, reference):
    packing, expected = reference
    got = {}
    for rank in range(3):
        got.update(read(stream(corpus, packing, 3, rank, micro_batch=2), 9, 3))
    assert got == expected


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_at_a_random_step_onto_another_world_size_continues_the_stream(
        corpus, reference, workers):
    packing, expected = reference
    rng = random.Random(f"{packing}{workers}")
    for _ in range(3):
        before, after = rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 2, 3, 4, 8])
        cut = rng.randint(1, 7)
        got, states = {}, []
        for rank in range(before):
            s = stream(corpus, packing, before, rank)
            got.update(read(s, cut, workers))
            states.append(s.state_dict())
        assert all(st["consumed"] == cut * B for st in states)
        assert len({json.dumps(st["position"], sort_keys=True) for st in states}) == 1
        for rank in range(after):
            s = stream(corpus, packing, after, rank)
            s.load_state_dict(json.loads(json.dumps(states[rank % before])))
            assert s.step == cut
            more = read(s, 9 - cut, workers)
            assert not set(more) & set(got)
            got.update(more)
        assert got == expected, f"{before} -> {after} ranks at step {cut}"


@pytest.mark.parametrize("positions", ["segment", "document"])
def test_the_tokens_are_the_sources_tokens_at_the_planned_spans(corpus, positions):
    _, documents = corpus
    for packing in ("concat", "best-fit"):
        planner = stream(corpus, packing)
        reader = stream(corpus, packing, positions=positions)
        for _ in range(4):
            plan = planner._plan.plan_step(1, 0)
            batch = next(iter(reader))
            rows = torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
            for (k, spans), row, k2, position_ids, segments in zip(
                    plan, rows, batch["sequence"].tolist(), batch["position_ids"],
                    batch["segment_ids"]):
                assert k == k2
                want, pos, before = [], [], None
                for source, document, begin, end, epoch in spans:
                    want += documents[source][document][begin:end]
                    # segment: from 0 at a segment's start; a span that continues the one before
                    # it in the same document continues its segment
                    if positions == "document":
                        first = 0
                    elif before != (source, document, epoch, begin):
                        first = begin
                    before = (source, document, epoch, end)
                    pos += list(range(begin - first, end - first))
                assert row.tolist()[:len(want)] == want
                assert row.tolist()[len(want):] == [0] * (L + 1 - len(want))
                assert position_ids.tolist()[:min(L, len(pos))] == pos[:L]
                if packing == "concat":
                    assert len(want) == L + 1
            reader._received = 0


def test_the_cli_plans_the_same_sequences(corpus, cli):
    for packing in ("concat", "best-fit"):
        expected = planned_lines(stream(corpus, packing, world_size=3, rank=1), 3, 1, 2, 4)
        args = ["tokens", "plan", "--seq-len", L, "--global-batch", B, "--world-size", 3,
                "--rank", 1, "--steps", "2:4", "--seed", 3, "--packing", packing]
        if packing == "best-fit":
            args += ["--window", 16]
        for prefixes, weight in corpus[0]:
            args += ["--source", ",".join(prefixes) + f":{weight}"]
        lines = cli(*args).stdout.splitlines()
        assert [json.loads(line) for line in lines] == expected


def test_the_audit_passes_a_runs_checkpoints_and_catches_a_replayed_step(corpus, cli, tmp_path):
    s = stream(corpus, "best-fit", world_size=2, rank=0)
    files, log = [], tmp_path / "sequences.jsonl"
    with open(log, "w") as f:
        for step in range(40):
            if step % 10 == 0:
                files.append(tmp_path / f"state{step}.json")
                files[-1].write_text(json.dumps(s.state_dict()))
            for rank in range(2):
                other = stream(corpus, "best-fit", world_size=2, rank=rank)
                other.load_state_dict(s.state_dict())
                for k, _ in other._plan.plan_step(2, rank):
                    f.write(json.dumps({"sequence": k}) + "\n")
            s._plan.skip_step(2, 0)
        files.append(tmp_path / "state40.json")
        files[-1].write_text(json.dumps(s.state_dict()))
    args = ["tokens", "audit", "--seq-len", L, "--global-batch", B, "--seed", 3,
            "--packing", "best-fit", "--window", 16]
    for prefixes, weight in corpus[0]:
        args += ["--source", ",".join(prefixes) + f":{weight}"]
    for path in files:
        args += ["--state", path]
    ok = cli(*args, "--sequences", log)
    assert ok.stdout.splitlines()[-1].startswith("OK"), ok.stdout
    assert "source epochs finished" in ok.stdout
    assert any(" 0 source epochs" not in line for line in ok.stdout.splitlines()[:3])
    # a run that read step 7 twice (resumed from a checkpoint one step old)
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines + lines[7 * B:8 * B]) + "\n")
    bad = cli(*args, "--sequences", log, check=False)
    assert bad.returncode == 1 and "read 2 times" in bad.stdout, bad.stdout


def test_state_dict_inside_a_step_is_refused(corpus):
    s = stream(corpus, "concat", world_size=2, rank=0, micro_batch=4)
    it = s.loader()
    next(it)
    with pytest.raises(RuntimeError, match="inside step 0: 1 of its 3 batches"):
        s.state_dict()
    next(it), next(it)
    assert s.state_dict()["consumed"] == B


def test_persistent_workers_are_refused_naming_why(corpus):
    # a persistent worker would keep the stream's position of the loader's first start
    with pytest.raises(ValueError, match="persistent_workers=True: a stream's workers start"):
        next(stream(corpus, "concat").loader(num_workers=2, persistent_workers=True))


def test_a_bad_or_foreign_state_is_refused_and_changes_nothing(corpus):
    s = stream(corpus, "concat")
    read(s, 2, 0)
    state = s.state_dict()
    other = stream(corpus, "best-fit")
    with pytest.raises(ValueError, match="state packing = 'concat' but this sampler's packing = "
                                         "'best-fit'"):
        other.load_state_dict(state)
    edited = json.loads(json.dumps(state))
    edited["position"]["skip"] += 1
    with pytest.raises(ValueError, match="checksum"):
        s.load_state_dict(edited)
    assert s.state_dict() == state
    with pytest.raises(ValueError, match="micro_batch = 5 must divide"):
        stream(corpus, "concat", world_size=2, rank=0, micro_batch=5)
    with pytest.raises(ValueError, match="global_batch = 24 is not a positive multiple of "
                                         "world_size = 5"):
        stream(corpus, "concat", world_size=5, rank=0)
    with pytest.raises(RuntimeError, match="cannot open|No such file"):
        TokenStream([("/nonexistent/prefix", 1.0)], seq_len=L, global_batch=B)
