"""distsampler.litgpt and distsampler.olmo_core (docs/frameworks.md, "LitGPT", "OLMo-core"): their
batches are the stream's in each framework's convention, their state continues the stream exactly
(with DataLoader workers, and on another world size for OLMo-core's data-parallel ranks), and each
setting that conflicts with the stream is refused with one line naming it. The frameworks' own
trainers killed and resumed: tests/dist/framework_kill_resume.py litgpt and framework_kill_resume.py
olmo_core. Run by ctest's pytest_llm with .venv-llm (requirements/llm.txt): a missing framework
fails here, it never skips.
"""
import random

import pytest
import torch

from distsampler.indexed import write_indexed
from distsampler.tokens import TokenStream

L, B = 16, 12


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root, rng = tmp_path_factory.mktemp("llm"), random.Random(5)
    write_indexed(str(root / "s"), [[rng.randrange(1, 255) for _ in range(rng.randrange(1, 40))]
                                    for _ in range(80)])
    write_indexed(str(root / "t"), [[rng.randrange(1, 255) for _ in range(rng.randrange(1, 9))]
                                    for _ in range(200)])
    return [(str(root / "s"), 0.6), (str(root / "t"), 0.4)]


def rows_of(stream, steps, workers=0):
    """{global sequence: its row of seq_len + 1 tokens} of this rank's first `steps` steps."""
    out = {}
    for batch in stream.loader(num_workers=workers):
        if batch["step"] >= steps:
            break
        rows = torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
        out.update(zip(batch["sequence"].tolist(), rows))
    return out


# LitGPT ----------------------------------------------------------------------------------------

def litgpt_data(sources, micro, **kwargs):
    """As LitGPT's pretrain sets it up (one process: no process group, W = 1)."""
    from distsampler.litgpt import TokenStreamData
    data = TokenStreamData(sources, global_batch_size=B, split=(0.9, 0.1, 0.0), val_steps=2,
                           **kwargs)
    data.connect(batch_size=micro, max_seq_length=L)
    data.setup()
    return data


def test_litgpt_rows_are_the_streams_rows_of_seq_len_plus_one(sources):
    data = litgpt_data(sources, micro=6, num_workers=2)
    want = rows_of(TokenStream(sources, seq_len=L, global_batch=B, micro_batch=6, rank=0,
                               world_size=1, split=(0.9, 0.1, 0.0)), 3)
    got = []
    for i, rows in enumerate(data.train_dataloader()):
        assert rows.dtype == torch.int64 and rows.shape == (6, L + 1)
        got.extend(rows)
        if i == 5:
            break
    assert all(torch.equal(a, want[k]) for k, a in enumerate(got)) and len(got) == 3 * B
    for rows in data.val_dataloader():  # the validation split's pass, in the same rows
        assert rows.shape == (6, L + 1)


def test_litgpt_loader_state_continues_the_stream_exactly(sources):
    data = litgpt_data(sources, micro=12, num_workers=2)
    loader = data.train_dataloader()
    for i, _ in enumerate(loader):
        if i == 3:
            break
    state = loader.state_dict()
    assert state["gradient_accumulation_iters"] == 1 and state["stream"]["consumed"] == 4 * B
    fresh = litgpt_data(sources, micro=12).train_dataloader()
    fresh.load_state_dict(state)
    want = rows_of(TokenStream(sources, seq_len=L, global_batch=B, rank=0, world_size=1,
                               split=(0.9, 0.1, 0.0)), 6)
    first = next(iter(fresh))
    assert all(torch.equal(first[j], want[4 * B + j]) for j in range(B))


def test_litgpt_resume_with_another_accumulation_is_refused(sources):
    # LitGPT's iter_num counts micro-batches per device: on W=1 with accumulation 2 it is 2 per
    # step; a resume with accumulation 1 would read it as 2 steps each.
    loader = litgpt_data(sources, micro=6).train_dataloader()
    state = loader.state_dict()
    assert state["gradient_accumulation_iters"] == 2
    other = litgpt_data(sources, micro=12).train_dataloader()
    before = other.stream.step
    with pytest.raises(ValueError, match="gradient_accumulation_iters is 2, this run's 1"):
        other.load_state_dict(state)
    assert other.stream.step == before


