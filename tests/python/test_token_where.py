"""At which steps a document was seen, and takedowns (docs/tokens.md, "At which steps a document
was seen"; issue 53, the reverse question): TokenStream.where() with an index of any spacing
(in memory and from its file) and without one, on randomized configurations (concat and
best-fit, splits, a locality order, weight changes, ramps, appends, a new source and skip lists
mid-run, several source passes), against a brute force: the plan walked step by step, every span
of every row (and explain from the index's states is explain from step 0); the CLI's `tokens index` / `where` / `takedown` give what Python gives; a takedown's
skip edit, resumed from a checkpoint at its step on another W through the loader with workers,
delivers none of the listed documents but those the report says are under way; an index of
another configuration or of changed data is refused, naming what differs."""
import hashlib
import json
import os
import random
import shutil

import pytest

from test_tokens import B, L, corpus, make_documents, read, write_indexed  # noqa: F401
from test_token_edits import cases, extra  # noqa: F401
from test_token_explain import configurations, make, run_flags

torch = pytest.importorskip("torch")
from distsampler.tokens import TokenStream  # noqa: E402

STEPS = 15


def brute(corpus, args, steps, world=1):  # noqa: F811
    """{(source, document): [sighting, ...]} from the plan walked step by step."""
    out = {}
    fresh = make(corpus, args)
    share = B // world
    for step in range(steps):
        for k, spans in fresh._plan.plan_step(1, 0):
            offset = 0
            for source, document, begin, end, epoch in spans:
                row = k - step * B
                out.setdefault((source, document), []).append(dict(
                    step=step, row=row, sequence=k, offset=offset, source=source,
                    document=document, begin=begin, end=end, tokens=end - begin,
                    source_epoch=epoch, rank=row // share, rank_row=row % share))
                offset += end - begin
    return out


def documents_of(stream):
    """Every (source, document) of the run, new sources and appended documents included."""
    counts = [sum(_count(p) for p in shards) for shards in stream._plan.shards]
    return [(s, d) for s, n in enumerate(counts) for d in range(n)]


def _count(prefix):
    with open(prefix + ".idx", "rb") as f:
        f.seek(18)
        return int.from_bytes(f.read(8), "little")


def test_where_is_the_brute_force_scan(corpus, extra, tmp_path):  # noqa: F811
    rng = random.Random(7)
    passes = 0
    for name, args in configurations(extra):
        s = make(corpus, args)
        world = rng.choice([1, 2, 3, 4, 6])
        expected = brute(corpus, args, STEPS, world)
        passes = max([passes] + [x["source_epoch"] for v in expected.values() for x in v])
        every = rng.choice([1, 2, 5, 16])
        built = s.index(STEPS, tmp_path / f"{name}.index", every=every)
        assert built.steps == STEPS and built.states == STEPS // every + 1 + (STEPS % every != 0)
        step = rng.randint(0, STEPS + 3)  # explain from the index: explain from step 0
        assert s.explain(step, index=built, world_size=world) == s.explain(step, world_size=world)
        docs = documents_of(s)
        sample = rng.sample(docs, min(40, len(docs)))
        for source, document in sample:
            want = expected.get((source, document), [])
            got = s.where(source, document, index=built, world_size=world)
            assert got == want, (name, source, document)
            until = rng.randint(0, STEPS)
            assert s.where(source, document, until=until, index=tmp_path / f"{name}.index",
                           world_size=world) == [x for x in want if x["step"] < until], name
        for source, document in sample[:3]:  # without an index: the scan
            assert s.where(source, document, until=STEPS, world_size=world) == \
                expected.get((source, document), [])
    assert passes >= 2


def test_where_refuses_bad_arguments_and_an_index_of_another_run(corpus, tmp_path):  # noqa: F811
    s = make(corpus, {})
    path = tmp_path / "run.index"
    s.index(10, path, every=4)
    for call, message in [
            (lambda: s.where(0, 0), "until = None needs an index"),
            (lambda: s.where(9, 0, index=path), "source = 9 is out of range"),
            (lambda: s.where(0, 10**6, index=path), "document = 1000000 is out of range"),
            (lambda: s.where(0, 0, until=11, index=path), "until = 11 is past the index"),
            (lambda: s.where(-1, 0, index=path), "source = -1"),
            (lambda: s.index(0), "steps = 0"),
            (lambda: make(corpus, dict(seed=5)).where(0, 0, index=path), "seed = "),
            (lambda: TokenStream(corpus[0][:2], seq_len=L, global_batch=B).where(
                0, 0, index=path), "built on another run")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            call()
    (tmp_path / "junk").write_bytes(b"junk\n")
    with pytest.raises(ValueError, match="is not a plan index"):
        s.where(0, 0, index=tmp_path / "junk")


def test_an_index_of_changed_data_is_refused(corpus, tmp_path):  # noqa: F811
    """The same documents and tokens, two lengths swapped: the sampled lengths differ."""
    (prefixes, weight), *rest = corpus[0]
    copied = []
    for p in prefixes:
        q = str(tmp_path / os.path.basename(p))
        shutil.copy(p + ".bin", q + ".bin")
        shutil.copy(p + ".idx", q + ".idx")
        copied.append(q)
    sources = [(copied, weight)] + rest
    s = TokenStream(sources, seq_len=L, global_batch=B)
    s.index(6, tmp_path / "run.index")
    docs = corpus[1][0]
    swapped = list(range(len(docs)))
    # Every length rewritten in another order (a re-tokenized corpus of the same size).
    swapped.reverse()
    write_indexed(copied[0], [docs[i] for i in swapped][:len(docs)])
    again = TokenStream(sources, seq_len=L, global_batch=B)
    with pytest.raises(ValueError, match="sampled_lengths"):
        again.where(0, 0, index=tmp_path / "run.index")


def test_the_cli_answers_as_python_does(corpus, extra, cli, tmp_path):  # noqa: F811
    for name, args in configurations(extra)[:6]:
        if "split" in args or "locality" in args:
            continue
        flags = run_flags(corpus, args, tmp_path)
        index = tmp_path / f"{name}.index"
        got = cli("tokens", "index", *flags, "--steps", STEPS, "--every", 4, "--out", index)
        assert f"index of steps 0..{STEPS - 1}: 5 plan states" in got.stdout
        s = make(corpus, args)
        got = json.loads(cli("tokens", "where", *flags, "--index", index, "--doc", "0:3",
                             "--doc", "2:5", "--world-size", 2, "--format", "json").stdout)
        assert got["until"] == STEPS
        assert [d["sightings"] for d in got["documents"]] == [
            s.where(0, 3, index=index, world_size=2), s.where(2, 5, index=index, world_size=2)]
        assert got["fingerprint"] == json.loads(s._plan.fingerprint(STEPS))
        scan = json.loads(cli("tokens", "where", *flags, "--until", 9, "--doc", "0:3",
                              "--world-size", 2, "--format", "json").stdout)
        assert scan["documents"][0]["sightings"] == s.where(0, 3, until=9, world_size=2)
        explained = cli("tokens", "explain", *flags, "--index", index, "--step", 11,
                        "--format", "json").stdout
        assert json.loads(explained) == s.explain(11, world_size=1), name
        table = cli("tokens", "where", *flags, "--index", index, "--doc", "0:3").stdout
        assert table.startswith(f"source 0 document 3: {len(s.where(0, 3, index=index))} "
                                f"piece")
    docs = tmp_path / "docs.txt"
    docs.write_text("# source document\n0 3\n2 5\n")
    report = json.loads(cli("tokens", "takedown", *flags, "--index", index, "--docs", docs,
                            "--from-step", 6, "--format", "json").stdout)
    py = s.takedown([(0, 3), (2, 5)], 6, index=index)
    assert report["edit"] == f"--skip 6:{docs}"
    assert [x for d in report["documents"] for x in d["seen"]] == py["before"]
    assert [x for d in report["documents"] for x in d["after_edit"]] == py["after"]
    assert report["fingerprint"] == py["fingerprint"]
    for args_, message in [(("--doc", "0:x"), "--doc 0:x: expected SOURCE:DOCUMENT"),
                           (("--doc", "0:1"), "--until N is required without --index"),
                           (("--index", index), "give --doc SOURCE:DOCUMENT"),
                           (("--index", index, "--doc", "7:0"), "source = 7 is out of range")]:
        bad = cli("tokens", "where", *flags, *args_, check=False)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr


def test_a_takedown_resumed_on_another_world_delivers_none_of_its_documents(
        corpus, extra, tmp_path):  # noqa: F811
    rng = random.Random(3)
    for name, args in configurations(extra)[:6]:
        s = make(corpus, args)
        everything = brute(corpus, args, STEPS)
        from_step = rng.randint(3, 9)
        # A skip list names documents that exist at its step: those seen before it, and some of
        # the first source's own (seen later or never).
        early = sorted(d for d, v in everything.items() if v[0]["step"] < from_step)
        listed = sorted(set(rng.sample(early, 5) + [(0, rng.randrange(20)) for _ in range(2)]))
        report = s.takedown(listed, from_step, until=STEPS, index=s.index(STEPS, every=3))
        assert report["documents"] == sorted(listed)
        assert report["before"] == [x for d in sorted(listed) for x in everything.get(d, [])
                                    if x["step"] < from_step], name
        assert report["skips"] == [(from_step, sorted(listed))]
        # The run resumed at from_step on W = 2 with a worker, the report's edit added.
        world = 3
        first = make(corpus, args, world, 0)
        for _ in range(from_step):
            first._plan.skip_step(world, 0)
        state = first.state_dict()
        edited = dict(args)
        edited["skips"] = list(args.get("skips", [])) + report["skips"]
        under_way = {(x["source"], x["document"], x["sequence"]) for x in report["after"]}
        for rank in range(2):
            r = make(corpus, edited, 2, rank)
            r.load_state_dict(state)
            rows = read(r, STEPS - from_step, 1)
            planned = make(corpus, edited, 2, rank)
            planned.load_state_dict(state)
            for step in range(from_step, STEPS):
                for k, spans in planned._plan.plan_step(2, rank):
                    assert k in rows
                    for source, document, _, _, _ in spans:
                        if (source, document) in set(listed):
                            assert (source, document, k) in under_way, (name, k)


def test_a_text_is_found_through_the_dochash(corpus, tmp_path):  # noqa: F811
    """A .dochash written as `tokens prepare` writes it (test_prepare.py runs prepare itself):
    find_text gives the documents whose text it is, and where() their steps."""
    texts = {}
    for prefixes, _ in corpus[0]:
        for p in prefixes:
            n = _count(p)
            with open(p + ".dochash", "wb") as f:
                for d in range(n):
                    text = f"{p} document {d}" if d != 4 else "a benchmark question"
                    f.write(hashlib.blake2b(text.encode(), digest_size=16).digest())
                    texts[(p, d)] = text
    s = make(corpus, {})
    found = s.find_text("a benchmark question")
    assert len(found) == sum(len(p) for p, _ in corpus[0])  # document 4 of every shard
    first = corpus[0][1][0]  # source 1's second shard numbers after its first
    assert (1, _count(first[0]) + 4) in found and (0, 4) in found
    assert s.find_text(f"{corpus[0][0][0][0]} document 7") == [(0, 7)]
    assert s.find_text("never written") == []
    os.remove(corpus[0][2][0][0] + ".dochash")
    with pytest.raises(ValueError, match="dochash = .* cannot be read"):
        s.find_text("x")
    for prefixes, _ in corpus[0]:
        for p in prefixes:
            if os.path.exists(p + ".dochash"):
                os.remove(p + ".dochash")
