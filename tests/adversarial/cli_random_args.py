#!/usr/bin/env python3
"""Random argument lists for the distsampler CLI, meant for its AddressSanitizer + UBSan build
(scripts/sanitize.sh). Deterministic: a fixed seed gives the same lists on every run. The lists mix
valid flags and values with bad ones (empty, negative, fractional, huge, non-ASCII), duplicates,
unknown flags, stray words and --flag=value forms; sizes stay small, or huge only where the work
stays O(1) (--order feistel with a small --count), so each run is fast.

For every list: no sanitizer report, no signal, exit status 0, 1 or 2, and status 2 means exactly
one line on stderr (the bare usage text excepted, printed when no argument is given at all).

Usage: cli_random_args.py BINARY [--cases N] [--seed S] [--jobs J]
"""
import argparse
import concurrent.futures
import os
import random
import subprocess
import sys

SMALL = ["0", "1", "2", "3", "7", "16", "100", "257"]
BAD = ["", "-1", "-0", "abc", "1.5", "1e3", "0x10", "+1", " 1", "1 ", "\u0661", "1\n2",
       "18446744073709551616", "99999999999999999999999999999", "--", "=", "-", "\t"]
HUGE = ["9223372036854775807", "9223372036854775808", "9223372036854775809",
        "18446744073709551615", "4611686018427387904"]
SEEDS = SMALL + BAD + HUGE + ["-9223372036854775808", "-9223372036854775809", "-5"]
UNKNOWN = ["--bogus", "--shuffle", "--Size", "--size-", "-s", "--", "---size", "--rank=",
           "--=1", "--help=1"]


def value(rng, valid, huge_ok=False):
    r = rng.random()
    if r < 0.75:
        return rng.choice(valid)
    if r < 0.95 or not huge_ok:
        return rng.choice(BAD + (HUGE if huge_ok else []))
    return rng.choice(HUGE)


def order_flags(rng, huge_size):
    """--size and the flags parse_order_flags takes, as (flag, value-or-None) pairs."""
    flags = [("--size", rng.choice(HUGE) if huge_size else value(rng, SMALL))]
    if rng.random() < 0.4:
        flags.append(("--seed", rng.choice(SEEDS)))
    if huge_size:
        flags.append(("--order", "feistel"))
    elif rng.random() < 0.5:
        flags.append(("--order", value(rng, ["torch", "feistel", "random", "Torch"])))
    if rng.random() < 0.2:
        flags.append(("--randperm", value(rng, ["current", "classic", "new"])))
    for switch in ("--no-shuffle", "--drop-last"):
        if rng.random() < 0.2:
            flags.append((switch, None))
    return flags


def indices_flags(rng):
    huge = rng.random() < 0.2
    flags = order_flags(rng, huge)
    flags += [("--world-size", value(rng, ["1", "2", "3", "8"], huge_ok=True)),
              ("--rank", value(rng, ["0", "1", "2"], huge_ok=True))]
    optional = [("--epoch", lambda: value(rng, SMALL, huge_ok=True)),
                ("--consumed", lambda: value(rng, SMALL, huge_ok=True)),
                ("--start", lambda: value(rng, ["0", "1", "5"], huge_ok=True)),
                ("--format", lambda: value(rng, ["text", "binary", "csv"])),
                ("--uneven", None), ("--mask", None)]
    for name, make in optional:
        if rng.random() < 0.25:
            flags.append((name, make() if make else None))
    # A huge size prints only a few indices: O(1) work whatever the size.
    if huge or rng.random() < 0.3:
        flags.append(("--count", rng.choice(["0", "1", "5", "17"]) if huge else
                      value(rng, ["0", "1", "5"], huge_ok=True)))
    return flags


