"""The structure-aware statistics of the quality battery (quality/feistel_structure.cc) on the
peers' orders: Grain's index_shuffle (a random-access permutation, as our Feistel order is) and
MosaicML Streaming's shuffles py1e, py1br and py1s (shard-aware block shuffles: not meant to be
uniform, they keep samples of a shard near each other so that a node downloads few shards).
Each order's permutations of [0, n) for a few keys go to `quality --permutations`, which prints
the statistics for them beside the battery's reference shuffle at the same n and keys; so do ours
(the Feistel order at its default rounds, from build/python) for the comparison. Then whether
Grain's index_shuffle is a permutation at every size of SMALL_SCAN and POWER_SCAN for SCAN_KEYS
keys, and, at each size where it is not, what Grain's own MapDataset.range(n).shuffle(seed=0) reads.

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

# (n, keys): the sizes and key counts of the statistics, for every order (ours included).
PLANS = [(65537, 20), (131073, 20), (1000003, 4)]
CANONICAL_NODES = 8        # Streaming: num_canonical_nodes
GRAIN_ROUNDS = 4           # Grain's index_shuffle rounds, as its IndexSampler uses
# Sizes where index_shuffle is checked to be a permutation: every small n, and around each power
# of two of the plans' range (the Feistel network's width changes there).
SMALL_SCAN = (2, 599)
POWER_SCAN = (10, 18)      # n = 2^k - 1 .. 2^k + 2 for these k
SCAN_KEYS = 4
SECTION = "## The peers' orders under the structure-aware statistics"


def grain_orders(n, keys):
    from grain.experimental import index_shuffle
    return [np.fromiter((index_shuffle(i, n - 1, key, GRAIN_ROUNDS) for i in range(n)),
                        dtype=np.uint64, count=n) for key in range(keys)]


def ours_orders(n, keys):
    """Our Feistel order at its default rounds, one replica, seeds 0, 1, ... (epoch 0): what
    `DistributedSampler(order="feistel", seed=key, num_replicas=1).indices(0)` reads."""
    from distsampler import _core
    orders = []
    for key in range(keys):
        view = _core.DistributedSampler(n, 1, 0, key, True, False, "feistel",
                                        _core.RandpermVariant.current).epoch(0, 0)
        out = np.empty(n, dtype=np.uint64)
        view.fill(0, out)
        orders.append(out)
    return orders


def scan_sizes():
    small = range(SMALL_SCAN[0], SMALL_SCAN[1] + 1)
    around = [2**k + d for k in range(POWER_SCAN[0], POWER_SCAN[1] + 1) for d in (-1, 0, 1, 2)]
    return sorted(set(small) | set(around))


def grain_defects(n, keys):
    """{key: (values never output, values output more than once)} for each of `keys` keys at
    which index_shuffle over [0, n) is not a permutation."""
    from grain.experimental import index_shuffle
    defects = {}
    for key in range(keys):
        out = np.fromiter((index_shuffle(i, n - 1, key, GRAIN_ROUNDS) for i in range(n)),
                          dtype=np.int64, count=n)
        counts = np.bincount(out, minlength=n)
        if len(counts) > n or (counts[:n] != 1).any():
            defects[key] = (np.flatnonzero(counts[:n] == 0).tolist(),
                            np.flatnonzero(counts > 1).tolist())
    return defects


def grain_dataset_reads(n):
    """(records never read, records read more than once) by Grain's own
    MapDataset.range(n).shuffle(seed=0), read in full."""
    import grain
    dataset = grain.MapDataset.range(n).shuffle(seed=0)
    counts = np.bincount(np.fromiter((dataset[i] for i in range(n)), dtype=np.int64, count=n),
                         minlength=n)
    return np.flatnonzero(counts == 0).tolist(), np.flatnonzero(counts > 1).tolist()


def size_name(n):
    """65,537 (2^16 + 1) near a power of two, else 65,537."""
    k = round(np.log2(n))
    d = n - 2**k
    if k >= 4 and abs(d) <= 2:
        return f"{n:,} (2^{k} {'+' if d >= 0 else '-'} {abs(d)})"
    return f"{n:,}"


def plural(values, one, many):
    """'record 7' or '3 records (1, 5, 9)'."""
    if len(values) == 1:
        return f"{one} {values[0]:,}"
    shown = ", ".join(f"{v:,}" for v in values[:8]) + (", ..." if len(values) > 8 else "")
    return f"{len(values)} {many} ({shown})"


def grain_finding():
    """The sentence on index_shuffle's permutation-ness, from the scan and Grain's own API."""
    sizes = scan_sizes()
    failing = {}
    for n in sizes:
        defects = grain_defects(n, SCAN_KEYS)
        if defects:
            failing[n] = defects
            print(f"grain index_shuffle n={n}: not a permutation for keys {sorted(defects)}",
                  flush=True)
    scanned = (f"every n from {SMALL_SCAN[0]} to {SMALL_SCAN[1]} and 2^k - 1 .. 2^k + 2 for k = "
               f"{POWER_SCAN[0]}..{POWER_SCAN[1]} ({len(sizes)} sizes), keys 0..{SCAN_KEYS - 1}")
    if not failing:
        return (f"grain {grain_version()}'s `index_shuffle` is a permutation at {scanned}.")
    parts = []
    for n, defects in failing.items():
        keys = sorted(defects)
        shapes = {(len(m), len(d)) for m, d in defects.values()}
        which = ("for every key checked" if len(keys) == SCAN_KEYS
                 else f"for keys {', '.join(map(str, keys))}")
        if shapes == {(1, 1)}:
            what = "one value never comes out and another twice"
        else:
            what = "; ".join(f"key {k}: {len(m)} values never come out, {len(d)} more than once"
                             for k, (m, d) in defects.items())
        missing, repeated = grain_dataset_reads(n)
        api = (f"`MapDataset.range({n}).shuffle(seed=0)` never reads "
               f"{plural(missing, 'record', 'records')} and reads "
               f"{plural(repeated, 'record', 'records')} more than once"
               if missing or repeated else
               f"`MapDataset.range({n}).shuffle(seed=0)` reads every record once")
        parts.append(f"at n = {size_name(n)} {which}, {what} ({api})")
    return (f"Of {scanned}, grain {grain_version()}'s `index_shuffle` is not a permutation only "
            f"{'; '.join(parts)}; at every other size scanned it is.")


def grain_version():
    import importlib.metadata as md
    return md.version("grain")


def streaming_orders(algo, n, keys):
    shuffle = streaming_shuffle()
    full, rest = divmod(n, peers.SHARD)
    sizes = np.array([peers.SHARD] * full + ([rest] if rest else []), dtype=np.int64)
    return [np.asarray(shuffle.get_shuffle(algo, sizes, CANONICAL_NODES, key, 0),
                       dtype=np.uint64) for key in range(keys)]


def check(quality, name, orders, n):
    """quality's report on `orders`, or None with its one-line refusal when they are not
    permutations of [0, n) (Grain's index_shuffle at some sizes: grain_finding)."""
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


def worst_row(rows):
    """(|z|, statistic) of the largest |z| among `rows`, pooled or the worst key's."""
    best = (0.0, "")
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for cell in cells[4:6]:
            if cell != "-":
                best = max(best, (abs(float(cell.split()[0])), cells[3]))
    return best


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
             f"epoch=0)` with shards of {peers.SHARD:,} samples, and ours "
             "(`DistributedSampler(order=\"feistel\", seed=key, num_replicas=1)`, version 2 at its "
             "default rounds, epoch 0); keys 0, 1, ...; each order "
             "beside the battery's reference shuffle at the same n and keys. Streaming's "
             "shuffles are shard-aware by design (a node reads few shards), so their large z is "
             "their "
             "locality, not a defect; Grain's `index_shuffle` is the random-access peer of our "
             "Feistel order.", ""]
    worst = []
    results = {}  # (name, n) -> (worst |z|, its statistic, reference's worst) or refusal
    for n, keys in PLANS:
        orders = [("Grain index_shuffle", grain_orders(n, keys))]
        orders += [(f"Streaming {a}", streaming_orders(a, n, keys))
                   for a in ("py1e", "py1br", "py1s")]
        orders += [("ours (feistel v2)", ours_orders(n, keys))]
        for name, perms in orders:
            out, refusal = check(args.quality, name, perms, n)
            if out is None:  # nothing to test; the row says so
                results[name, n] = refusal
                worst.append(f"| {name} | {n:,} | {keys} | {refusal} | - |")
                print(worst[-1], flush=True)
                continue
            print(out, flush=True)
            rows = [line for line in out.splitlines() if line.startswith("| ") and
                    not line.startswith("| order")]
            summary = re.search(r"worst \|z\|: .* ([-0-9.]+), uniform \(reference\) ([-0-9.]+)",
                                out)
            z, statistic = worst_row([r for r in rows if not r.startswith("| uniform")])
            results[name, n] = (float(summary.group(1)), statistic, float(summary.group(2)))
            lines += [f"<details><summary>{name}, n = {n:,}, {keys} keys: worst |z| "
                      f"{summary.group(1)} (reference {summary.group(2)})</summary>", "",
                      "| order | n | keys | statistic | pooled z | worst key's z (where) |",
                      "|---|---|---|---|---|---|"] + rows + ["", "</details>", ""]
            worst.append(f"| {name} | {n:,} | {keys} | {summary.group(1)} | "
                         f"{summary.group(2)} |")
    table = ["Worst |z| over every structure-aware statistic (|z| >= 4: the order is told apart "
             "from uniform):", "", "| order | n | keys | worst |z| | reference's |",
             "|---|---|---|---|---|"] + worst + [""]
    reading = ["Reading it (every figure from this run): " + " ".join(
        [grain_reading(results), ours_reading(results), grain_finding(),
         streaming_reading(results)]), ""]
    text = "\n".join(lines[:4] + table + reading + lines[4:]) + "\n"
    print(text)
    if args.write:
        peers.replace_section(args.write, SECTION, text)


