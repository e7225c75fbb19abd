"""Which documents made a step (docs/tokens.md, "Which documents made a step"; issue 53, the
forward question): TokenStream.explain(step) and `distsampler tokens explain`, on randomized
configurations (concat and best-fit, splits, a locality order, weight changes, ramps, appends,
a new source and skip lists mid-run, several source passes, world sizes dividing the batch),
against a brute force: each rank's own plan walked to the step (the rows, their order, their
spans), the W = 1 plan summed step by step (the ledger), and the tokens the loader delivers
(each row is its spans' tokens in the files)."""
import json
import random
from collections import Counter

import pytest

from test_tokens import B, L, corpus, make_documents, read, write_indexed  # noqa: F401
from test_token_edits import cases, cli_flags, extra  # noqa: F401

torch = pytest.importorskip("torch")
from distsampler.tokens import TokenStream  # noqa: E402

DIVISORS = [w for w in range(1, B + 1) if B % w == 0]


def configurations(extra):  # noqa: F811
    """(name, TokenStream's arguments) drawn at random, each edit kind at least once."""
    rng = random.Random(53)
    edits = cases(extra)
    out = []
    for i in range(14):
        packing = ["concat", "best-fit"][i % 2]
        args = dict(packing=packing, window=16, seed=rng.randint(0, 2**64 - 1))
        first = list(edits)[i % len(edits)]
        # A second edit that meets no weights of the first (an appended shard, a skip list).
        others = [n for n in ("shard", "skip") if n != first]
        chosen = [first] + rng.sample(others, rng.randint(0, 1))
        for name in chosen:
            for key, value in edits[name][1].items():
                args[key] = list(args.get(key, [])) + list(value)
        if i % 3 == 1:
            args["split"] = [0.8, 0.15, 0.05]
        if i % 4 == 2:
            args["locality"] = [(2, 3), None, None]
        out.append((f"{packing}-{'+'.join(chosen)}-{i}", args))
    return out


def make(corpus, args, world_size=1, rank=0):  # noqa: F811
    return TokenStream(corpus[0], seq_len=L, global_batch=B, rank=rank, world_size=world_size,
                       **args)


def spans_of(row):
    return [(x["source"], x["document"], x["begin"], x["end"], x["source_epoch"])
            for x in row["spans"]]


