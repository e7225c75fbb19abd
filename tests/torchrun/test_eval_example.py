"""examples/eval_accuracy.py under torchrun with 3 processes on Fashion-MNIST's 10,000 test images
(not divisible by 3): distsampler's duplicate-free evaluation (uneven and masked) gives the
single-process accuracy exactly; PyTorch's padding sampler counts 10,002 predictions."""
import re

import pytest

from test_examples import torchrun

LINE = re.compile(r"^eval (\S+) correct=(\d+) count=(\d+) accuracy=\S+ steps=(\d+)\.\.(\d+)$",
                  re.MULTILINE)


@pytest.mark.parametrize("test_size,batch_size", [(10000, 256), (1001, 100)])
def test_duplicate_free_evaluation_gives_the_single_process_accuracy(test_size, batch_size):
    stdout = torchrun(3, "eval_accuracy.py", "--test-size", str(test_size), "--batch-size",
                      str(batch_size), "--train-size", "3000")
    results = {m.group(1): tuple(int(v) for v in m.groups()[1:]) for m in LINE.finditer(stdout)}
    assert set(results) == {"single-process", "distsampler-uneven", "distsampler-mask",
                            "torch-padded"}, stdout
    correct, count, _, _ = results["single-process"]
    assert count == test_size and 0 < correct < count
    for variant in ("distsampler-uneven", "distsampler-mask"):
        assert results[variant][:2] == (correct, count), (variant, stdout)
    # The masked mode keeps PyTorch's step count on every rank.
    per_rank = -(-test_size // 3)
    steps = -(-per_rank // batch_size)
    assert results["distsampler-mask"][2:] == (steps, steps)
    assert results["torch-padded"][2:] == (steps, steps)
    # PyTorch's sampler pads 3 * ceil(n / 3) - n samples (2 here) and counts them.
    torch_correct, torch_count, _, _ = results["torch-padded"]
    assert torch_count == 3 * per_rank != count
    assert torch_correct / torch_count != correct / count, stdout
