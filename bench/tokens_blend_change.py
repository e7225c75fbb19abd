#!/usr/bin/env python3
"""Changing the blend weights at a resume, Megatron-LM against ours: the tokens, samples and
documents each source repeats or loses, computed from what each side reads. Run with the
interpreter that has megatron-core (the torch 2 venv, .venv):

    .venv/bin/python bench/tokens_blend_change.py [--distsampler build/bin/distsampler] \
        [--write docs/benchmarks.md]

The sources: SOURCES Megatron indexed datasets written by megatron-core's IndexedDatasetBuilder
(bench/tokens_data.py's lengths and writer) into a temporary folder. A run of N = STEPS x B
samples of L + 1 tokens reads its first K = CHANGE_STEP x B with the weights W1, and is resumed
at step CHANGE_STEP with the weights W2.

Megatron (megatron-core's BlendedMegatronDatasetBuilder, BlendedDataset over one GPTDataset per
source, on the CPU as rank 0 of a gloo group of one): run A builds the blend for N samples with
W1 and reads samples [0, K); the resume, run B, builds it again with W2 (same files, seed and
settings) and reads [K, N). Every sample read is mapped to the tokens it covers through
BlendedDataset's dataset_index / dataset_sample_index and the GPTDataset's shuffle_index,
sample_index and document_index, and checked equal to the tokens megatron-core's own
__getitem__ returns. Ours: `distsampler tokens plan ... --change CHANGE_STEP:W2`, the whole run in
one plan; its per-source document orders come from two plans without a change (W1 and W2).

Counted per source, within its first epoch (the sizes keep every source inside it on both sides,
and the script checks that): a token read twice is a repeat; a token never read that comes, in
the source's own order (Megatron: its GPTDataset samples by dataset_sample_index; ours: its
documents in their order), before the last token read from it is lost. A sequence's last token is
the next one's first: each sequence counts its first L tokens as read.

--write replaces the text between this section's markers in the file, or appends the section.
Without --change in the CLI the script fails, and so it does when ours' token shares before and
after the change step do not follow W1 and W2 (a CLI that takes the flag and ignores it);
--ours-without-change (for a CLI from before the flag) runs ours with W1 throughout and says so
in the table.
"""
import argparse
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokens import read_plan, replace_between  # noqa: E402 (bench/tokens.py's helpers)
from tokens_data import DTYPE, lengths_of, write_builder  # noqa: E402

SOURCES, DOCUMENTS = 3, 4000  # documents per source
W1 = (0.5, 0.3, 0.2)
W2 = (0.2, 0.3, 0.5)
SEQ_LEN, GLOBAL_BATCH, SEED = 128, 32, 1
STEPS, CHANGE_STEP = 500, 250  # N = STEPS x B samples; the resume at step CHANGE_STEP
DEFAULT_BINARY = os.path.join("build", "bin", "distsampler")
REFERENCE_MARGIN = 1.1  # ours' order plans run this much longer than the run
BEGIN = "<!-- bench/tokens_blend_change.py: begin (generated; edit the script, not this text) -->"
END = "<!-- bench/tokens_blend_change.py: end -->"
HEADING = "## Changing the blend weights at a resume: Megatron-LM against ours"


def ranges_to_ids(starts, ends):
    """The concatenation of range(starts[i], ends[i]) over i, as one int64 array."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(ends, dtype=np.int64) - starts
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    if not len(lengths):
        return np.zeros(0, dtype=np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def offsets_of(lengths):
    """A source's token ids: document d's tokens are [offsets[d], offsets[d + 1])."""
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])


def count_source(lengths, read_ids, order_ids):
    """One source within one epoch. lengths: its documents' token counts; read_ids: the token
    ids read (offsets_of numbering), once per read; order_ids: the source's token ids in its own
    order, from its first token on, at least up to the last one read. Returns the tokens read,
    the tokens read again (a token read r > 1 times counts r - 1), the tokens lost (never read,
    before the last token read in the order), and the documents with a token read again, with a
    token lost, and lost whole. Raises when a token read is not in the order (the order does not
    describe what was read) or the order repeats a token (it is not one epoch)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    counts = np.bincount(np.asarray(read_ids, dtype=np.int64), minlength=total)
    if len(counts) != total:
        raise ValueError(f"a token id read is past the source's {total} tokens")
    order_ids = np.asarray(order_ids, dtype=np.int64)
    if len(np.unique(order_ids)) != len(order_ids):
        raise ValueError("the order holds a token twice: it is not one epoch")
    read_in_order = counts[order_ids] > 0
    frontier = int(np.flatnonzero(read_in_order)[-1]) + 1 if read_in_order.any() else 0
    if int(read_in_order.sum()) != int((counts > 0).sum()):
        raise ValueError(f"{int((counts > 0).sum()) - int(read_in_order.sum())} tokens read are "
                         "not in the source's order")
    lost = order_ids[:frontier][~read_in_order[:frontier]]
    document = np.repeat(np.arange(len(lengths)), lengths)
    read_per_document = np.bincount(document, weights=counts > 0, minlength=len(lengths))
    lost_documents = np.unique(document[lost])
    return {"read": int(counts.sum()), "repeated": int(np.maximum(counts - 1, 0).sum()),
            "lost": len(lost),
            "documents_repeated": len(np.unique(document[counts > 1])),
            "documents_lost": len(lost_documents),
            "documents_lost_whole": int((read_per_document[lost_documents] == 0).sum())}


