"""A source of 10,000 shards (docs/tokens.md, "Sources"): its stream reads, through the DataLoader
with workers, under the default limit of 1,024 open files, the same batches as without a limit,
and the process holds at most 64 descriptors for its .idx files (each .bin's is closed once
mapped). Before the .idx descriptors were pooled, a source of 1,100 shards failed: "cannot open:
Too many open files".
"""
import hashlib
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from distsampler.indexed import write_indexed  # noqa: E402
from distsampler.tokens import TokenStream  # noqa: E402

SHARDS = 10_000
READ = r"""
import hashlib, json, os, resource, sys
sys.path[:0] = json.loads(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
from distsampler.tokens import TokenStream
with open(sys.argv[2]) as f:
    shards = json.load(f)
stream = TokenStream([(shards, 1.0)], seq_len=16, global_batch=8, rank=0, world_size=1)
h, held = hashlib.sha256(), 0
for batch in stream.loader(num_workers=2):
    if batch["step"] == 40:
        break
    h.update(batch["tokens"].numpy().tobytes())
    held = max(held, len(os.listdir("/proc/self/fd")))
print(json.dumps({"sha256": h.hexdigest(), "descriptors": held,
                  "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    prefixes = []
    for i in range(SHARDS):
        prefix = str(root / f"part_{i:05d}")
        write_indexed(prefix, [[1 + i % 1000] * (1 + i % 7), [2 + i % 999] * (i % 5)],
                      dtype="uint16")
        prefixes.append(prefix)
    return prefixes


def digest(stream, steps):
    h = hashlib.sha256()
    for batch in stream.loader():
        if batch["step"] == steps:
            break
        h.update(batch["tokens"].numpy().tobytes())
    return h.hexdigest()


def test_ten_thousand_shards_read_under_the_default_open_file_limit(shards, tmp_path):
    want = digest(TokenStream([(shards, 1.0)], seq_len=16, global_batch=8, rank=0,
                              world_size=1), 40)
    listed = tmp_path / "shards.json"
    listed.write_text(json.dumps(shards))
    r = subprocess.run([sys.executable, "-c", READ, json.dumps(sys.path), str(listed)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["limit"] <= 1024
    assert got["sha256"] == want
    # the interpreter's and torch's own descriptors, and at most 64 for the .idx files
    assert got["descriptors"] < 200, got
