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


def litgpt_fit(loader, max_iters, save_every=None, cycle=False):
    """LitGPT's pretrain fit() loop (litgpt/pretrain.py) over `loader`: its CycleIterator, each
    micro-batch pulled before the `iter_num >= max_iters` check, the iterator dropped when fit
    returns; the loader's state_dict at each periodic save (a step's last micro-batch, every
    `save_every` steps) and the final one, taken after fit, as main() saves final/. `cycle`:
    fit's frame (and so its iterator) left in a reference cycle, as the traceback jsonargparse
    keeps while LitGPT saves its hyperparameters leaves it in LitGPT."""
    import sys
    from litgpt.utils import CycleIterator

    def fit():
        saves, iter_num = [], 0
        if cycle:
            held = [sys._getframe()]
            held.append(held)
        train_iterator = CycleIterator(loader)  # a local of fit's, as LitGPT's
        for _ in train_iterator:
            if iter_num >= max_iters:
                break
            iter_num += 1
            if save_every and iter_num % (save_every * loader.accumulation) == 0:
                saves.append(loader.state_dict())
        return saves
    saves = fit()
    return saves, loader.state_dict()


@pytest.mark.parametrize("micro, workers, cycle", [(12, 2, False), (12, 0, True), (6, 0, False),
                                                   (6, 2, True), (4, 2, False)])
def test_litgpt_every_checkpoint_holds_the_steps_trained(sources, micro, workers, cycle):
    """Periodic and final checkpoints, with and without gradient accumulation: the stream
    position of the steps LitGPT trained, although its loop pulls one more micro-batch before it
    stops (that batch goes back to the stream); the final state extends the run exactly."""
    accumulation, steps = B // micro, 6
    loader = litgpt_data(sources, micro=micro, num_workers=workers).train_dataloader()
    saves, final = litgpt_fit(loader, steps * accumulation, save_every=2, cycle=cycle)
    assert [s["stream"]["consumed"] for s in saves] == [2 * B, 4 * B, 6 * B]
    assert final["stream"]["consumed"] == steps * B
    assert final["gradient_accumulation_iters"] == accumulation
    fresh = litgpt_data(sources, micro=micro).train_dataloader()
    fresh.load_state_dict(final)
    want = rows_of(TokenStream(sources, seq_len=L, global_batch=B, rank=0, world_size=1,
                               split=(0.9, 0.1, 0.0)), steps + 1)
    first = next(iter(fresh))
    assert all(torch.equal(first[j], want[steps * B + j]) for j in range(micro))


@pytest.mark.parametrize("micro", [12, 6])
def test_litgpt_pretrains_to_a_final_checkpoint_at_its_last_step(sources, micro, tmp_path):
    """The real `litgpt pretrain` (tests/dist/framework_kill_resume.py litgpt kills and resumes
    it; this is the quick check of its final save): final/lit_model.pth holds the stream at the
    steps trained, with and without gradient accumulation."""
    import os
    import subprocess
    import sys
    import yaml
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "examples", "litgpt", "tiny_llama.yaml")) as f:
        config = yaml.safe_load(f)
    config["data"]["init_args"].update(sources=[[[p], w] for p, w in sources],
                                       global_batch_size=B, num_workers=0)
    config["model_config"]["block_size"] = L
    config["train"].update(global_batch_size=B, micro_batch_size=micro, max_tokens=4 * B * L,
                           save_interval=2)
    config["eval"]["interval"] = 100
    with open(tmp_path / "config.yaml", "w") as f:
        yaml.safe_dump(config, f)
    litgpt = os.path.join(os.path.dirname(sys.executable), "litgpt")
    r = subprocess.run([litgpt, "pretrain", "--config", str(tmp_path / "config.yaml"),
                        "--out_dir", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for folder, steps in (("step-00000002", 2), ("step-00000004", 4), ("final", 4)):
        state = torch.load(tmp_path / "out" / folder / "lit_model.pth", weights_only=False)
        assert state["step_count"] == steps and state["iter_num"] == steps * B // micro
        assert state["train_dataloader"]["stream"]["consumed"] == steps * B, folder


def test_litgpt_a_loader_state_without_the_stream_is_one_error(sources):
    loader = litgpt_data(sources, micro=12).train_dataloader()
    with pytest.raises(ValueError, match=r"StreamLoader: the checkpoint's train_dataloader "
                       r"state has no 'stream' \(written by another data loader: "
                       r"\['current_epoch', 'num_samples_yielded'\]\); it would restart"):
        loader.load_state_dict({"num_samples_yielded": 40, "current_epoch": 1})
    assert loader.stream.step == 0


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
