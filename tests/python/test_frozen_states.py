"""States of every sampler kind written before the one sampler core (tests/golden/
frozen_states.json, written by tests/golden/regenerate_states.py with commit f7a9ca4's package)
load into today's samplers and resume bit for bit, on the world size that wrote them and on
another."""
import json
import os

import pytest

from regenerate_states import build, plain  # tests/golden (conftest.py puts it on sys.path)

GOLDEN = os.environ.get("DISTSAMPLER_GOLDEN_DIR",
                        os.path.join(os.path.dirname(__file__), "..", "golden"))
with open(os.path.join(GOLDEN, "frozen_states.json")) as f:
    FROZEN = json.load(f)


def test_every_kind_is_frozen():
    kinds = {case["class"].rsplit(".", 1)[1] for case in FROZEN["cases"]}
    assert kinds == {"DistributedSampler", "DistributedEvalSampler", "WeightedDistributedSampler",
                     "BlendedDistributedSampler", "ShardedDistributedSampler",
                     "DistributedSamplerWrapper", "DistributedBatchSampler",
                     "BucketedBatchSampler", "DistributedIterableDataset"}


@pytest.mark.parametrize("case", FROZEN["cases"], ids=[c["name"] for c in FROZEN["cases"]])
@pytest.mark.parametrize("world", ["2", "3"])
def test_a_frozen_state_resumes_bit_for_bit(case, world):
    expected = case["rest"][world]
    assert sum(map(len, expected)) > 0
    for rank, rest in enumerate(expected):
        sampler = build(case["class"], case["dataset"], case["kwargs"], int(world), rank)
        sampler.load_state_dict(case["state"])
        sampler.set_epoch(case["epoch"])
        assert [plain(item) for item in sampler] == rest
        # and today's state of the resumed sampler is the frozen one, re-read
        again = build(case["class"], case["dataset"], case["kwargs"], int(world), rank)
        again.load_state_dict(sampler.state_dict())


@pytest.mark.parametrize("case", FROZEN["cases"], ids=[c["name"] for c in FROZEN["cases"]])
def test_a_frozen_state_with_an_edited_entry_is_refused(case):
    state = dict(case["state"])
    state["consumed"] += 1
    sampler = build(case["class"], case["dataset"], case["kwargs"], 2, 0)
    with pytest.raises(ValueError, match="checksum|disagrees"):
        sampler.load_state_dict(state)
