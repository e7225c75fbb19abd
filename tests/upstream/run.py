#!/usr/bin/env python3
"""Runs PyTorch's and torchdata's own test suites against distsampler and prints the tally of
docs/upstream-suites.md (tests / pass / fail / skipped / not applicable).

    python tests/upstream/run.py --torchdata ~/src/data --pytorch ~/src/pytorch \
        [--mode ours|samplers|both] [--suites NAME ...] [--deps DIR] [--sabotage drop-last]

--torchdata and --pytorch are checkouts the user supplies (torchdata at the installed version's
tag, e.g. v0.11.0; PyTorch's test/test_dataloader.py); their code is never copied here. Each
suite runs in its own pytest process with this folder first on PYTHONPATH, so sitecustomize.py
replaces the classes in it and in every Python process it starts; the tests' own dependencies
(expecttest, parameterized) and pytest-timeout come from the interpreter or from --deps.
A run where the hook is not in effect, or that collects no test, is an error (exit 2); a failure
not listed in not_applicable.py exits 1.
"""
import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from not_applicable import NOT_APPLICABLE  # noqa: E402

_spec = importlib.util.spec_from_file_location("upstream_hook",
                                               os.path.join(HERE, "sitecustomize.py"))
_hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hook)  # under that name it installs nothing
MODES, SABOTAGES = _hook.MODES, _hook.SABOTAGES

Suite = collections.namedtuple("Suite", "label checkout targets keyword")
_TD = "test/stateful_dataloader/"
SUITES = {
    "torchdata-sampler": Suite("torchdata test_sampler.py", "torchdata",
                               [_TD + "test_sampler.py"], None),
    "torchdata-state-dict": Suite("torchdata test_state_dict.py", "torchdata",
                                  [_TD + "test_state_dict.py"], None),
    "torchdata-state-dict-map": Suite(
        "torchdata test_state_dict.py TestStatefulDataLoaderMap_shard1", "torchdata",
        [_TD + "test_state_dict.py::TestStatefulDataLoaderMap_shard1"], None),
    "torchdata-dataloader": Suite("torchdata test_dataloader.py", "torchdata",
                                  [_TD + "test_dataloader.py"], None),
    "pytorch-distributed-sampler": Suite(
        "PyTorch test_dataloader.py, DistributedSampler tests", "pytorch",
        ["test/test_dataloader.py"],
        "test_distributed_sampler_invalid_rank or test_duplicating_data_with_drop_last"),
}
SMALL = ["torchdata-sampler", "pytorch-distributed-sampler"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torchdata", help="checkout of github.com/pytorch/data")
    parser.add_argument("--pytorch", help="checkout of github.com/pytorch/pytorch")
    parser.add_argument("--mode", choices=MODES + ("both",), default="ours",
                        help="ours: our loader and samplers; samplers: torchdata's loader, our "
                             "samplers (sitecustomize.py)")
    parser.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=SMALL,
                        help=f"default: {' '.join(SMALL)}")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with torch, torchdata and pytest (default: this one)")
    parser.add_argument("--distsampler", default=os.path.join(ROOT, "build", "python"),
                        help="folder holding the built distsampler package (default: "
                             "build/python)")
    parser.add_argument("--deps", action="append", default=[],
                        help="extra PYTHONPATH folder for the suites' own dependencies "
                             "(pip install --target DIR expecttest parameterized pytest-timeout)")
    parser.add_argument("--timeout", type=int, default=240, help="seconds a test (pytest-timeout)")
    parser.add_argument("--sabotage", choices=SABOTAGES,
                        help="break our sampler on purpose, to see the tally fail")
    parser.add_argument("--log-dir", help="where pytest's output goes (default: a temp folder)")
    return parser.parse_args(argv)


