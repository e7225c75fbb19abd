"""Held-out splits and evaluation streams (docs/tokens.md, "Validation"), through the DataLoader
with workers: training never reads a held-out document (appended ones included); an evaluation
pass reads every document of its split exactly once across the ranks on W in {1, 3, 8}, ending at
the same step on every rank; the validation loss of one model is the same number on those W;
evaluating never moves the training stream; bad splits and subsets get one clear error.

Every document holds one token repeated, its id, so a batch says which documents it read.
"""
import json
import random

import pytest

torch = pytest.importorskip("torch")

from distsampler.indexed import write_indexed  # noqa: E402
from distsampler.tokens import TokenStream, split_of  # noqa: E402

L, B = 16, 24
SPLIT = (80, 15, 5)
VOCAB = 4096
LENGTHS = [0, 1, 3, 7, 16, 17, 40]  # empty ones, and longer than L + 1


def doc_id(source, document):
    return 1 + source * 1300 + document  # never the pad token 0, below VOCAB


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three sources of 300, 200 and 400 documents; returns (sources, lengths[s][d])."""
    root, rng = tmp_path_factory.mktemp("splits"), random.Random(5)
    sources, lengths = [], []
    for s, (count, weight) in enumerate([(300, 0.5), (200, 0.2), (400, 0.3)]):
        sizes = [rng.choice(LENGTHS) for _ in range(count)]
        write_indexed(str(root / f"s{s}"), [[doc_id(s, d)] * n for d, n in enumerate(sizes)],
                      dtype="int32")
        sources.append((str(root / f"s{s}"), weight))
        lengths.append(sizes)
    return sources, lengths


def stream(sources, **kwargs):
    args = dict(seq_len=L, global_batch=B, seed=3, split=SPLIT, rank=0, world_size=1)
    args.update(kwargs)
    return TokenStream(sources, **args)


def rows(batch):
    """Each row's L + 1 tokens."""
    return torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)


def documents_in(batches):
    return {int(t) for b in batches for t in rows(b).flatten() if int(t) != 0}


def expected_ids(lengths, subset):
    return {doc_id(s, d) for s, sizes in enumerate(lengths) for d, n in enumerate(sizes)
            if n > 0 and split_of(SPLIT, s, d) == subset}


def test_the_split_follows_the_fractions_and_names_bad_ones(corpus):
    _, lengths = corpus
    counts = {"train": 0, "valid": 0, "test": 0}
    for s, sizes in enumerate(lengths):
        for d in range(len(sizes)):
            counts[split_of(SPLIT, s, d)] += 1
    assert sum(counts.values()) == 900 and counts["valid"] > 80 and counts["test"] > 15
    assert split_of((969, 30, 1), 2, 17) == split_of((96.9, 3, 0.1), 2, 17)
    with pytest.raises(ValueError, match=r"split\[1\] = -1"):
        split_of((1, -1), 0, 0)
    with pytest.raises(ValueError, match="1 to 3 allowed"):
        stream(corpus[0], split=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="subset = 'validation' is not a subset; allowed: train, valid, test"):
        stream(corpus[0], subset="validation")
    with pytest.raises(ValueError, match="steps = 4: a cap on an evaluation pass"):
        stream(corpus[0], steps=4)
    with pytest.raises(ValueError, match=r"sources\[0\]: none of its 300 documents"):
        stream(corpus[0], split=(0, 1))