def count_samples(sample_ids):
    """Megatron's per-dataset samples read (dataset_sample_index values, once per read): the
    samples read again, and those below the highest read never read."""
    ids = np.asarray(sample_ids, dtype=np.int64)
    if not len(ids):
        return {"samples_repeated": 0, "samples_lost": 0}
    distinct = len(np.unique(ids))
    return {"samples_repeated": len(ids) - distinct, "samples_lost": int(ids.max()) + 1 - distinct}


# Ours: the CLI's plans.

def plan(binary, prefixes, weights, steps, out, change=None):
    """`distsampler tokens plan` over the sources, world size 1, steps [0, steps), into the file
    `out`; change = (step, weights) adds --change. Returns read_plan's list. Raises with the CLI's
    words when it fails (an unknown --change included)."""
    cmd = [binary, "tokens", "plan"]
    for prefix, weight in zip(prefixes, weights):
        cmd += ["--source", f"{prefix}:{weight}"]
    cmd += ["--seq-len", str(SEQ_LEN), "--global-batch", str(GLOBAL_BATCH), "--steps",
            f"0:{steps - 1}", "--seed", str(SEED), "--packing", "concat"]
    if change is not None:
        cmd += ["--change", f"{change[0]}:" + ",".join(str(w) for w in change[1])]
    with open(out, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\nexited {proc.returncode}: {proc.stderr.strip()}"
                         + ("\n(this CLI has no --change yet: build one that has, or pass "
                            "--ours-without-change to run ours with W1 throughout)"
                            if "unknown flag '--change'" in proc.stderr else ""))
    return read_plan(out)


def first_tokens(spans, seq_len=SEQ_LEN):
    """A concat sequence's spans cut to its first L tokens (its last is the next one's first)."""
    out, left = [], seq_len
    for source, document, begin, end in spans:
        take = min(end - begin, left)
        if take > 0:
            out.append((source, document, begin, begin + take))
        left -= take
    if left:
        raise ValueError(f"a sequence holds {seq_len - left} tokens, fewer than L = {seq_len}")
    return out


def ours_read_ids(sequences, offsets):
    """Per source, the token ids a plan's sequences read (first L tokens of each)."""
    spans = [s for _, sequence in sequences for s in first_tokens(sequence)]
    out = []
    for source, off in enumerate(offsets):
        mine = [(d, b, e) for s, d, b, e in spans if s == source]
        docs = np.array([d for d, _, _ in mine], dtype=np.int64)
        out.append(ranges_to_ids(off[docs] + [b for _, b, _ in mine],
                                 off[docs] + [e for _, _, e in mine]) if mine
                   else np.zeros(0, dtype=np.int64))
    return out


def ours_orders(references, lengths):
    """Per source, its documents in the order the plans without a change read them (their first
    appearance), the plans checked to agree where they overlap, as token ids in that order."""
    orders = []
    for source, source_lengths in enumerate(lengths):
        longest = []
        for sequences in references:
            seen, order = set(), []
            for _, spans in sequences:
                for s, d, _, _ in spans:
                    if s == source and d not in seen:
                        seen.add(d)
                        order.append(d)
            common = min(len(order), len(longest))
            if order[:common] != longest[:common]:
                raise SystemExit(f"source {source}: the plans without a change read its documents "
                                 "in different orders")
            longest = max(longest, order, key=len)
        off = offsets_of(source_lengths)
        docs = np.array(longest, dtype=np.int64)
        orders.append(ranges_to_ids(off[docs], off[docs + 1]))
    return orders


