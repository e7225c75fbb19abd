"""Edits of a token stream (docs/tokens.md, "Edits") through distsampler.tokens.TokenStream's
loader: a weight change, a ramp, an appended shard, a new source and a skip list, each at a step
drawn at random, on W in {1, 3, 8} (DataLoader workers included) and resumed onto another W':
the steps before the edit are the unedited stream's, every rank together reads the W = 1 run's
stream, the tokens are the files' tokens, and the CLI's audit, given the same edits as flags,
replays the run's checkpoints and finds every document of every source epoch read once (skips
listed). A checkpoint records its edits: a resume that drops one is refused naming it.
"""
import json
import random

import pytest

from test_tokens import B, L, corpus, megatron_builder, make_documents, read, write_indexed  # noqa: F401

torch = pytest.importorskip("torch")
from distsampler.tokens import TokenStream, edits_from_flags  # noqa: E402

STEPS = 12


@pytest.fixture(scope="module")
def extra(corpus, tmp_path_factory):  # noqa: F811
    """An appended shard for source 1, a new source, and their documents."""
    root = tmp_path_factory.mktemp("token_edits")
    rng = random.Random(11)
    out = {}
    for name, source, count in (("shard", 1, 30), ("new", 3, 20)):
        docs = make_documents(source, count, rng)
        if name == "shard":  # numbered after source 1's own 60 documents
            docs = make_documents(source, 90, rng)[60:]
        prefix = str(root / name)
        write_indexed(prefix, docs)
        out[name] = (prefix, docs)
    return out


def cases(extra):
    rng = random.Random(2024)
    at = {name: rng.randint(2, 7) for name in ("change", "ramp", "shard", "new", "skip")}
    listed = [(0, d) for d in range(1, 40, 3)] + [(2, d) for d in range(2, 25, 4)]
    return {
        "change": (at["change"], dict(changes=[(at["change"], [0.1, 0.1, 0.8])])),
        "ramp": (at["ramp"], dict(ramps=[(at["ramp"], at["ramp"] + 4, [0.05, 0.9, 0.05])])),
        "shard": (at["shard"], dict(appends=[(at["shard"], 1, extra["shard"][0])])),
        "new": (at["new"], dict(appends=[(at["new"], 3, extra["new"][0])],
                                changes=[(at["new"], [0.3, 0.2, 0.2, 0.3])])),
        "skip": (at["skip"], dict(skips=[(at["skip"], listed)])),
    }


def stream(corpus, packing, world_size=1, rank=0, **edits):  # noqa: F811
    return TokenStream(corpus[0], seq_len=L, global_batch=B, seed=3, packing=packing,
                       window=16, rank=rank, world_size=world_size, **edits)


def cli_flags(edits, tmp_path):
    """The CLI's flags for `edits` (TokenStream's arguments)."""
    flags = []
    for step, weights in edits.get("changes", []):
        flags += ["--change", f"{step}:" + ",".join(map(str, weights))]
    for start, end, weights in edits.get("ramps", []):
        flags += ["--ramp", f"{start}:{end}:" + ",".join(map(str, weights))]
    for step, source, prefix in edits.get("appends", []):
        flags += ["--append", f"{step}:{source}={prefix}"]
    for i, (step, listed) in enumerate(edits.get("skips", [])):
        path = tmp_path / f"skip{i}.txt"
        path.write_text("# source document\n" + "".join(f"{s} {d}\n" for s, d in listed))
        flags += ["--skip", f"{step}:{path}"]
    return flags