@pytest.mark.parametrize("packing", ["concat", "best-fit"])
def test_training_never_reads_a_held_out_document_appended_ones_included(corpus, tmp_path,
                                                                         packing):
    sources, lengths = corpus
    extra = [[doc_id(1, 200 + d)] * 9 for d in range(60)]  # appended to source 1 at step 3
    write_indexed(str(tmp_path / "extra"), extra, dtype="int32")
    train = stream(sources, packing=packing, window=16, micro_batch=6,
                   appends=[(3, 1, str(tmp_path / "extra"))])
    it = train.loader(num_workers=2)
    seen = documents_in(next(it) for _ in range(4 * 60))  # 60 steps: several source epochs
    held = expected_ids(lengths, "valid") | expected_ids(lengths, "test")
    held |= {doc_id(1, 200 + d) for d in range(60) if split_of(SPLIT, 1, 200 + d) != "train"}
    assert held and not seen & held, f"held-out documents read: {sorted(seen & held)[:5]}"
    trained = expected_ids(lengths, "train")
    trained |= {doc_id(1, 200 + d) for d in range(60) if split_of(SPLIT, 1, 200 + d) == "train"}
    assert seen == trained  # and every training document, appended ones too, was read


def evaluate(val, workers):
    batches = list(val.loader(num_workers=workers))
    return batches


@pytest.mark.parametrize("packing", ["concat", "best-fit"])
@pytest.mark.parametrize("subset", ["valid", "test"])
def test_an_evaluation_pass_reads_every_document_once_on_any_world_size(corpus, packing, subset):
    sources, lengths = corpus
    passes = {}
    for world in (1, 3, 8):
        by_sequence, steps = {}, set()
        for rank in range(world):
            val = stream(sources, packing=packing, window=16, subset=subset, rank=rank,
                         world_size=world, micro_batch=(B // world) // 2 if world < 8 else None)
            batches = evaluate(val, workers=2)
            steps.add(batches[-1]["step"])
            for b in batches:
                for k, row, mask in zip(b["sequence"].tolist(), rows(b), b["loss_mask"]):
                    assert k not in by_sequence
                    by_sequence[k] = (row, mask)
        assert len(steps) == 1, f"W={world}: ranks stopped at steps {steps}"
        assert sorted(by_sequence) == list(range(len(by_sequence)))
        assert len(by_sequence) % B == 0
        passes[world] = by_sequence
    for world in (3, 8):
        assert passes[world].keys() == passes[1].keys()
        for k, (row, mask) in passes[1].items():
            assert torch.equal(passes[world][k][0], row) and torch.equal(passes[world][k][1], mask)
    # Each document of the subset, each token once: concat's consecutive sequences share a token.
    counts = {}
    ordered = [passes[1][k] for k in sorted(passes[1])]
    for i, (row, _) in enumerate(ordered):
        shared = packing == "concat" and i + 1 < len(ordered) and int(ordered[i + 1][0][0]) != 0
        for t in row[:-1] if shared else row:
            if int(t):
                counts[int(t)] = counts.get(int(t), 0) + 1
    want = {doc_id(s, d): n for s, sizes in enumerate(lengths) for d, n in enumerate(sizes)
            if n > 0 and split_of(SPLIT, s, d) == subset}
    assert counts == want
    # The padding rows past the pass are masked out of the loss.
    last = ordered[-1]
    assert int(last[0].count_nonzero()) == 0 or float(last[1].sum()) > 0
    assert all(float(mask.sum()) == 0 for row, mask in ordered if int(row.count_nonzero()) == 0)


def validation_loss(sources, world, model):
    """What each rank of `world` computes over its share of the pass, summed as all_reduce
    would: the mean cross-entropy over the tokens the loss mask keeps."""
    total, count = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    for rank in range(world):
        val = stream(sources, subset="valid", rank=rank, world_size=world)
        with torch.no_grad():
            for b in val.loader(num_workers=2):
                logits = model(b["tokens"])
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, VOCAB), b["labels"].reshape(-1), reduction="none")
                total += (loss * b["loss_mask"].reshape(-1)).double().sum()
                count += b["loss_mask"].double().sum()
    return float(total / count), int(count)


def test_the_validation_loss_is_the_same_on_every_world_size(corpus):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
    results = {world: validation_loss(corpus[0], world, model) for world in (1, 3, 8)}
    losses = [loss for loss, _ in results.values()]
    assert len({count for _, count in results.values()}) == 1, results
    assert max(losses) - min(losses) <= 1e-9 * abs(losses[0]), results