def audit_flags(rng):
    flags = order_flags(rng, False)
    flags.append(("--world-size", value(rng, ["1", "2", "3", "64", "65536", "65537"])))
    if rng.random() < 0.4:
        flags.append(("--epochs", value(rng, ["1", "2", "3", "1000", "1001"])))
    if rng.random() < 0.4:
        flags.append(("--consumed", value(rng, SMALL, huge_ok=True)))
        if rng.random() < 0.9:
            flags.append(("--resume-world-size", value(rng, ["1", "2", "5", "65537"])))
    if rng.random() < 0.2:
        flags.append(("--cut-epoch", value(rng, ["0", "1", "2"], huge_ok=True)))
    if rng.random() < 0.2:
        flags.append(("--break", value(rng, ["overlap", "gap", "both"])))
    return flags


def demo_flags(rng):
    return [("--order", value(rng, ["torch", "feistel"]))] if rng.random() < 0.5 else []


def render(rng, flags):
    """The (flag, value) pairs as argv, shuffled, with --flag=value forms, duplicates, unknown
    flags, stray words and missing values mixed in."""
    rng.shuffle(flags)
    if flags and rng.random() < 0.1:
        flags.append(rng.choice(flags))  # a duplicate
    if rng.random() < 0.1:
        flags.insert(rng.randrange(len(flags) + 1), (rng.choice(UNKNOWN), rng.choice(SMALL)))
    argv = []
    for name, val in flags:
        r = rng.random()
        if val is None:
            argv += [name + "=" + rng.choice(["", "1", "yes"])] if r < 0.05 else [name]
        elif r < 0.2:
            argv.append(name + "=" + val)
        elif r < 0.23:
            argv.append(name)  # the value left out
        else:
            argv += [name, val]
    if rng.random() < 0.05:
        argv.insert(rng.randrange(len(argv) + 1), rng.choice(["stray", "", "-h", "--help"]))
    return argv


def make_case(rng):
    r = rng.random()
    if r < 0.55:
        return ["indices"] + render(rng, indices_flags(rng))
    if r < 0.85:
        return ["audit"] + render(rng, audit_flags(rng))
    if r < 0.92:
        return ["demo"] + render(rng, demo_flags(rng))
    return [rng.choice(["--version", "help", "--help", "-h", "frobnicate", "", "indices"])] + (
        [rng.choice(SMALL + UNKNOWN)] if rng.random() < 0.5 else [])


def run_case(binary, args, env):
    """(exit status, None) when the run is as documented, else (exit status, the reason)."""
    try:
        p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "timed out after 60 s"
    return p.returncode, check(args, p)


def check(args, p):
    err = p.stderr.decode("utf-8", "replace")
    if "Sanitizer" in err or "runtime error:" in err:
        return f"sanitizer report (exit {p.returncode}):\n{err}"
    if p.returncode < 0:
        return f"killed by signal {-p.returncode}; stderr:\n{err}"
    if p.returncode not in (0, 1, 2):
        return f"exit {p.returncode} (allowed 0, 1, 2); stderr:\n{err}"
    if p.returncode == 2 and args and (err.count("\n") != 1 or not err.endswith("\n")):
        return f"exit 2 with {err.count(chr(10))} lines on stderr (one expected):\n{err}"
    if p.returncode == 2 and p.stdout:
        return f"exit 2 with {len(p.stdout)} bytes on stdout (none expected)"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--cases", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    cases = [make_case(rng) for _ in range(opts.cases)]
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    with concurrent.futures.ThreadPoolExecutor(opts.jobs) as pool:
        results = list(pool.map(lambda a: run_case(opts.binary, a, env), cases))
    failures = [(a, r) for a, (_, r) in zip(cases, results) if r is not None]
    for args, reason in failures[:20]:
        print(f"FAIL distsampler {' '.join(repr(a) for a in args)}: {reason}")
    codes = {}
    for code, _ in results:
        codes[code] = codes.get(code, 0) + 1
    print(f"cli_random_args: {len(cases)} argument lists (seed {opts.seed}), "
          f"{len(failures)} failures; exit statuses: "
          + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items(), key=str)))
    # Both outcomes are reached: the lists are neither all refused nor all accepted.
    if codes.get(0, 0) < opts.cases // 20 or codes.get(2, 0) < opts.cases // 4:
        print("FAIL the lists are too one-sided: fewer than 5% accepted or 25% refused")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