@pytest.mark.parametrize("packing", ["concat", "best-fit"])
@pytest.mark.parametrize("name", ["change", "ramp", "shard", "new", "skip"])
def test_an_edit_keeps_history_and_reads_one_stream_on_every_world_size_and_resume(
        corpus, extra, packing, name, cli, tmp_path):  # noqa: F811
    step, edits = cases(extra)[name]
    unedited = read(stream(corpus, packing), STEPS, 0)
    expected = read(stream(corpus, packing, **edits), STEPS, 0)
    before = step * B
    assert all(expected[k] == unedited[k] for k in range(before)), "history changed"
    assert any(expected[k] != unedited[k] for k in range(before, STEPS * B)), "no change"
    rng = random.Random(f"{name}{packing}")
    for world, workers, world_after in ((1, 0, 3), (3, 2, 8), (8, 0, 1)):
        cut = rng.randint(1, STEPS - 1)
        got, states = {}, []
        for rank in range(world):
            s = stream(corpus, packing, world, rank, **edits)
            got.update(read(s, cut, workers))
            states.append(json.loads(json.dumps(s.state_dict())))
        assert len({json.dumps(st, sort_keys=True) for st in states}) == 1
        for rank in range(world_after):
            s = stream(corpus, packing, world_after, rank, **edits)
            s.load_state_dict(states[0])
            more = read(s, STEPS - cut, 0)
            assert not set(more) & set(got)
            got.update(more)
        assert got == expected, f"W {world} (workers {workers}) -> W' {world_after} at {cut}"
    # The audit replays checkpoints of the edited run, given the edits as flags.
    s, files = stream(corpus, packing, **edits), []
    for k in range(0, 4 * STEPS + 1):
        if k % 6 == 0:
            files.append(tmp_path / f"state{k}.json")
            files[-1].write_text(json.dumps(s.state_dict()))
        s._plan.skip_step(1, 0)
    args = ["tokens", "audit", "--seq-len", L, "--global-batch", B, "--seed", 3,
            "--packing", packing]
    if packing == "best-fit":
        args += ["--window", 16]
    for prefixes, weight in corpus[0]:
        args += ["--source", ",".join(prefixes) + f":{weight}"]
    for path in files:
        args += ["--state", path]
    audit = cli(*args, *cli_flags(edits, tmp_path), check=False)
    assert audit.returncode == 0 and audit.stdout.splitlines()[-1].startswith("OK"), audit.stdout
    if name == "skip":
        assert "skipped source 0 epoch" in audit.stdout, audit.stdout
    # Without the edit the checkpoints after it are refused, naming the edits.
    refused = cli(*args, check=False)
    assert refused.returncode == 2 and "edits" in refused.stderr, refused.stderr


def test_appended_documents_are_the_files_tokens(corpus, extra):  # noqa: F811
    _, documents = corpus
    new_docs, shard_docs = extra["new"][1], extra["shard"][1]
    everything = {0: documents[0], 1: documents[1] + shard_docs, 2: documents[2], 3: new_docs}
    _, edits = cases(extra)["new"]
    edits = dict(edits, appends=edits["appends"] + [(1, 1, extra["shard"][0])])
    planner, reader = stream(corpus, "concat", **edits), stream(corpus, "concat", **edits)
    seen = set()
    for _ in range(STEPS):
        plan = planner._plan.plan_step(1, 0)
        batch = next(iter(reader))
        reader._received = 0
        rows = torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
        for (k, spans), row in zip(plan, rows):
            want = []
            for source, document, begin, end, _epoch in spans:
                want += everything[source][document][begin:end]
                seen.add((source, document >= len(documents[source]) if source < 3 else True))
            assert row.tolist() == want
    assert (3, True) in seen and (1, True) in seen, "the appended documents were never read"


def test_edit_flags_parse_as_the_cli_parses_them(extra, tmp_path):
    for name, (_, edits) in cases(extra).items():
        flags = cli_flags(edits, tmp_path)
        parsed = edits_from_flags(list(zip(flags[::2], flags[1::2])))
        want = {key: [tuple(e) for e in edits.get(key, [])]
                for key in ("changes", "ramps", "appends", "skips")}
        want["appends"] = [(step, source, [prefix]) for step, source, prefix in want["appends"]]
        want["skips"] = [(step, sorted(listed)) for step, listed in want["skips"]]
        assert parsed == want, name
    with pytest.raises(ValueError,
                       match=r"--ramp 5:3:1,1: the ramp's end 3 must follow its start 5"):
        edits_from_flags([("--ramp", "5:3:1,1")])
    with pytest.raises(ValueError, match=r"--change 4:1,x: weight 'x' is not a finite number"):
        edits_from_flags([("--change", "4:1,x")])
    with pytest.raises(ValueError, match=r"edit flag '--drop'; allowed: --change"):
        edits_from_flags([("--drop", "1")])


def test_bad_edits_are_refused_naming_the_edit(corpus, extra):  # noqa: F811
    with pytest.raises(ValueError, match=r"changes\[0\]\[1\] = -1"):
        stream(corpus, "concat", changes=[(3, [1, -1, 1])])
    with pytest.raises(ValueError, match=r"step 3: 2 weights in force for 3 sources"):
        stream(corpus, "concat", changes=[(3, [1, 1])])
    with pytest.raises(ValueError, match=r"appends\[0\]: source = 7; allowed: 0 to 3"):
        stream(corpus, "concat", appends=[(3, 7, extra["new"][0])])
    with pytest.raises(ValueError, match=r"skips\[0\]: document 99 of source 2 does not exist"):
        stream(corpus, "concat", skips=[(1, [(2, 99)])])
    with pytest.raises(ValueError, match=r"ramps\[0\]: the ramp's end 3 must follow its start 5"):
        stream(corpus, "concat", ramps=[(5, 3, [1, 1, 1])])
    with pytest.raises(RuntimeError, match=r"appends\[0\]: .*cannot open|No such file"):
        stream(corpus, "concat", appends=[(3, 1, "/nonexistent/shard")])