def test_evaluating_never_moves_the_training_stream(corpus):
    sources, _ = corpus
    train = stream(sources, micro_batch=6)
    it = train.loader(num_workers=2)
    for _ in range(4 * 3):
        next(it)
    before = train.state_dict()
    val = train.validation(steps=2)
    first = [rows(b) for b in val.loader(num_workers=2)]
    for _ in range(2):  # each pass from the start, in this process too
        again = [rows(b) for b in val.loader(num_workers=0)]
        assert len(again) == len(first) == 2 * 4
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert train.state_dict() == before
    continued = [rows(next(it)) for _ in range(4)]
    fresh = stream(sources, micro_batch=6)
    fresh.load_state_dict(before)
    resumed = fresh.loader(num_workers=2)
    assert all(torch.equal(a, rows(next(resumed))) for a in continued)
    with pytest.raises(RuntimeError, match="an evaluation stream .subset 'valid'. has no position"):
        val.state_dict()
    with pytest.raises(ValueError, match="subset = 'train'"):
        train.validation("train")


def test_the_validation_of_a_run_with_edits_reads_its_appended_and_not_its_skipped(corpus,
                                                                                   tmp_path):
    sources, lengths = corpus
    extra = [[doc_id(0, 300 + d)] * 5 for d in range(80)]
    write_indexed(str(tmp_path / "more"), extra, dtype="int32")
    valid = sorted(expected_ids(lengths, "valid"))
    skip_source, skip_doc = next((s, d) for s in range(3) for d in range(len(lengths[s]))
                                 if doc_id(s, d) in valid)
    train = stream(sources, appends=[(2, 0, str(tmp_path / "more"))],
                   skips=[(5, [(skip_source, skip_doc)])], changes=[(4, [1, 1, 1])])
    seen = documents_in(train.validation().loader(num_workers=2))
    want = expected_ids(lengths, "valid") - {doc_id(skip_source, skip_doc)}
    want |= {doc_id(0, 300 + d) for d in range(80) if split_of(SPLIT, 0, 300 + d) == "valid"}
    assert seen == want


def cli_args(sources, *extra, command="plan", split=",".join(str(f) for f in SPLIT)):
    args = ["tokens", command, "--seq-len", L, "--global-batch", B, "--seed", 3,
            "--split", split, *extra]
    for prefix, weight in sources:
        args += ["--source", f"{prefix}:{weight}"]
    return args


def test_the_cli_plans_the_same_evaluation_pass_and_audits_a_split_run(corpus, cli, tmp_path):
    sources, _ = corpus
    val = stream(sources, subset="valid", world_size=3, rank=2)
    plan, expected = val._plan.copy(), []
    for step in range(1000):
        if plan.exhausted:
            break
        for k, spans in plan.plan_step(3, 2):
            expected.append({"step": step, "rank": 2, "sequence": k,
                             "spans": [list(x[:4]) for x in spans]})
    lines = cli(*cli_args(sources, "--subset", "valid", "--world-size", 3, "--rank", 2,
                          "--steps", "0:999")).stdout.splitlines()
    assert [json.loads(line) for line in lines] == expected and 1 < step < 999
    # The audit of a training run with the split: held-out documents counted, never read.
    train = stream(sources)
    for _ in range(30):
        train._plan.skip_step(1, 0)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(train.state_dict()))
    audit = cli(*cli_args(sources, "--state", state, command="audit"))
    assert audit.stdout.splitlines()[-1].startswith("OK"), audit.stdout
    assert " held out; " in audit.stdout
    bad = cli(*cli_args(sources, split="90,x"), check=False)
    assert bad.returncode == 2 and "--split 90,x: 'x' is not a number" in bad.stderr, bad.stderr
    bad = cli(*cli_args(sources, "--subset", "dev"), check=False)
    assert bad.returncode == 2 and "--subset = 'dev' is not a subset; allowed: train, valid, test" in bad.stderr, bad.stderr
