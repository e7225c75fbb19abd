"""`quality --permutations FILE N NAME`: the structure-aware statistics on permutations written by
another program (bench/peers_quality.py feeds it Grain's and Streaming's orders). Seeded numpy
permutations pass (worst |z| < 4), an affine map x -> a x + k mod n is told apart, and a file
that is not whole permutations of [0, n) is refused (exit 2) naming the key and position.

usage: quality_permutations_test.py QUALITY_BINARY
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

N, KEYS = 4099, 3


def run(quality, perms, n=N, name="order"):
    with tempfile.NamedTemporaryFile(suffix=".u64", delete=False) as f:
        for p in perms:
            f.write(np.asarray(p, dtype="<u8").tobytes())
    try:
        return subprocess.run([quality, "--permutations", f.name, str(n), name],
                              capture_output=True, text=True)
    finally:
        os.unlink(f.name)


def worst(result):
    m = re.search(r"worst \|z\|: \S+ ([0-9.]+), uniform \(reference\) ([0-9.]+)", result.stdout)
    assert result.returncode == 0 and m, result.stdout + result.stderr
    return float(m.group(1)), float(m.group(2))


def main():
    quality = sys.argv[1]
    rng = np.random.default_rng(20261202)
    uniform = worst(run(quality, [rng.permutation(N) for _ in range(KEYS)]))
    assert uniform[0] < 4 and uniform[1] < 4, uniform
    affine = worst(run(quality, [(np.arange(N) * 1234567 + k) % N for k in range(KEYS)]))
    assert affine[0] > 100 and affine[1] < 4, affine
    duplicate = np.arange(N)
    duplicate[5] = 6
    r = run(quality, [duplicate])
    assert r.returncode == 2 and "key 0 is not a permutation of [0, 4099): value 6 at position 6" \
        in r.stderr, r.stderr
    r = run(quality, [np.arange(N)], n=N - 1)
    assert r.returncode == 2 and "expected a positive multiple of n = 4098" in r.stderr, r.stderr
    print(f"quality --permutations: numpy worst |z| {uniform[0]}, affine {affine[0]}; bad files "
          "refused")


if __name__ == "__main__":
    main()
