"""distsampler.hf.TokenStreamTrainer's settings (docs/frameworks.md, "Hugging Face Trainer"):
its batches are the stream's in the Trainer's padding-free convention, and each setting that
conflicts with the stream is refused with one line naming it. The kill-and-resume run under
torchrun is tests/dist/framework_kill_resume.py hf (ctest: torchrun_hf_trainer_kill_resume_torch2).

Transformers is the torch 2 stack's (requirements/torch2.txt pins it); on Debian's stack this
file skips, saying why.
"""
import os
import random

import pytest

torch = pytest.importorskip("torch")

from stack import required  # noqa: E402

transformers = required("transformers", "DISTSAMPLER_REQUIRE_TRANSFORMERS")

from distsampler.indexed import write_indexed  # noqa: E402
from distsampler.tokens import TokenStream  # noqa: E402

L, B = 16, 8


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root, rng = tmp_path_factory.mktemp("hf"), random.Random(3)
    write_indexed(str(root / "s"), [[rng.randrange(1, 255) for _ in range(rng.randrange(1, 40))]
                                    for _ in range(60)])
    return [(str(root / "s"), 1.0)]


def trainer(sources, tmp_path, **kwargs):
    from distsampler.hf import TokenStreamTrainer
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2, max_position_embeddings=L)
    stream_args = dict(seq_len=L, global_batch=B, micro_batch=2, rank=0, world_size=1)
    stream_args.update(kwargs.pop("stream", {}))
    args = dict(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=2,
                gradient_accumulation_steps=4, use_cpu=True, report_to=[])
    args.update(kwargs)
    return TokenStreamTrainer(model=transformers.LlamaForCausalLM(config),
                              args=transformers.TrainingArguments(**args),
                              train_stream=TokenStream(sources, **stream_args))


def test_batches_are_the_streams_in_the_trainers_padding_free_convention(sources, tmp_path):
    t = trainer(sources, tmp_path)
    stream = TokenStream(sources, seq_len=L, global_batch=B, micro_batch=2, rank=0, world_size=1)
    for got, batch in zip(t.get_train_dataloader(), stream.loader()):
        assert got.keys() == {"input_ids", "position_ids", "labels", "shift_labels"}
        assert torch.equal(got["input_ids"], batch["tokens"])
        assert torch.equal(got["position_ids"], batch["position_ids"])
        keep = batch["loss_mask"] > 0
        assert torch.equal(got["shift_labels"][keep], batch["labels"][keep])
        assert bool((got["shift_labels"][~keep] == -100).all())
        break
    # The Trainer's own loss on them: a causal LM takes shift_labels as the labels, unshifted.
    out = t.train()
    assert t.state.global_step == 3 and out.training_loss > 0
    assert t.args.ignore_data_skip


def test_conflicting_settings_are_refused_with_one_line(sources, tmp_path):
    with pytest.raises(ValueError, match="set max_steps"):
        trainer(sources, tmp_path, max_steps=-1)
    with pytest.raises(ValueError, match="per_device_train_batch_size = 4, "
                       "gradient_accumulation_steps = 4 on 1 ranks; the stream's micro_batch is 2"):
        trainer(sources, tmp_path, per_device_train_batch_size=4)
    with pytest.raises(ValueError, match="global_batch 8 = micro_batch x accumulation"):
        trainer(sources, tmp_path, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="the stream has world_size 2, the Trainer 1"):
        trainer(sources, tmp_path, stream=dict(world_size=2, micro_batch=4))


def test_a_resume_from_a_checkpoint_without_the_streams_state_is_refused(sources, tmp_path):
    t = trainer(sources, tmp_path, save_steps=2)
    t.train()
    os.remove(tmp_path / "checkpoint-2" / "distsampler_stream.json")
    again = trainer(sources, tmp_path, max_steps=4, save_steps=2)
    with pytest.raises(ValueError, match="resume from .*checkpoint-2: .*checkpoint-2/"
                       "distsampler_stream.json is missing; the checkpoint was not written by "
                       "TokenStreamTrainer"):
        again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert again.train_stream.step == 0  # nothing loaded


def logged(sources, tmp_path, **kwargs):
    """A trainer, and the global sequences of the batches it takes, in order."""
    seen = []
    t = trainer(sources, tmp_path, **kwargs)
    t.batch_log = lambda batch: seen.extend(batch["sequence"].tolist())
    return t, seen


def test_a_checkpoint_moved_elsewhere_resumes_the_stream_from_there(sources, tmp_path):
    """The stream's state is read from the folder given to train(), not from output_dir: a run
    extended from its final checkpoint copied to another machine continues the stream."""
    trainer(sources, tmp_path / "run", max_steps=4, save_steps=2).train()
    moved = tmp_path / "elsewhere" / "checkpoint-4"
    os.renames(tmp_path / "run" / "checkpoint-4", moved)
    t, seen = logged(sources, tmp_path / "run", max_steps=6, save_steps=2)
    t.train(resume_from_checkpoint=str(moved))
    assert t.state.global_step == 6 and t.train_stream.step == 6
    assert seen == list(range(4 * B, 6 * B))


def test_a_save_killed_before_the_trainers_state_is_not_resumed_from(sources, tmp_path):
    """Every checkpoint holds the stream's state once it holds the Trainer's (written last):
    train(resume_from_checkpoint=True) takes the newest complete one, warning of the newer one
    a killed save left (whose trainer_state.json is missing here, as after such a kill)."""
    from distsampler.hf import complete_checkpoints
    trainer(sources, tmp_path, max_steps=4, save_steps=2).train()
    for step in (2, 4):
        assert {"distsampler_stream.json", "trainer_state.json"} <= set(
            os.listdir(tmp_path / f"checkpoint-{step}"))
    os.remove(tmp_path / "checkpoint-4" / "trainer_state.json")
    assert complete_checkpoints(str(tmp_path)) == [str(tmp_path / "checkpoint-2")]
    t, seen = logged(sources, tmp_path, max_steps=4, save_steps=2)
    with pytest.warns(UserWarning, match="checkpoint-4 .* is incomplete .* resuming from "
                      ".*checkpoint-2"):
        t.train(resume_from_checkpoint=True)
    assert t.state.global_step == 4 and seen == list(range(2 * B, 4 * B))



def test_without_a_mask_a_rows_documents_attend_to_each_other_on_sdpa():
    """What docs/frameworks.md says of the default attention: transformers' Llama on SDPA, given
    position_ids that restart at a document but no attention mask, lets the second document of
    a packed row attend to the first (its logits differ from its logits alone)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=2, max_position_embeddings=L)
    model = transformers.LlamaForCausalLM(config).eval()
    first, second = torch.randint(0, 64, (1, 5)), torch.randint(0, 64, (1, 7))
    row = torch.cat([first, second], dim=1)
    positions = torch.cat([torch.arange(5), torch.arange(7)]).unsqueeze(0)
    with torch.no_grad():
        packed = model(input_ids=row, position_ids=positions).logits[:, 5:]
        alone = model(input_ids=second, position_ids=torch.arange(7).unsqueeze(0)).logits
    assert model.config._attn_implementation == "sdpa"
    assert not torch.allclose(packed, alone, atol=1e-3)