def test_explain_is_every_ranks_plan_and_the_ledger_their_sum(corpus, extra):  # noqa: F811
    rng = random.Random(1)
    for name, args in configurations(extra):
        step, world = rng.randint(0, 14), rng.choice(DIVISORS)
        explained = make(corpus, args).explain(step, world_size=world)
        assert explained["step"] == step and explained["world_size"] == world
        assert [r["row"] for r in explained["rows"]] == list(range(B)), name
        for rank in range(world):
            s = make(corpus, args, world, rank)
            for _ in range(step):
                s._plan.skip_step(world, rank)
            mine = [r for r in explained["rows"] if r["rank"] == rank]
            planned = s._plan.plan_step(world, rank)
            assert [r["sequence"] for r in mine] == [k for k, _ in planned], name
            assert [r["rank_row"] for r in mine] == list(range(B // world)), name
            for row, (k, spans) in zip(mine, planned):
                assert spans_of(row) == [tuple(x) for x in spans], (name, k)
                assert row["tokens"] == sum(e - b for _, _, b, e, _ in spans)
                assert row["sequence"] == step * B + row["row"]
        whole, total, last = make(corpus, args), Counter(), Counter()
        for _ in range(step + 1):
            last = Counter()
            for _, spans in whole._plan.plan_step(1, 0):
                for source, _, begin, end, _ in spans:
                    last[source] += end - begin
            total.update(last)
        ledger = explained["sources"]
        assert [x["step_tokens"] for x in ledger] == [last[s] for s in range(len(ledger))], name
        assert [x["tokens_through"] for x in ledger] == [total[s] for s in range(len(ledger))]
        assert set(total) <= set(range(len(ledger)))
    # Several source passes were explained (the corpus is small beside 15 steps).
    late = make(corpus, configurations(extra)[0][1]).explain(14)
    assert max(x["source_epoch"] for r in late["rows"] for x in r["spans"]) >= 2


def test_each_row_is_what_the_loader_delivers(corpus, extra):  # noqa: F811
    """The rows explain names are the tokens the loader gives, on W = 2 with a worker."""
    documents = corpus[1]
    everything = {s: list(d) for s, d in enumerate(documents)}
    everything[1] = everything[1] + extra["shard"][1]
    everything[3] = extra["new"][1]
    for name, args in configurations(extra)[:4]:
        step = 5
        explained = make(corpus, args).explain(step, world_size=2)
        delivered = {}
        for rank in range(2):
            s = make(corpus, args, 2, rank)
            for _ in range(step):
                s._plan.skip_step(2, rank)
            delivered.update(read(s, 1, 1))
        for row in explained["rows"]:
            want = [t for x in row["spans"]
                    for t in everything[x["source"]][x["document"]][x["begin"]:x["end"]]]
            tokens, _ = delivered[row["sequence"]]
            assert tokens[:len(want)] == want, (name, row["sequence"])


def test_explain_never_moves_the_stream_and_refuses_bad_arguments(corpus, extra):  # noqa: F811
    s = make(corpus, {})
    first = s.explain(3)
    s._plan.skip_step(1, 0)
    s._plan.skip_step(1, 0)
    assert s.step == 2 and s.explain(3) == first
    one, four = s.explain(0)["rows"], s.explain(0, world_size=4)["rows"]
    assert [spans_of(r) for r in one] == [spans_of(r) for r in four]  # the stream is W's alike
    assert [r["rank"] for r in four] == [j // (B // 4) for j in range(B)]
    for call, message in [(lambda: s.explain(-1), "step = -1"),
                          (lambda: s.explain(1, world_size=5), "global_batch = 24 is not a "
                           "positive multiple of world_size = 5"),
                          (lambda: s.explain(True), "step = True")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            call()


class Spelled:
    """A tokenizer that spells ids: decode(ids) is them, joined by commas."""

    def decode(self, ids, skip_special_tokens=True):
        return ",".join(map(str, ids))


def test_with_a_tokenizer_each_span_has_its_text_with_the_appended_eod(corpus):  # noqa: F811
    eod = 65000
    s = make(corpus, dict(eod_token=eod, append_eod=True))
    explained = s.explain(2, tokenizer=Spelled())
    ends = 0
    for row in explained["rows"]:
        for x in row["spans"]:
            doc = corpus[1][x["source"]][x["document"]] + [eod]
            assert x["text"] == ",".join(map(str, doc[x["begin"]:x["end"]]))
            ends += x["end"] == len(doc)
    assert ends > 0  # spans that reach a document's end, its EOD appended by the reader


def run_flags(corpus, args, tmp_path):  # noqa: F811
    """The CLI's flags for the run make(corpus, args) makes (no split, no locality)."""
    edits = {k: v for k, v in args.items() if k in ("changes", "ramps", "appends", "skips")}
    flags = ["--seq-len", L, "--global-batch", B, "--seed", args["seed"], "--packing",
             args["packing"], *(["--window", 16] if args["packing"] == "best-fit" else [])]
    for prefixes, weight in corpus[0]:
        flags += ["--source", ",".join(prefixes) + f":{weight}"]
    return flags + cli_flags(edits, tmp_path)


def test_the_cli_explains_as_python_does(corpus, extra, cli, tmp_path):  # noqa: F811
    for name, args in configurations(extra)[:6]:
        if "split" in args or "locality" in args:
            continue
        flags = run_flags(corpus, args, tmp_path)
        got = cli("tokens", "explain", *flags, "--step", 7, "--world-size", 3, "--format",
                  "json")
        assert json.loads(got.stdout) == make(corpus, args).explain(7, world_size=3), name
        table = cli("tokens", "explain", *flags, "--step", 7, "--world-size", 3).stdout
        assert table.startswith(f"step 7: {B} sequences of up to {L + 1} tokens, on 3 ranks")
        assert len(table.splitlines()) == 1 + 1 + B + 1 + len(json.loads(got.stdout)["sources"])
    bad = cli("tokens", "explain", *flags, "--step", 1, "--format", "yaml", check=False)
    assert bad.returncode == 2 and "--format yaml: allowed: table, json" in bad.stderr
    bad = cli("tokens", "explain", *flags, "--step", 1, "--world-size", 5, check=False)
    assert bad.returncode == 2 and "world_size = 5" in bad.stderr, bad.stderr
    bad = cli("tokens", "explain", *flags, check=False)
    assert bad.returncode == 2 and "--step" in bad.stderr, bad.stderr
