"""distsampler.torch without numpy (issue 28): torch 2 imports and runs without it, and so must the
drop-in. A subprocess in which numpy cannot be imported (a sys.meta_path finder refuses it before
any import) imports torch, then distsampler.torch, and checks the sampler against PyTorch's:
indices over a grid and several epochs, set_epoch, a mid-epoch state_dict round trip, the loader,
and indices() failing with a message that says `pip install numpy`. numpy is never imported
there. The feistel order's indices (read one at a time without numpy) are compared here with the
ones read through numpy."""
import json
import os
import subprocess
import sys

from conftest import PYTHON_DIR
from distsampler.torch import DistributedSampler

BLOCK_NUMPY = r'''
import sys


class _NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, _NoNumpy())
'''

PROBE = BLOCK_NUMPY + r'''
import json
import warnings

warnings.simplefilter("ignore")  # torch warns "Failed to initialize NumPy"
try:
    import numpy
    raise SystemExit("numpy was imported despite the blocker")
except ModuleNotFoundError:
    pass
import torch
import torch.utils.data
print("torch", torch.__version__, "imports without numpy", flush=True)

import distsampler.torch as ds
from distsampler.data import DataLoader

checked = 0
for size in (0, 1, 7, 100, 1001):
    for world in (1, 3, 4):
        for rank in range(world):
            for shuffle in (True, False):
                for drop_last in (False, True):
                    ours = ds.DistributedSampler(range(size), world, rank, shuffle, 7, drop_last)
                    theirs = torch.utils.data.DistributedSampler(range(size), world, rank,
                                                                 shuffle, 7, drop_last)
                    for epoch in (0, 1, 5):
                        ours.set_epoch(epoch)
                        theirs.set_epoch(epoch)
                        assert list(ours) == list(theirs), (size, world, rank, shuffle,
                                                            drop_last, epoch)
                        checked += 1

# A mid-epoch checkpoint resumes where it stood, on the same and on another world size.
sampler = ds.DistributedSampler(range(1000), num_replicas=2, rank=1, seed=3)
sampler.set_epoch(4)
reference = torch.utils.data.DistributedSampler(range(1000), num_replicas=2, rank=1, seed=3)
reference.set_epoch(4)
expected = list(reference)
iterator = iter(sampler)
head = [next(iterator) for _ in range(100)]
state = sampler.state_dict()
json.dumps(state)
resumed = ds.DistributedSampler(range(1000), num_replicas=2, rank=1, seed=3)
resumed.load_state_dict(state)
assert head + list(resumed) == expected
assert resumed.state_dict()["consumed"] == 1000
other = ds.DistributedSampler(range(1000), num_replicas=4, rank=0, seed=3)
other.load_state_dict(state)
assert len(list(other)) == (1000 - 200) // 4

loader = DataLoader(range(40), batch_size=4, sampler=ds.DistributedSampler(range(40), 2, 0))
batches = [batch.tolist() for batch in loader]
assert sum(batches, []) == list(torch.utils.data.DistributedSampler(range(40), 2, 0))

try:
    sampler.indices(0)
    raise SystemExit("indices() worked without numpy")
except ModuleNotFoundError as error:
    assert "pip install numpy" in str(error), error

feistel = ds.DistributedSampler(range(5000), num_replicas=3, rank=2, seed=11, order="feistel")
feistel.set_epoch(2)
assert "numpy" not in sys.modules, "numpy was imported"
print(json.dumps({"checked": checked, "feistel": list(feistel)}))
'''


def test_distsampler_torch_runs_without_numpy():
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    print(lines[0])
    result = json.loads(lines[-1])
    assert result["checked"] == 5 * 8 * 4 * 3  # sizes x (world, rank) pairs x flags x epochs
    feistel = DistributedSampler(range(5000), num_replicas=3, rank=2, seed=11, order="feistel")
    feistel.set_epoch(2)
    assert result["feistel"] == list(feistel) == feistel.indices(2).tolist()
