"""The structure-aware statistics of the quality battery (tools/quality_structure.cc) on the
peers' orders: Grain's index_shuffle (a random-access permutation, as our Feistel order is) and
MosaicML Streaming's shuffles py1e, py1br and py1s (shard-aware block shuffles: not meant to be
uniform, they keep samples of a shard near each other so that a node downloads few shards).
Each order's permutations of [0, n) for a few keys go to `quality --permutations`, which prints
the statistics for them beside the battery's reference shuffle at the same n and keys.

Run by scripts/bench.sh's peers stage from .venv-peers (requirements/peers.txt); not a test.
usage: peers_quality.py QUALITY_BINARY [--write docs/quality.md]
"""
import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (imports numpy and the standard library only)

# Once: peers.streaming_shuffle() stubs the package in sys.modules, which a second find_spec
# refuses.
streaming_shuffle = functools.lru_cache(maxsize=None)(peers.streaming_shuffle)

# (n, keys): sizes where our default order's statistics are in docs/quality.md's structure table.
PLANS = [(65537, 20), (131073, 20), (1000003, 4)]
CANONICAL_NODES = 8        # Streaming: num_canonical_nodes
GRAIN_ROUNDS = 4           # Grain's index_shuffle rounds, as its IndexSampler uses
SECTION = "## The peers' orders under the structure-aware statistics"


def grain_orders(n, keys):
    from grain.experimental import index_shuffle
    return [np.fromiter((index_shuffle(i, n - 1, key, GRAIN_ROUNDS) for i in range(n)),
                        dtype=np.uint64, count=n) for key in range(keys)]


def streaming_orders(algo, n, keys):
    shuffle = streaming_shuffle()
    full, rest = divmod(n, peers.SHARD)
    sizes = np.array([peers.SHARD] * full + ([rest] if rest else []), dtype=np.int64)
    return [np.asarray(shuffle.get_shuffle(algo, sizes, CANONICAL_NODES, key, 0),
                       dtype=np.uint64) for key in range(keys)]


def check(quality, name, orders, n):
    """quality's report on `orders`, or None with its one-line refusal when they are not
    permutations of [0, n) (grain 0.2.18's index_shuffle at n = 2^16 + 1 and 2^18 + 1)."""
    with tempfile.NamedTemporaryFile(suffix=".u64") as f:
        for order in orders:
            f.write(np.ascontiguousarray(order, dtype="<u8").tobytes())
        f.flush()
        r = subprocess.run([quality, "--permutations", f.name, str(n), name],
                           capture_output=True, text=True)
    if r.returncode == 2 and "is not a permutation" in r.stderr:
        return None, r.stderr.strip().split(": ", 1)[1]
    if r.returncode != 0:
        raise RuntimeError(f"quality --permutations {name} n={n}: {r.stderr.strip()}")
    return r.stdout, None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("quality")
    p.add_argument("--write", help="replace (or append) the section in this markdown file")
    args = p.parse_args()
    import importlib.metadata as md
    lines = [SECTION, "",
             f"`bench/peers_quality.py` (scripts/bench.sh's peers stage): grain "
             f"{md.version('grain')} `index_shuffle(i, max_index=n - 1, seed=key, "
             f"rounds={GRAIN_ROUNDS})`, mosaicml-streaming {md.version('mosaicml-streaming')} "
             f"`get_shuffle(algo, shard_sizes, num_canonical_nodes={CANONICAL_NODES}, seed=key, "
             f"epoch=0)` with shards of {peers.SHARD:,} samples; keys 0, 1, ...; each order "
             "beside the battery's reference shuffle at the same n and keys. Streaming's "
             "shuffles are shard-aware by design (a node reads few shards), so their large z is "
             "their "
             "locality, not a defect; Grain's `index_shuffle` is the random-access peer of our "
             "Feistel order (the structure table above has ours at these sizes).", ""]
    worst = []
    for n, keys in PLANS:
        orders = [("Grain index_shuffle", grain_orders(n, keys))]
        orders += [(f"Streaming {a}", streaming_orders(a, n, keys))
                   for a in ("py1e", "py1br", "py1s")]
        for name, perms in orders:
            out, refusal = check(args.quality, name, perms, n)
            if out is None:  # nothing to test; the row says so
                worst.append(f"| {name} | {n:,} | {keys} | {refusal} | - |")
                print(worst[-1], flush=True)
                continue
            print(out, flush=True)
            rows = [line for line in out.splitlines() if line.startswith("| ") and
                    not line.startswith("| order")]
            summary = re.search(r"worst \|z\|: .* ([-0-9.]+), uniform \(reference\) ([-0-9.]+)",
                                out)
            lines += [f"<details><summary>{name}, n = {n:,}, {keys} keys: worst |z| "
                      f"{summary.group(1)} (reference {summary.group(2)})</summary>", "",
                      "| order | n | keys | statistic | pooled z | worst key's z (where) |",
                      "|---|---|---|---|---|---|"] + rows + ["", "</details>", ""]
            worst.append(f"| {name} | {n:,} | {keys} | {summary.group(1)} | "
                         f"{summary.group(2)} |")
    table = ["Worst |z| over every structure-aware statistic (|z| >= 4: the order is told apart "
             "from uniform):", "", "| order | n | keys | worst |z| | reference's |",
             "|---|---|---|---|---|"] + worst + [""]
    reading = [
        "Reading it: Grain's `index_shuffle` at 4 rounds (what its `MapDataset.shuffle` and "
        "`IndexSampler` use) is a Feistel network that the XOR differentials tell apart from "
        "uniform at every size here where it is a permutation, the weakness issue 20's audit "
        "found in our version 2 at 6 rounds; our default (version 2, 8 rounds, the structure "
        "table above) stays within |z| < 4 at 131,073 and 1,000,003 with the same statistics. "
        "At n = 2^16 + 1 (and 2^18 + 1; every other n from 2 to 599 and 2^k - 1 .. 2^k + 2 for "
        "k = 10..18 is a permutation) grain 0.2.18's `index_shuffle` is not a permutation: one "
        "value never comes out and another twice, so `MapDataset.range(65537).shuffle(seed=0)` "
        "never reads record 65,536 and reads another twice (checked through Grain's own API). "
        "Streaming's shuffles keep a shard's samples together on purpose; the statistics "
        "measure that locality.", ""]
    text = "\n".join(lines[:4] + table + reading + lines[4:]) + "\n"
    print(text)
    if args.write:
        peers.replace_section(args.write, SECTION, text)


if __name__ == "__main__":
    main()