def sequences_check(sequences, n):
    """Sequences of the run read more than once, and of [0, n) never read."""
    ids = [k for k, _ in sequences]
    return len(ids) - len(set(ids)), len(set(range(n)) - set(ids))


def shares(sequences, first, last, sources):
    """Each source's share of the first L tokens of sequences [first, last)."""
    tokens = np.zeros(sources, dtype=np.int64)
    for k, spans in sequences:
        if first <= k < last:
            for source, _, begin, end in first_tokens(spans):
                tokens[source] += end - begin
    return tokens / tokens.sum()


def check_change(sequences, before, after, k, n):
    """Ours' token shares in sequences [0, k) and [k, n), raising unless each source's is within
    a quarter of its change (or 0.01) of its weight, `before` then `after` (a CLI that accepted
    --change and ignored it would otherwise count zeros for a run whose weights never changed)."""
    measured = (shares(sequences, 0, k, len(before)), shares(sequences, k, n, len(before)))
    for got, want, segment in zip(measured, (before, after), (f"[0, {k})", f"[{k}, {n})")):
        for s in range(len(before)):
            if abs(got[s] - want[s]) > max(abs(before[s] - after[s]) / 4, 0.01):
                raise SystemExit(f"ours' sequences {segment}: source {s} has {got[s]:.3f} of the "
                                 f"tokens, against a weight of {want[s]}: the CLI did not apply "
                                 "the change (" + ", ".join(f"{x:.3f}" for x in got) + ")")
    return measured


def run_ours(args, prefixes, lengths, scratch):
    n = STEPS * GLOBAL_BATCH
    reference_steps = int(STEPS * REFERENCE_MARGIN)
    references = [plan(args.distsampler, prefixes, w, reference_steps,
                       os.path.join(scratch, f"reference{i}.jsonl"))
                  for i, w in enumerate((W1, W2))]
    change = None if args.ours_without_change else (CHANGE_STEP, W2)
    run = plan(args.distsampler, prefixes, W1, STEPS, os.path.join(scratch, "ours.jsonl"), change)
    for sequences in references:  # one epoch: no plan without a change reads a token twice
        for ids, source_lengths in zip(ours_read_ids(sequences, [offsets_of(x) for x in lengths]),
                                       lengths):
            if len(ids) and np.bincount(ids).max() > 1:
                raise SystemExit("a plan without a change reads a token twice: a source is past "
                                 "its first epoch; give the sources more documents")
    orders = ours_orders(references, lengths)
    reads = ours_read_ids(run, [offsets_of(x) for x in lengths])
    rows = [count_source(source_lengths, ids, order)
            for source_lengths, ids, order in zip(lengths, reads, orders)]
    measured = check_change(run, W1, W1 if args.ours_without_change else W2,
                            CHANGE_STEP * GLOBAL_BATCH, n)
    return rows, sequences_check(run, n), measured


# Megatron: BlendedDataset over GPTDatasets, built twice.

def gpt_stream(gpt, offsets):
    """A GPTDataset of one epoch: its documents back to back in document_index order, as token
    ids, and where each document_index entry starts in that stream."""
    document_index = np.asarray(gpt.document_index, dtype=np.int64)
    if len(document_index) != len(offsets) - 1:
        raise SystemExit(f"a GPTDataset's document index holds {len(document_index)} entries for "
                         f"{len(offsets) - 1} documents: more than one epoch; give the sources "
                         "more documents")
    stream = ranges_to_ids(offsets[document_index], offsets[document_index + 1])
    starts = offsets_of(np.diff(offsets)[document_index])
    return stream, starts


def gpt_sample_ids(gpt, stream, starts, samples):
    """The token ids of GPTDataset samples `samples` (dataset_sample_index values), first L tokens
    each, one row per sample: shuffle_index, then sample_index's (document index entry, offset)
    of where the sample begins, as _query_document_sample_shuffle_indices reads it."""
    shuffled = np.asarray(gpt.shuffle_index)[np.asarray(samples, dtype=np.int64)]
    begin = np.asarray(gpt.sample_index)[shuffled]
    first = starts[begin[:, 0].astype(np.int64)] + begin[:, 1].astype(np.int64)
    return stream[first[:, None] + np.arange(SEQ_LEN)]