def told_apart(results, name):
    """(sizes where the order is a permutation and worst |z| >= 4, those where < 4, refused)."""
    apart, within, refused = [], [], []
    for n, _ in PLANS:
        r = results[name, n]
        (refused if isinstance(r, str) else apart if r[0] >= 4 else within).append(n)
    return apart, within, refused


def sizes_text(sizes):
    """'65,537; 131,073 and 1,000,003' (commas are the thousands')."""
    names = [f"{n:,}" for n in sizes]
    return "; ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def grain_reading(results):
    apart, within, refused = told_apart(results, "Grain index_shuffle")
    text = (f"Grain's `index_shuffle` at {GRAIN_ROUNDS} rounds (what its `MapDataset.shuffle` and "
            "`IndexSampler` use)")
    if apart:
        z, statistic, _ = max(results["Grain index_shuffle", n] for n in apart)
        text += (f" is told apart from uniform at n = {sizes_text(apart)} (worst z {z:,.2f}, on "
                 f"\"{statistic}\")")
    if within:
        text += (", not at " if apart else " stays within |z| < 4 at n = ") + sizes_text(within)
    if refused:
        text += f"; at n = {sizes_text(refused)} it is not a permutation, so nothing was measured"
    return text + "."


def ours_reading(results):
    apart, within, _ = told_apart(results, "ours (feistel v2)")
    text = f"Ours at its default rounds stays within |z| < 4 at n = {sizes_text(within)}"
    if within:
        text += (" (worst |z| " + "; ".join(f"{results['ours (feistel v2)', n][0]:.2f}"
                                            for n in within) + ")")
    if apart:
        text += f" and is told apart at {sizes_text(apart)}"
    return text + " with the same statistics and keys."


def streaming_reading(results):
    apart = {a: told_apart(results, f"Streaming {a}")[0] for a in ("py1e", "py1br", "py1s")}
    every = all(len(sizes) == len(PLANS) for sizes in apart.values())
    return ("Streaming's shuffles keep a shard's samples together on purpose; the statistics "
            "measure that locality" + (" at every size here." if every else
                                       ": " + "; ".join(f"{a} at {sizes_text(s)}"
                                                        for a, s in apart.items()) + "."))


if __name__ == "__main__":
    main()