@pytest.mark.parametrize("options, match", [
    ({"packing": "bfd"}, "packing = 'bfd'; LitGPT's loop trains on every token"),
    ({"mask_cross_document": True}, "mask_cross_document.*no mask"),
    ({"eod_mask_loss": True}, "eod_mask_loss.*no mask"),
    ({"seq_len": 8}, "seq_len.*LitGPT sets it"),
])
def test_litgpt_refuses_what_its_loop_cannot_honour(sources, options, match):
    from distsampler.litgpt import TokenStreamData
    with pytest.raises(ValueError, match=match):
        TokenStreamData(sources, global_batch_size=B, options=options)


# OLMo-core -------------------------------------------------------------------------------------

def olmo_loader(sources, tmp_path, world=1, rank=0, workers=0, **kwargs):
    from distsampler.olmo_core import TokenStreamDataLoader
    stream = TokenStream(sources, seq_len=L, global_batch=B, rank=rank, world_size=world,
                         mask_cross_document=True, **kwargs)
    loader = TokenStreamDataLoader(stream, work_dir=str(tmp_path), num_workers=workers)
    loader.reshuffle(epoch=1)
    return loader


def test_olmo_batches_are_the_streams_in_olmo_cores_convention(sources, tmp_path):
    loader = olmo_loader(sources, tmp_path, workers=2)
    stream = TokenStream(sources, seq_len=L, global_batch=B, rank=0, world_size=1,
                         mask_cross_document=True)
    assert loader.global_batch_size == B * L and loader.rank_batch_size == B * L
    # OLMo-core's own TextDataLoaderBase.__iter__ checks each batch's tokens against its size
    for _, got, batch in zip(range(3), loader, stream.loader()):
        assert got.keys() == {"input_ids", "labels"}
        assert torch.equal(got["input_ids"], batch["tokens"])
        keep = batch["loss_mask"] > 0
        assert not bool(keep.all())  # mask_cross_document masks the documents' first labels
        assert torch.equal(got["labels"][keep], batch["labels"][keep])
        assert bool((got["labels"][~keep] == -100).all())
    assert loader.batches_processed == 3 and loader.tokens_processed == 3 * B * L


def test_olmo_state_continues_the_stream_on_another_world_size(sources, tmp_path):
    whole = olmo_loader(sources, tmp_path)
    want = [b["input_ids"] for _, b in zip(range(7), whole)]
    states = []
    for rank in range(2):  # 4 steps on W=2, each rank with workers
        loader = olmo_loader(sources, tmp_path, world=2, rank=rank, workers=2)
        for _ in zip(range(4), loader):
            pass
        states.append(loader.state_dict())
    assert states[0] == states[1] and states[0]["batches_processed"] == 4
    got = []
    for rank in range(3):  # continued on W=3
        loader = olmo_loader(sources, tmp_path, world=3, rank=rank)
        loader.load_state_dict(states[0])
        got.append([b["input_ids"] for _, b in zip(range(3), loader)])
        assert loader.batches_processed == 7
    for step in range(3):
        assert torch.equal(torch.cat([got[r][step] for r in range(3)]), want[4 + step])


def test_olmo_refusals(sources, tmp_path):
    from distsampler.olmo_core import TokenStreamDataLoader
    stream = TokenStream(sources, seq_len=L, global_batch=B, micro_batch=3, rank=0,
                         world_size=1)
    with pytest.raises(ValueError, match="micro_batch is 3, not global_batch / world_size"):
        TokenStreamDataLoader(stream, work_dir=str(tmp_path))
    held_out = TokenStream(sources, seq_len=L, global_batch=B, rank=0, world_size=1,
                           split=(0.9, 0.1, 0.0), subset="valid")
    with pytest.raises(ValueError, match="an evaluation stream"):
        TokenStreamDataLoader(held_out, work_dir=str(tmp_path))
    loader = olmo_loader(sources, tmp_path)
    with pytest.raises(ValueError, match=f"global_batch_size = {2 * B * L} tokens; the stream's"):
        loader.global_batch_size = 2 * B * L  # OLMo-core's batch size schedule
    assert loader.global_batch_size == B * L
    with pytest.raises(ValueError, match="no 'stream'"):
        loader.load_state_dict({"dataset_type": "fsl", "batches_processed": 8})
    assert loader.stream.step == 0 and loader.batches_processed == 0