def run_megatron(prefixes, lengths, scratch, bins):
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from tokens_megatron import build_train, open_group
    import torch
    n, k = STEPS * GLOBAL_BATCH, CHANGE_STEP * GLOBAL_BATCH
    cache = os.path.join(scratch, "cache")
    open_group(cache)
    offsets = [offsets_of(x) for x in lengths]
    reads = [[] for _ in prefixes]
    samples = [[] for _ in prefixes]
    indices = []
    for weights, first, last in ((W1, 0, k), (W2, k, n)):
        train = build_train(prefixes, weights, n, SEQ_LEN, SEED, cache)
        indices.append([(np.asarray(g.document_index), np.asarray(g.sample_index),
                         np.asarray(g.shuffle_index)) for g in train.datasets])
        positions = np.arange(first, last)
        dataset = np.asarray(train.dataset_index)[positions]
        sample = np.asarray(train.dataset_sample_index)[positions]
        for d, gpt in enumerate(train.datasets):
            stream, starts = gpt_stream(gpt, offsets[d])
            mine = dataset == d
            ids = gpt_sample_ids(gpt, stream, starts, sample[mine])
            for p, row in zip(positions[mine], ids):  # megatron-core's own answer, every sample
                got = train[int(p)]
                if int(got["dataset_id"]) != d or \
                        not np.array_equal(np.asarray(got["tokens"]), bins[d][row]):
                    raise SystemExit(f"sample {p}: megatron-core's tokens differ from the "
                                     "mapping's")
            reads[d].append(ids.ravel())
            samples[d].append(sample[mine])
    torch.distributed.destroy_process_group()
    same_gpt = all(all(np.array_equal(x, y) for x, y in zip(a, b))
                   for a, b in zip(*indices))
    rows = []
    for d, gpt in enumerate(train.datasets):
        ids = np.concatenate(samples[d])
        stream, starts = gpt_stream(gpt, offsets[d])
        order = gpt_sample_ids(gpt, stream, starts, np.arange(int(ids.max()) + 1)).ravel()
        row = count_source(lengths[d], np.concatenate(reads[d]), order)
        row.update(count_samples(ids))
        rows.append(row)
    return rows, same_gpt


def write_sources(folder):
    """SOURCES sources of DOCUMENTS documents, bench/tokens_data.py's lengths, written by
    IndexedDatasetBuilder; returns the prefixes, the lengths and the tokens (memory-mapped)."""
    tokens = np.random.default_rng(SEED).integers(0, 50_000, 200_000, dtype=DTYPE)
    prefixes, lengths, bins = [], [], []
    for source in range(SOURCES):
        prefix = os.path.join(folder, f"source{source}")
        source_lengths = lengths_of(source, DOCUMENTS)
        write_builder(prefix, source_lengths, tokens)
        prefixes.append(prefix)
        lengths.append(source_lengths)
        bins.append(np.memmap(prefix + ".bin", dtype=DTYPE, mode="r"))
    return prefixes, lengths, bins


def fmt_cell(*values):
    return " / ".join(f"{v:,}" for v in values)