def run_suite(args, name, mode, log_dir):
    suite = SUITES[name]
    checkout = getattr(args, suite.checkout)
    if not checkout:
        sys.exit(f"run.py: suite {name} needs --{suite.checkout}")
    checkout = os.path.abspath(checkout)
    report = os.path.join(log_dir, f"{name}.{mode}.jsonl")
    log = os.path.join(log_dir, f"{name}.{mode}.log")
    env = dict(os.environ, DISTSAMPLER_UPSTREAM_MODE=mode, DISTSAMPLER_UPSTREAM_REPORT=report)
    env.pop("DISTSAMPLER_UPSTREAM_SABOTAGE", None)
    if args.sabotage:
        env["DISTSAMPLER_UPSTREAM_SABOTAGE"] = args.sabotage
    path = [HERE, os.path.abspath(args.distsampler)] + [os.path.abspath(d) for d in args.deps]
    env["PYTHONPATH"] = os.pathsep.join(path + [p for p in [os.environ.get("PYTHONPATH")] if p])
    # Their pytest.ini and conftest.py are not read: the same settings for every checkout. The
    # working folder is an empty one, so `import torchdata` is the installed one, not the
    # checkout's source tree.
    command = [args.python, "-m", "pytest", "-c", os.path.join(HERE, "pytest.ini"),
               "--rootdir", checkout, "--noconftest", "-p", "tally_plugin",
               f"--timeout={args.timeout}", "--timeout-method=signal"]
    command += [os.path.join(checkout, target) for target in suite.targets]
    if suite.keyword:
        command += ["-k", suite.keyword]
    open(report, "w").close()
    start = time.monotonic()
    with open(log, "w") as out, tempfile.TemporaryDirectory() as cwd:
        code = subprocess.run(command, env=env, cwd=cwd, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - start
    with open(report) as lines:
        records = [json.loads(line) for line in lines]
    return tally(name, mode, args.sabotage, records, code, log, seconds)


def check_stack(mode, stack, sabotage):
    """The classes the suite saw are the ones the mode promises."""
    ours = "distsampler.torch.DistributedSampler"
    expected = {"DistributedSampler": ours, "StatefulDistributedSampler": ours}
    if sabotage:
        expected = {key: "sitecustomize.DropLastIndexSampler < " + ours for key in expected}
    if mode == "ours":
        expected["StatefulDataLoader"] = "sitecustomize.StatefulDataLoader < " \
                                         "distsampler._loader.DataLoader"
    else:
        expected["StatefulDataLoader"] = "torchdata.stateful_dataloader.stateful_dataloader." \
                                         "StatefulDataLoader"
        expected["RandomSampler"] = "sitecustomize.RandomSampler"
    wrong = [f"{key}: {stack.get(key)!r}, expected {value!r}" for key, value in expected.items()
             if not str(stack.get(key, "")).startswith(value)]
    return wrong


def tally(name, mode, sabotage, records, code, log, seconds):
    stacks = [r for r in records if r["kind"] == "stack"]
    errors = []
    if not stacks:
        errors.append("the tally plugin never ran (pytest did not start?)")
    else:
        errors += check_stack(mode, stacks[0], sabotage)
    outcomes = collections.OrderedDict()  # nodeid -> passed | failed | skipped
    subtests = 0
    for record in records:
        if record["kind"] == "collect":
            outcomes[record["nodeid"] or "<collection>"] = "failed"
        elif record["kind"] == "test":
            subtests += record["subtest"]
            previous = outcomes.get(record["nodeid"], "passed")
            if record["outcome"] == "failed" or previous == "failed":
                outcomes[record["nodeid"]] = "failed"
            elif record["outcome"] == "skipped" and not record["subtest"]:
                outcomes[record["nodeid"]] = "skipped"
            else:
                outcomes[record["nodeid"]] = previous
    if not outcomes:
        errors.append("no test was collected")
    if code not in (0, 1):
        errors.append(f"pytest exited {code} (interrupted, internal or usage error)")
    row = collections.Counter()
    failed, stale = [], []
    for nodeid, outcome in outcomes.items():
        listed = NOT_APPLICABLE.get(nodeid)
        applies = listed is not None and mode in listed[0]
        row["tests"] += 1
        if outcome == "failed" and applies:
            row["not applicable"] += 1
        elif outcome == "failed":
            row["fail"] += 1
            failed.append(nodeid)
        elif outcome == "skipped":
            row["skipped"] += 1
        else:
            row["pass"] += 1
            if applies:
                stale.append(nodeid)
    return dict(name=name, mode=mode, row=row, subtests=subtests, failed=failed, stale=stale,
                errors=errors, log=log, seconds=seconds)


def main(argv=None):
    args = parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="distsampler-upstream-")
    os.makedirs(log_dir, exist_ok=True)
    modes = MODES if args.mode == "both" else (args.mode,)
    results = []
    for mode in modes:
        for name in args.suites:
            result = run_suite(args, name, mode, log_dir)
            print(f"{name} ({mode}): {result['seconds']:.0f} s, log {result['log']}",
                  file=sys.stderr, flush=True)
            results.append(result)
    columns = ("tests", "pass", "fail", "skipped", "not applicable")
    print(f"| suite | mode | {' | '.join(columns)} |")
    print("| --- | --- |" + " --- |" * len(columns))
    for r in results:
        cells = " | ".join(str(r["row"][c]) for c in columns)
        print(f"| {SUITES[r['name']].label} | {r['mode']} | {cells} |")
    status = 0
    for r in results:
        where = f"{r['name']} ({r['mode']})"
        if r["subtests"]:
            print(f"{where}: {r['subtests']} subtest reports")
        for nodeid in r["failed"]:
            print(f"{where}: FAILED {nodeid}")
            status = max(status, 1)
        for nodeid in r["stale"]:
            print(f"{where}: listed as not applicable but passed (stale entry): {nodeid}")
        for error in r["errors"]:
            print(f"{where}: ERROR {error}")
            status = 2
    if args.sabotage:
        print(f"sabotage {args.sabotage}: our sampler was broken on purpose")
    return status


if __name__ == "__main__":
    sys.exit(main())
