"""bench/tokens_blend_change.py's counter: on a plan of ours with one sequence read twice and
another never read, it reports exactly that sequence's tokens as repeated and the other's as lost,
per source, and the documents they touch; on the plan itself, nothing; on hand-made reads, the
repeats and losses by definition (any stack).

The sources are written by megatron-core's IndexedDatasetBuilder (bench/tokens_data.py's writer),
so the plan cases run where megatron-core is installed, and wherever the suite is told it must be
(DISTSAMPLER_REQUIRE_MEGATRON=1: the _torch2 entries): missing there, they fail. Elsewhere they
skip, saying so."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import tokens_blend_change as bc  # noqa: E402

STEPS, DUPLICATED, DROPPED = 20, 100, 250


@pytest.fixture(scope="module")
def plan(tmp_path_factory, cli_path):
    """Two sources of 300 documents; the plan of steps [0, STEPS) with weights 0.7, 0.3 and the
    per-source orders from a longer plan."""
    try:
        from tokens_data import lengths_of, write_builder
        import megatron.core.datasets.indexed_dataset  # noqa: F401
    except ImportError as error:
        if os.environ.get("DISTSAMPLER_REQUIRE_MEGATRON") == "1":
            raise
        pytest.skip(f"megatron-core is not installed at {sys.executable} ({error}): its "
                    "IndexedDatasetBuilder writes these sources; the _torch2 entries require it")
    folder = tmp_path_factory.mktemp("blend_change")
    tokens = np.random.default_rng(1).integers(0, 50_000, 200_000, dtype=np.uint16)
    prefixes, lengths = [], []
    for source in range(2):
        prefix = str(folder / f"source{source}")
        lengths.append(lengths_of(source, 300))
        write_builder(prefix, lengths[-1], tokens)
        prefixes.append(prefix)
    sequences = bc.plan(cli_path, prefixes, (0.7, 0.3), STEPS, str(folder / "plan.jsonl"))
    reference = bc.plan(cli_path, prefixes, (0.7, 0.3), STEPS + 2, str(folder / "ref.jsonl"))
    return sequences, lengths, bc.ours_orders([reference], lengths)


def counts(sequences, lengths, orders):
    reads = bc.ours_read_ids(sequences, [bc.offsets_of(x) for x in lengths])
    return [bc.count_source(x, ids, order) for x, ids, order in zip(lengths, reads, orders)]


def test_the_plan_itself_repeats_and_loses_nothing(plan):
    sequences, lengths, orders = plan
    assert len(sequences) == STEPS * bc.GLOBAL_BATCH
    assert bc.sequences_check(sequences, len(sequences)) == (0, 0)
    for row in counts(sequences, lengths, orders):
        assert row["read"] > 0
        assert (row["repeated"], row["lost"], row["documents_repeated"],
                row["documents_lost"]) == (0, 0, 0, 0)


def test_a_sequence_read_twice_and_one_never_read_are_counted(plan):
    sequences, lengths, orders = plan
    broken = [row for row in sequences if row[0] != DROPPED]
    broken.insert(DUPLICATED + 7, sequences[DUPLICATED])
    assert bc.sequences_check(broken, len(sequences)) == (1, 1)
    rows = counts(broken, lengths, orders)
    again = bc.first_tokens(sequences[DUPLICATED][1])
    gone = bc.first_tokens(sequences[DROPPED][1])
    for source, row in enumerate(rows):
        assert row["repeated"] == sum(e - b for s, _, b, e in again if s == source)
        assert row["lost"] == sum(e - b for s, _, b, e in gone if s == source)
        assert row["documents_repeated"] == len({d for s, d, _, _ in again if s == source})
        assert row["documents_lost"] == len({d for s, d, _, _ in gone if s == source})
        # Lost whole: the dropped sequence's documents that no other sequence reads a token of.
        elsewhere = {d for k, spans in broken for s, d, _, _ in bc.first_tokens(spans)
                     if s == source}
        assert row["documents_lost_whole"] == len(
            {d for s, d, _, _ in gone if s == source} - elsewhere)
    assert sum(row["repeated"] for row in rows) == bc.SEQ_LEN
    assert sum(row["lost"] for row in rows) == bc.SEQ_LEN


def test_a_read_outside_the_order_is_refused(plan):
    sequences, lengths, orders = plan
    reads = bc.ours_read_ids(sequences, [bc.offsets_of(x) for x in lengths])
    with pytest.raises(ValueError, match="not in the source's order"):
        bc.count_source(lengths[0], reads[0], orders[0][:len(orders[0]) // 2])


def test_hand_made_reads_give_the_counts_by_definition():
    lengths = [3, 2, 4]  # token ids: document 0 is 0..2, 1 is 3..4, 2 is 5..8
    order = [5, 6, 7, 8, 0, 1, 2, 3, 4]  # documents 2, 0, 1
    # Document 2 read, then document 0's tokens 0 and 1 twice, token 2 never; document 1 read.
    row = bc.count_source(lengths, [5, 6, 7, 8, 0, 1, 0, 1, 3, 4], order)
    assert row == {"read": 10, "repeated": 2, "lost": 1, "documents_repeated": 1,
                   "documents_lost": 1, "documents_lost_whole": 0}
    # Only document 1 read: documents 2 and 0, before it in the order, lost whole.
    row = bc.count_source(lengths, [3, 4], order)
    assert (row["lost"], row["documents_lost"], row["documents_lost_whole"]) == (7, 2, 2)
    # Reads stop inside the order: what comes after the last token read is not lost.
    assert bc.count_source(lengths, [5, 6], order)["lost"] == 0
    assert bc.count_samples([0, 1, 1, 4, 2]) == {"samples_repeated": 1, "samples_lost": 1}


def test_a_change_the_plan_did_not_apply_is_refused(plan):
    sequences, _, _ = plan
    k, n = len(sequences) // 2, len(sequences)
    before, after = bc.check_change(sequences, (0.7, 0.3), (0.7, 0.3), k, n)
    assert abs(before[0] - 0.7) < 0.01 and abs(after[0] - 0.7) < 0.01
    with pytest.raises(SystemExit, match="did not apply the change"):
        bc.check_change(sequences, (0.7, 0.3), (0.3, 0.7), k, n)