def section(emit, args, lengths, megatron, same_gpt, ours, sequences, measured, seconds):
    n, k = STEPS * GLOBAL_BATCH, CHANGE_STEP * GLOBAL_BATCH
    ours_label = ("ours with W1 throughout (--ours-without-change: no blend change, a CLI without "
                  "--change)" if args.ours_without_change else
                  f"ours (`--change {CHANGE_STEP}:{','.join(map(str, W2))}`)")
    emit(BEGIN)
    emit()
    binary = "" if args.distsampler == DEFAULT_BINARY else f" --distsampler {args.distsampler}"
    emit(f"Computed on {time.strftime('%Y-%m-%d')} by `.venv/bin/python "
         f"bench/tokens_blend_change.py{binary} --write docs/benchmarks.md` (megatron-core "
         f"{importlib.metadata.version('megatron-core')}; ours `{args.distsampler}`), in "
         f"{seconds:.0f} s. {SOURCES} sources of {DOCUMENTS:,} documents written by "
         "megatron-core's "
         "`IndexedDatasetBuilder` (lengths from `bench/tokens_data.py`: lognormal, median 300 "
         "tokens; " + ", ".join(f"{int(x.sum()):,}" for x in lengths) + " tokens), L = "
         f"{SEQ_LEN}, B = {GLOBAL_BATCH}, seed {SEED}. The run: N = {STEPS} steps = {n:,} samples; "
         f"steps [0, {CHANGE_STEP}) (K = {k:,} samples) with W1 = {list(W1)}, then a resume at "
         f"step {CHANGE_STEP} with W2 = {list(W2)}.")
    emit()
    emit("Megatron: `BlendedMegatronDatasetBuilder(GPTDataset, [N, 0, 0], ...)` with W1, samples "
         "[0, K) read; then built again with W2 (same files, seed, settings and cache folder) "
         "and samples [K, N) read, as a job resumed with new weights does. Each sample read is "
         "mapped to its tokens through `dataset_index` / `dataset_sample_index` and the "
         "GPTDataset's `shuffle_index`, `sample_index`, `document_index`, checked equal to the "
         "tokens `dataset[i]` returns. The two builds' GPTDatasets were "
         + ("identical (one epoch each: the same document, sample and shuffle indices), so "
            "the difference is the blend alone" if same_gpt else
            "different (their indices changed with the weights too)") + ": "
         "`build_blending_indices` (megatron-core's `datasets/helpers.cpp`) starts every "
         "dataset's sample counter at 0 for the new weights, so at position p source s is at "
         "sample about W2[s] x p, not where run A left it. Ours: `distsampler tokens plan` over "
         "the same files, the whole run in one plan; each source's order is read from two plans "
         "without a change (W1, W2), which agree.")
    emit()
    emit("Per source, within its first epoch (neither side leaves it): a token read again counts "
         "once per extra read; a token is lost if never read while a later token of the "
         "source's order was (Megatron's order: its GPTDataset's samples by "
         "`dataset_sample_index`; ours: the source's document order). Samples are Megatron's "
         "per-dataset samples (`dataset_sample_index` values); documents: those with a token "
         "read again, and with a token lost (in parentheses: lost whole). Each sequence counts "
         "its first L tokens (its last is the next one's first).")
    emit()
    emit("| source | W1 -> W2 | Megatron: tokens read | repeated: tokens / samples / documents | "
         f"lost: tokens / samples / documents (whole) | {ours_label}: tokens read | "
         "repeated: tokens / documents | lost: tokens / documents (whole) |")
    emit("|---|---|---|---|---|---|---|---|")
    for s, (m, o) in enumerate(zip(megatron, ours)):
        emit(f"| {s} | {W1[s]} -> {W2[s]} | {m['read']:,} | "
             f"{fmt_cell(m['repeated'], m['samples_repeated'], m['documents_repeated'])} | "
             f"{fmt_cell(m['lost'], m['samples_lost'], m['documents_lost'])} "
             f"({m['documents_lost_whole']:,}) | {o['read']:,} | "
             f"{fmt_cell(o['repeated'], o['documents_repeated'])} | "
             f"{fmt_cell(o['lost'], o['documents_lost'])} ({o['documents_lost_whole']:,}) |")
    emit()
    emit(f"Ours read sequences [0, {n:,}): {sequences[0]} read twice, {sequences[1]} missing. "
         f"Its token shares (first L tokens of each sequence): [0, {k:,}) "
         + ", ".join(f"{x:.4f}" for x in measured[0]) + f"; [{k:,}, {n:,}) "
         + ", ".join(f"{x:.4f}" for x in measured[1]) + ".")
    emit()
    emit(END)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--distsampler", default=DEFAULT_BINARY,
                        help="the CLI (default build/bin/distsampler)")
    parser.add_argument("--write", help="replace (or append) the section in this file")
    parser.add_argument("--ours-without-change", action="store_true",
                        help="a CLI without --change: ours with W1 throughout (no blend change)")
    args = parser.parse_args()
    # megatron-core's import says it on the CPU, once per module: nothing this script uses.
    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")
    started = time.time()
    lines = []

    def emit(text=""):
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory() as scratch:
        prefixes, lengths, bins = write_sources(scratch)
        ours, sequences, measured = run_ours(args, prefixes, lengths, scratch)
        megatron, same_gpt = run_megatron(prefixes, lengths, scratch, bins)
        section(emit, args, lengths, megatron, same_gpt, ours, sequences, measured,
                time.time() - started)
    if args.write:
        replace_between(args.write, "\n".join(lines), BEGIN, END, HEADING)
        print(f"wrote the blend change section of {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
