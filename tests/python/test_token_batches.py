"""The token stream's batches as LLM trainers take them (docs/tokens.md, "Batches"): position ids
restart at every segment and never reach seq_len; cu_seqlens and max_seqlen are what
flash-attention's varlen kernels are given for the same rows (checked against Hugging Face's
DataCollatorWithFlattening); position ids and the EOD loss mask are Megatron's (checked against
megatron-core's _get_ltor_masks_and_position_ids with reset_position_ids on the same rows); the
loss masks; a model with a learned position table of size seq_len trains on documents longer than
seq_len + 1 (and the earlier convention is shown to break it).

Hugging Face's and Megatron's code are the torch 2 stack's (requirements/torch2.txt pins them:
DISTSAMPLER_REQUIRE_TRANSFORMERS=1 and DISTSAMPLER_REQUIRE_MEGATRON=1 there make their absence a
failure); on Debian's stack those two tests skip, saying why.
"""
import random

import pytest

torch = pytest.importorskip("torch")

from distsampler.tokens import TokenStream, varlen_metadata  # noqa: E402
from stack import required  # noqa: E402

from distsampler.indexed import write_indexed  # noqa: E402

L, B = 16, 12
EOD = 999  # ends every document in the files, as preprocess_data.py --append-eod writes them


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two sources of documents of 1 to 60 tokens (most longer than L + 1), each ending in EOD."""
    root, rng = tmp_path_factory.mktemp("batches"), random.Random(11)
    sources = []
    for s, (count, weight) in enumerate([(50, 0.6), (40, 0.4)]):
        docs = [[rng.randrange(1, EOD) for _ in range(rng.choice([0, 2, 9, 30, 59]))] + [EOD]
                for _ in range(count)]
        write_indexed(str(root / f"s{s}"), docs)
        sources.append((str(root / f"s{s}"), weight))
    return sources


def batches(corpus, packing, steps=6, workers=0, **kwargs):
    s = TokenStream(corpus, seq_len=L, global_batch=B, seed=1, packing=packing, window=8,
                    rank=0, world_size=1, micro_batch=B // 3, **kwargs)
    it = s.loader(num_workers=workers)
    return [next(it) for _ in range(steps * 3)]


PACKINGS = pytest.mark.parametrize("packing", ["concat", "best-fit"])


@PACKINGS
def test_positions_restart_at_every_segment_and_never_reach_seq_len(corpus, packing):
    for batch in batches(corpus, packing, workers=2):
        pos, seg = batch["position_ids"], batch["segment_ids"]
        assert pos.shape == (B // 3, L) and int(pos.max()) < L
        starts = torch.ones_like(seg, dtype=torch.bool)
        starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
        real = seg >= 0
        assert bool((pos[starts & real] == 0).all())
        inside = ~starts & real
        assert bool((pos[:, 1:][inside[:, 1:]] == pos[:, :-1][inside[:, 1:]] + 1).all())
        assert bool((pos[~real] == 0).all())
    # The documents are longer than a row: the stream cuts them, and each piece counts from 0.
    doc = batches(corpus, packing, steps=2, positions="document")
    assert max(int(b["position_ids"].max()) for b in doc) >= L


@PACKINGS
def test_cu_seqlens_are_hugging_faces_flattening_of_the_same_rows(corpus, packing):
    transformers = required("transformers", "DISTSAMPLER_REQUIRE_TRANSFORMERS")
    collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True,
                                                       return_position_ids=True)
    for batch in batches(corpus, packing, workers=2):
        tokens, seg = batch["tokens"], batch["segment_ids"]
        features = [{"input_ids": tokens[r][seg[r] == i].tolist()}
                    for r in range(tokens.shape[0]) for i in range(int(seg[r].max()) + 1)]
        theirs = collator(features, return_tensors="pt")
        assert batch["cu_seqlens"].dtype == torch.int32
        assert batch["cu_seqlens"].tolist() == theirs["cu_seq_lens_q"].tolist()
        assert batch["max_seqlen"] == theirs["max_length_q"]
        real = seg >= 0
        assert tokens[real].tolist() == theirs["input_ids"][0].tolist()
        assert batch["position_ids"][real].tolist() == theirs["position_ids"][0].tolist()
    # Their labels hold -100 at every segment's first token: the prediction made from the token
    # before it is not trained. mask_cross_document masks the same predictions (each row's last
    # input aside: its label is the row's own next token, which their flattening does not hold).
    for ours in batches(corpus, packing, mask_cross_document=True):
        tokens, seg = ours["tokens"], ours["segment_ids"]
        features = [{"input_ids": tokens[r][seg[r] == i].tolist()}
                    for r in range(tokens.shape[0]) for i in range(int(seg[r].max()) + 1)]
        labels = collator(features, return_tensors="pt")["labels"][0]
        trained_there = (labels[1:] != -100).tolist() + [False]  # nothing after the last
        inside = (seg >= 0).clone()
        inside[:, -1] = False  # a row's last input: its label is not among their inputs
        flat_index = torch.cumsum((seg >= 0).flatten(), 0).view(seg.shape) - 1
        for r, i in inside.nonzero().tolist():
            assert bool(ours["loss_mask"][r, i]) == trained_there[int(flat_index[r, i])]


@PACKINGS
def test_positions_and_eod_loss_mask_are_megatrons_on_the_same_rows(corpus, packing):
    gpt_dataset = required("megatron.core.datasets.gpt_dataset", "DISTSAMPLER_REQUIRE_MEGATRON")
    # One source: Megatron's samples are cut from one dataset, so a segment ends only at an EOD
    # (or the row's end). Where the mix interleaves sources a segment can also end inside its
    # document, and there our positions restart and Megatron's, which see only EODs, would not.
    for batch in batches(corpus[:1], packing, eod_token=EOD, eod_mask_loss=True):
        for tokens, pos, seg, mask in zip(batch["tokens"], batch["position_ids"],
                                          batch["segment_ids"], batch["loss_mask"]):
            _, loss_mask, position_ids = gpt_dataset._get_ltor_masks_and_position_ids(
                tokens, EOD, reset_position_ids=True, reset_attention_mask=False,
                eod_mask_loss=True, create_attention_mask=False)
            real = seg >= 0  # best-fit pads a row's end: Megatron's rows have no padding
            assert pos[real].tolist() == position_ids[real].tolist()
            both = real.clone()  # an input and its label real (Megatron's loss knows no padding)
            both[:-1] &= real[1:]
            both[-1] = False
            assert mask[both].tolist() == loss_mask[both].tolist()


@PACKINGS
def test_loss_masks(corpus, packing):
    for mask_cross, eod_mask in [(False, False), (True, False), (False, True), (True, True)]:
        for batch in batches(corpus, packing, steps=3, mask_cross_document=mask_cross,
                             eod_token=EOD if eod_mask else None, eod_mask_loss=eod_mask):
            tokens, seg, mask = batch["tokens"], batch["segment_ids"], batch["loss_mask"]
            # Where the label's segment is known from the inputs: every column but the last.
            want = seg[:, 1:] >= 0
            if mask_cross:
                want &= seg[:, 1:] == seg[:, :-1]
            if eod_mask:
                want &= tokens[:, :-1] != EOD
            assert mask.dtype == torch.float32
            assert mask[:, :-1].bool().tolist() == want.tolist()


def test_varlen_metadata_of_padding_and_empty_rows():
    seg = torch.tensor([[0, 0, 1, 1, 1, -1], [0, 1, 2, -1, -1, -1], [-1] * 6], dtype=torch.int32)
    cu, longest = varlen_metadata(seg)
    assert cu.tolist() == [0, 2, 5, 6, 7, 8] and cu.dtype == torch.int32 and longest == 3
    cu, longest = varlen_metadata(torch.full((2, 4), -1, dtype=torch.int32))
    assert cu.tolist() == [0] and longest == 0


@PACKINGS
def test_a_learned_position_table_of_seq_len_trains_on_documents_longer_than_a_row(corpus,
                                                                                 packing):
    torch.manual_seed(0)
    embed, table = torch.nn.Embedding(EOD + 1, 8), torch.nn.Embedding(L, 8)
    head = torch.nn.Linear(8, EOD + 1)
    params = [*embed.parameters(), *table.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.5)

    def step(batch):
        logits = head(embed(batch["tokens"]) + table(batch["position_ids"]))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(),
                                                 reduction="none")
        loss = (loss * batch["loss_mask"].flatten()).sum() / batch["loss_mask"].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss)

    losses = [step(b) for b in batches(corpus, packing, steps=4, workers=2)]
    assert all(torch.isfinite(torch.tensor(losses)))
    # Positions counted in the document (the earlier convention) index past the table.
    with pytest.raises(IndexError):
        for b in batches(corpus, packing, steps=4, positions="document"):
            step(b)


@pytest.fixture(scope="module")
def without_eod(tmp_path_factory):
    """The same non-empty documents written twice: ending in EOD, and without it."""
    root, rng = tmp_path_factory.mktemp("eod"), random.Random(12)
    with_eod, bare = [], []
    for s, count in enumerate([40, 30]):
        docs = [[rng.randrange(1, EOD) for _ in range(rng.choice([1, 5, 16, 17, 40]))]
                for _ in range(count)]
        docs.append([])  # an empty document stays empty: no EOD (preprocess_data.py's rule)
        write_indexed(str(root / f"eod{s}"), [d + [EOD] if d else d for d in docs])
        write_indexed(str(root / f"bare{s}"), docs)
        with_eod.append((str(root / f"eod{s}"), 0.5))
        bare.append((str(root / f"bare{s}"), 0.5))
    return with_eod, bare


@PACKINGS
def test_an_appended_eod_reads_as_files_that_hold_it(without_eod, cli, packing):
    with_eod, bare = without_eod
    stored = batches(with_eod, packing, workers=2, eod_token=EOD, eod_mask_loss=True)
    appended = batches(bare, packing, workers=2, eod_token=EOD, eod_mask_loss=True,
                       append_eod=True)
    for a, b in zip(stored, appended):
        for key in ("tokens", "labels", "loss_mask", "position_ids", "segment_ids", "cu_seqlens"):
            assert torch.equal(a[key], b[key]), key
    # The CLI's plan over the bare files with --append-eod is the stored files' plan.
    args = ["tokens", "plan", "--seq-len", L, "--global-batch", B, "--seed", 1, "--packing",
            packing, "--steps", "0:5"] + (["--window", 8] if packing == "best-fit" else [])
    plans = [cli(*args, *[x for p, w in src for x in ("--source", f"{p}:{w}")], *extra).stdout
             for src, extra in ((with_eod, ()), (bare, ("--append-eod", EOD)))]
    assert plans[0] == plans[1] and plans[0].count("\n") == 6 * B
    # A checkpoint records it: a stream without the appended EOD refuses it, naming it.
    s = TokenStream(bare, seq_len=L, global_batch=B, eod_token=EOD, append_eod=True, rank=0,
                    world_size=1)
    with pytest.raises(ValueError, match="append_eod"):
        TokenStream(bare, seq_len=L, global_batch=B, rank=0, world_size=1).load_state_dict(
            s.state_dict())
    with pytest.raises(ValueError, match="append_eod=True needs eod_token"):
        TokenStream(bare, seq_len=L, global_batch=B, append_eod=True, rank=0, world_size=1)


@pytest.mark.parametrize("eod, allowed", [
    (-1, "a token id, an integer in [0, 9223372036854775807]"),
    (2**63, "a token id, an integer in [0, 9223372036854775807]"),
    (2**64, "a token id, an integer in [0, 9223372036854775807]"),
    (70000, "sources[0] holds uint16 tokens; allowed: 0 to 65535"),
    (2**63 - 1, "sources[0] holds uint16 tokens; allowed: 0 to 65535")])
def test_a_bad_eod_token_is_one_error_on_both_edges(without_eod, cli, eod, allowed):
    """One C++ check of the EOD id (loader/tokens.h's parse_eod_token, open_token_run): the same
    error from TokenStream, appended or masked only, and from the CLI's --append-eod."""
    _, bare = without_eod
    for append in (True, False):
        with pytest.raises(ValueError) as e:
            TokenStream(bare, seq_len=L, global_batch=B, eod_token=eod, append_eod=append,
                        eod_mask_loss=True, rank=0, world_size=1)
        assert str(e.value) == f"eod_token = {eod}: {allowed}"
    r = cli("tokens", "plan", "--seq-len", L, "--global-batch", B, "--source", f"{bare[0][0]}:1",
            "--append-eod", eod, check=False)
    assert r.returncode == 2
    assert r.stderr == f"distsampler tokens: --append-eod = {eod}: {allowed}\n"


def test_bad_batch_options_are_refused_naming_them(corpus):
    with pytest.raises(ValueError, match="positions = 'token'.*segment, document"):
        TokenStream(corpus, seq_len=L, global_batch=B, positions="token", rank=0, world_size=1)
    with pytest.raises(ValueError, match="eod_mask_loss=True needs eod_token"):
        TokenStream(corpus, seq_len=L, global_batch=B, eod_mask_loss=True, rank=0, world_size=1)
