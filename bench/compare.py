#!/usr/bin/python3
"""Runs distsampler and PyTorch side by side and prints (or writes) the tables of
docs/benchmarks.md. Run through `bash scripts/bench.sh`, or directly with Debian's interpreter:

    /usr/bin/python3 bench/compare.py --build build [--torch2-python .venv/bin/python]
        [--write docs/benchmarks.md] [--full]

The last section runs the loader benchmark (bench/loader/loader_compare.py) when
build/bin/loader_throughput exists (scripts/bench.sh builds it).

Every workload runs in a fresh subprocess that times itself; its peak resident memory comes from
os.wait4. PyTorch runs from Debian's python3-torch, libtorch from libtorch-dev.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

W = 8
MEMORY_CAP_BYTES = 16 * 2**30  # nothing that could exceed this is started

# The end of every Python workload below: given `indices` and `seconds`, prints the JSON report
# (the peak is read before the digest's temporary arrays exist).
REPORT = r"""
peak_kb = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1))
a = np.asarray(indices, dtype=np.uint64)
weights = (np.arange(len(a), dtype=np.uint64) % np.uint64(1000)) + np.uint64(1)
digest = int((a * weights).sum())
print(json.dumps({"seconds": seconds, "count": len(a), "digest": digest, "peak_kb": peak_kb}))
"""

TORCH_SAMPLER = r"""
import json, re, sys, time
import numpy as np
import torch
from torch.utils.data import DistributedSampler
n, w, rank = (int(a) for a in sys.argv[1:4])
class Sized:
    def __len__(self):
        return n
sampler = DistributedSampler(Sized(), num_replicas=w, rank=rank, shuffle=True, seed=0)
start = time.perf_counter()
sampler.set_epoch(0)
indices = list(iter(sampler))
seconds = time.perf_counter() - start
""" + REPORT

# Ours through the Python package: "list" is PyTorch's workload (set_epoch + list(iter())),
# "indices" the bulk path (one int64 array), "import" only the imports (the memory floor).
OURS_PYTHON = r"""
import json, re, sys, time
import numpy as np
from distsampler.torch import DistributedSampler
mode, order = sys.argv[1:3]
n, w, rank = (int(a) for a in sys.argv[3:6])
class Sized:
    def __len__(self):
        return n
sampler = DistributedSampler(Sized(), num_replicas=w, rank=rank, shuffle=True, seed=0, order=order)
start = time.perf_counter()
if mode == "list":
    sampler.set_epoch(0)
    indices = list(iter(sampler))
elif mode == "indices":
    indices = sampler.indices(0)
else:
    indices = []
seconds = time.perf_counter() - start
""" + REPORT

TORCH_RANDPERM = r"""
import json, re, sys, time
import numpy as np
import torch
n = int(sys.argv[1])
g = torch.Generator()
g.manual_seed(0)
start = time.perf_counter()
perm = torch.randperm(n, generator=g)
seconds = time.perf_counter() - start
indices = perm.numpy()
""" + REPORT


# The epoch boundary of a training loop, torch order, one rank of W: read epoch e at a training
# pace (a fixed compute time per batch of 256, so the epoch lasts `epoch_s` seconds), then time
# set_epoch(e + 1) up to the first index of e + 1. argv: kind (pytorch | ours | ours-prefetch),
# n, w, epoch_s.
EPOCH_BOUNDARY = r"""
import json, re, sys, time
import numpy as np
kind, n, w, epoch_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
class Sized:
    def __len__(self):
        return n
if kind == "pytorch":
    from torch.utils.data import DistributedSampler
    sampler = DistributedSampler(Sized(), num_replicas=w, rank=0, seed=0)
else:
    from distsampler.torch import DistributedSampler
    sampler = DistributedSampler(Sized(), num_replicas=w, rank=0, seed=0,
                                 prefetch=kind == "ours-prefetch")
sampler.set_epoch(0)
iterator = iter(sampler)
batches = -(-len(sampler) // 256)
pause = epoch_s / batches
start = time.perf_counter()
for b in range(batches):  # epoch 0 at a training pace
    for _ in range(min(256, len(sampler) - b * 256)):
        next(iterator)
    deadline = start + (b + 1) * pause
    while time.perf_counter() < deadline:
        time.sleep(max(0.0, min(pause, deadline - time.perf_counter())))
epoch_seconds = time.perf_counter() - start
del iterator
start = time.perf_counter()
sampler.set_epoch(1)
first = next(iter(sampler))
boundary = time.perf_counter() - start
peak_kb = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1))
print(json.dumps({"seconds": boundary, "epoch_seconds": epoch_seconds, "first": first,
                  "peak_kb": peak_kb, "count": 1, "digest": first}))
"""


def run(command, env=None):
    """Runs one workload; returns its JSON report plus peak_mb (peak RSS of the process)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{command} failed: {err.decode()[-2000:]}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    # The process's own VmHWM: a child's ru_maxrss would include the forking interpreter.
    report["peak_mb"] = report.get("peak_kb", usage.ru_maxrss) / 1024.0
    return report


def fmt_s(seconds):
    return f"{seconds:.3f} s" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


def fmt_n(n):
    exponent = len(str(n)) - 1
    return f"10^{exponent}" if n == 10**exponent else str(n)


def emit_feistel_per_isa(emit, v2, kernels_bin):
    """The default order's gather (feistel version 2) per kernel, and the cost of its rounds."""
    # Level 2 is the AVX-512 kernel: an explicit gather(..., level) runs that level's own kernel
    # (src/feistel_v2_gather.cc), and the dispatch chooses it on AVX-512 CPUs (kAvx512Verified,
    # src/feistel.cc). A CPU without it skips those benchmarks: "not run".
    isas = [("0", "portable (SSE2)"), ("3", "portable built for SSE4.1"), ("1", "AVX2"),
            ("2", "AVX-512")]
    missing = [label for level, label in isas
               if not any(level in cells for cells in v2.values())]

    def cell(cells, level):
        return f"{cells[level]:.3f}" if level in cells else "not run"

    def ratio(cells, level, over="1"):
        ok = level in cells and over in cells
        return f"{cells[level] / cells[over]:.1f}x" if ok else "-"

    emit("### Feistel version 2, the default order, per instruction set")
    emit()
    emit(f"`{os.path.basename(kernels_bin)} --benchmark_filter=BM_FeistelGatherV2/`: ns per index "
         "of `gather` (one window of 65,536 positions per call), per kernel; each kernel gives the "
         "same bits (feistel_v2_test). The CPU's best is picked at run time: AVX-512 (with F, VL, "
         "BW and DQ; its kernels matched `operator()` on an AVX-512 CPU, "
         "scripts/device_check_avx512.sh), else AVX2, else the portable code built for SSE4.1, "
         "else for SSE2 (x86-64's baseline; other architectures build the portable code for "
         "theirs). The last columns are the portable builds' time over AVX2's, and AVX2's over "
         "AVX-512's." +
         (f" Not run: {', '.join(missing)} (this CPU lacks it)." if missing else ""))
    emit()
    emit("| n, stride | " + " | ".join(label for _, label in isas) +
         " | SSE2 / AVX2 | SSE4.1 / AVX2 | AVX2 / AVX-512 |")
    emit("|---|" + "---|" * (len(isas) + 3))
    for key in sorted((k for k in v2 if isinstance(k, tuple)), key=lambda k: (k[1], k[0])):
        cells = v2[key]
        emit(f"| {fmt_n(key[0])}, {key[1]} | " +
             " | ".join(cell(cells, level) for level, _ in isas) +
             f" | {ratio(cells, '0')} | {ratio(cells, '3')} | {ratio(cells, '1', '2')} |")
    emit()
    emit("The cost of a round (`BM_FeistelGatherV2Rounds`: n = 10^8, stride 1, ns per index; "
         "8 rounds is the default, twice the most that any statistic of docs/quality.md breaks):")
    emit()
    emit("| rounds | " + " | ".join(label for _, label in isas) + " |")
    emit("|---|" + "---|" * len(isas))
    for rounds in sorted(k for k in v2 if isinstance(k, int)):
        emit(f"| {rounds} | " + " | ".join(cell(v2[rounds], level) for level, _ in isas) + " |")
    emit()


def torch_version(python):
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def machine(torch2_python=None):
    """The machine line of the report, every part read from this machine: the CPU model and
    whether it runs under a hypervisor (/proc/cpuinfo), the CPUs this process may use (nproc),
    memory, kernel, compiler, the PyTorch stacks (the venv's path as given, relative to the
    repository when it is inside it)."""
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M)
    flags = flags.group(1).split() if flags else []
    simd = [f for f in ("avx2", "avx512f") if f in flags]
    cpus = len(os.sched_getaffinity(0))
    with open("/proc/meminfo") as f:
        mem_kb = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    import torch  # noqa: E402 (only for its version)
    line = (f"{model.group(1).strip() if model else '?'}, {cpus} CPUs "
            f"({', '.join(simd) or 'no AVX2'}), {mem_kb / 2**20:.0f} GiB RAM, Linux "
            f"{platform.release()}; {gxx}, Release build (-O3, baseline x86-64, SIMD kernels "
            f"picked at run time); PyTorch {torch.__version__} (Debian python3-torch / "
            f"libtorch-dev)")
    if torch2_python:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.path.abspath(torch2_python)
        shown = os.path.relpath(path, root) if path.startswith(root + os.sep) else torch2_python
        line += f" and {torch_version(torch2_python)} ({shown}, the package index's)"
    kind = ("A virtual machine (the CPU reports a hypervisor)" if "hypervisor" in flags
            else "No hypervisor reported")
    return (f"{line}. {kind}: other jobs may run at the same time, so single numbers can "
            "be off; the ratios, each against a baseline of the same run, are what matters")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build", help="build folder with bench binaries")
    parser.add_argument("--write", help="write the markdown report to this file")
    parser.add_argument("--full", action="store_true",
                        help="also run libtorch and our torch order at 10^9 (about 8 GB, minutes)")
    parser.add_argument("--torch2-python",
                        help="an interpreter with PyTorch 2 (scripts/bench.sh: the tests' .venv): "
                             "torch.randperm from it too, beside Debian's")
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    epoch_bin = os.path.join(bin_dir, "distsampler_epoch")
    libtorch_bin = os.path.join(bin_dir, "libtorch_sampler")
    kernels_bin = os.path.join(bin_dir, "distsampler_bench")
    cli_bin = os.path.join(bin_dir, "distsampler")
    py = "/usr/bin/python3"
    lines = []

    def emit(text=""):
        print(text, flush=True)
        lines.append(text)

    started = time.time()
    emit("## One rank's epoch, W = 8, rank 0")
    emit()
    emit("PyTorch: `DistributedSampler.set_epoch(0)` + `list(iter(sampler))`. libtorch: "
         "`DistributedRandomSampler` `set_epoch` + `reset` + `next` until exhausted. Ours: "
         "`sampler.epoch(0)` streamed through `RankView::fill` in chunks of 65,536 (a checksum "
         "reads every index). Peak memory is the whole process's peak RSS, interpreter included.")
    emit()
    emit("| n | PyTorch | peak | libtorch | peak | ours, torch order | peak | ours, feistel | peak "
         "| feistel vs PyTorch | memory vs PyTorch |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|")
    headline = {}
    first_table = {}
    for n in (10**6, 10**7, 10**8, 10**9, 10**10):
        theirs = lib = ours_torch = None
        notes = []
        # PyTorch holds randperm (8 bytes) and a list of Python ints: about 46 bytes per sample.
        if n * 46 <= MEMORY_CAP_BYTES:
            theirs = run([py, "-c", TORCH_SAMPLER, str(n), str(W), "0"])
        if n <= 10**8 or (args.full and n <= 10**9):
            lib = run([libtorch_bin, str(n), str(W), "0"]) if os.path.exists(libtorch_bin) else None
            ours_torch = run([epoch_bin, "epoch", "torch", str(n), str(W), "0"])
        if theirs and ours_torch and theirs["digest"] != ours_torch["digest"]:
            raise RuntimeError(f"torch order differs from PyTorch at n={n}")
        ours = run([epoch_bin, "epoch", "feistel", str(n), str(W), "0"])

        def cell(r):
            return (fmt_s(r["seconds"]), f"{r['peak_mb']:.0f} MB") if r else ("skipped", "-")
        ratio = f"{theirs['seconds'] / ours['seconds']:.0f}x faster" if theirs else "-"
        mem = f"{100 * ours['peak_mb'] / theirs['peak_mb']:.2f}%" if theirs else "-"
        emit(f"| {fmt_n(n)} | {' | '.join(cell(theirs))} | {' | '.join(cell(lib))} | "
             f"{' | '.join(cell(ours_torch))} | {' | '.join(cell(ours))} | {ratio} | {mem} |")
        first_table[n] = {"torch": theirs, "ours torch": ours_torch, "ours feistel": ours}
        if n == 10**8:
            headline = {"theirs": theirs, "ours": ours}
    emit()
    emit("Skipped: PyTorch at 10^9 and above (it needs about 46 bytes per sample, over the 16 GB "
         "this run allows; it runs out of memory in 24 GiB). libtorch and our torch order at 10^9 "
         "and above unless `--full` (they hold the whole permutation: O(n) memory and time on "
         "every rank). The torch order's digests equal PyTorch's in every row where both ran "
         "(checked: same bits).")
    emit()

    emit("## torch-exact materialization: torch.randperm(n) vs ours, bit for bit")
    emit()
    stacks = [(py, torch_version(py))]
    if args.torch2_python:
        stacks.append((args.torch2_python, torch_version(args.torch2_python)))
    emit("`torch.randperm(n, generator=g)` (seed 0) against the torch order's build of an epoch "
         "(`make_epoch_order`, what the CLI and the Python package call); both times include "
         "the output's allocation. Ours holds uint32 below 2^32 (torch: int64). Below "
         "214,748,364 every PyTorch runs the same classic Fisher-Yates, so the bits are compared "
         "with each version's.")
    emit()
    emit("| n | " + " | ".join(f"torch.randperm, torch {v}" for _, v in stacks) + " | ours | " +
         " | ".join(f"vs torch {v}" for _, v in stacks) + " | same bits |")
    emit("|---|" + "---|" * (2 * len(stacks) + 2))
    randperm = {}
    for n in (10**6, 10**7, 10**8):
        theirs = [run([python, "-c", TORCH_RANDPERM, str(n)]) for python, _ in stacks]
        ours = run([epoch_bin, "randperm", str(n)])
        randperm[n] = (theirs, ours)
        same = "yes" if all(t["digest"] == ours["digest"] for t in theirs) else "NO"
        emit(f"| {fmt_n(n)} | " + " | ".join(fmt_s(t["seconds"]) for t in theirs) +
             f" | {fmt_s(ours['seconds'])} | " +
             " | ".join(f"{t['seconds'] / ours['seconds']:.1f}x faster" for t in theirs) +
             f" | {same} |")
    emit()

    emit("## Scaling: O(n / W) for feistel, O(n) per rank for the torch order")
    emit()
    emit("Time per rank's epoch, rank 0, and per index of the rank's share.")
    emit()
    emit("| order | n | W | time | ns per share index |")
    emit("|---|---|---|---|---|")
    for order, n, w in ([("feistel", 10**8, w) for w in (1, 2, 8, 32, 128)] +
                        [("torch", 10**7, w) for w in (1, 2, 8, 32, 128)] +
                        [("feistel", n, 8) for n in (10**6, 10**7, 10**8, 10**9, 10**10)] +
                        [("torch", n, 8) for n in (10**6, 10**7, 10**8)]):
        r = run([epoch_bin, "epoch", order, str(n), str(w), "0"])
        emit(f"| {order} | {fmt_n(n)} | {w} | {fmt_s(r['seconds'])} | "
             f"{1e9 * r['seconds'] / r['count']:.2f} |")
    emit()

    emit("## Kernels (Google Benchmark, `build/bin/distsampler_bench`)")
    emit()
    # The median of 3 repetitions per row: this shared machine's speed drifts by a few percent
    # from second to second, which a single measurement per row would carry into the table.
    out = subprocess.run([kernels_bin, "--benchmark_format=json", "--benchmark_min_time=0.3",
                          "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"],
                         capture_output=True, text=True, check=True).stdout
    results = [dict(b, name=b["run_name"]) for b in json.loads(out)["benchmarks"]
               if b.get("aggregate_name") == "median"]
    plain = next(b for b in results if b["name"] == "BM_PlainWrite")
    plain_ns = 1e9 / plain["items_per_second"]
    levels = {"0": "portable", "1": "avx2", "2": "avx512", "3": "portable built for sse4.1"}
    emit(f"Plain loop writing uint64s (the floor): {plain_ns:.3f} ns per index. Times are CPU "
         "time per index, the median of 3 repetitions (the machine is shared; wall time can be "
         "higher).")
    emit()
    emit("| benchmark | ns per index | vs plain write |")
    emit("|---|---|---|")
    v2 = {}  # (n, stride) or rounds -> level -> ns per index: the tables after this one
    for b in results:
        if "items_per_second" not in b:
            continue
        ns = 1e9 / b["items_per_second"]
        name = b["name"]
        m = re.match(r"BM_FeistelGatherV2/(\d)/(\d+)/(\d+)", name)
        if m:
            v2.setdefault((int(m.group(2)), int(m.group(3))), {})[m.group(1)] = ns
            continue
        m = re.match(r"BM_FeistelGatherV2Rounds/(\d)/(\d+)", name)
        if m:  # the cost of a round: version 2 at n = 10^8, stride 1
            v2.setdefault(int(m.group(2)), {})[m.group(1)] = ns
            continue
        m = re.match(r"BM_FeistelGather/(\d)/(\d+)/(\d+)", name)
        if m:
            name = (f"feistel v1 gather, {levels[m.group(1)]}, n = {m.group(2)}, "
                    f"stride {m.group(3)}")
        m = re.match(r"BM_TorchGather/(\d+)/(\d+)", name)
        if m:  # CliBinary torch, by contrast, builds a permutation of 16 M per call
            name = f"torch gather alone (permutation built), n = {m.group(1)}, W = {m.group(2)}"
        name = name.replace("BM_", "")
        if b.get("label"):
            name += f" ({b['label']})"
        emit(f"| {name} | {ns:.3f} | {ns / plain_ns:.1f}x |")
    emit()
    emit_feistel_per_isa(emit, v2, kernels_bin)

    emit("## The CLI's binary output, end to end")
    emit()
    emit("`distsampler indices --size 10^8 --world-size 8 --rank 0 --format binary > /dev/null`")
    emit()
    theirs_1e8 = randperm[10**8][0]
    emit("The last columns: torch.randperm(10^8) of the table above (same run) over the CLI's "
         "whole process.")
    emit()
    emit("| order | time | indices per second | peak | " +
         " | ".join(f"vs torch.randperm, torch {v}" for _, v in stacks) + " |")
    emit("|---|---|---|---|" + "---|" * len(stacks))
    for order in ("feistel", "torch"):
        command = [cli_bin, "indices", "--order", order, "--size", str(10**8), "--world-size",
                   str(W), "--rank", "0", "--format", "binary"]
        # GNU time reports the CLI's own peak RSS (%M, kB) and elapsed seconds (%e) on stderr.
        with open(os.devnull, "wb") as devnull:
            proc = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + command, stdout=devnull,
                                  stderr=subprocess.PIPE, text=True, check=True)
        seconds, peak_kb = proc.stderr.strip().splitlines()[-1].split()
        seconds = float(seconds)
        emit(f"| {order} | {fmt_s(seconds)} | {(10**8 // W) / seconds / 1e6:.0f} M | "
             f"{int(peak_kb) / 1024:.0f} MB | " +
             " | ".join(f"{t['seconds'] / seconds:.1f}x faster" for t in theirs_1e8) + " |")
    emit()

    emit("## The Python package, end to end")
    emit()
    emit("One rank's share (W = 8, rank 0) through `distsampler.torch.DistributedSampler`: "
         "`set_epoch(0)` + `list(iter(sampler))`, the PyTorch workload of the first table, whose "
         "PyTorch rows this table repeats (same run); and the bulk path `sampler.indices(0)`, "
         "one int64 numpy array. Peak is the process's peak RSS: importing torch takes the first "
         "row's; a list of Python ints adds about 40 bytes per index. Digests equal the C++ "
         "rows of the first table (same bits).")
    emit()
    emit("| n | workload | time | indices per second | peak | vs PyTorch |")
    emit("|---|---|---|---|---|---|")
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    floor = run([py, "-c", OURS_PYTHON, "import", "feistel", "1", "1", "0"], env=env)
    emit(f"| - | `import distsampler.torch` (and torch) only | - | - | {floor['peak_mb']:.0f} MB "
         "| - |")
    for n in (10**7, 10**8):
        theirs = first_table[n]["torch"]
        rows = [("PyTorch `DistributedSampler`, list(iter())", theirs, None)]
        for mode in ("list", "indices"):
            for order in ("torch", "feistel"):
                r = run([py, "-c", OURS_PYTHON, mode, order, str(n), str(W), "0"], env=env)
                reference = first_table[n][f"ours {order}"]
                if r["digest"] != reference["digest"] or r["count"] != reference["count"]:
                    raise RuntimeError(f"Python {mode} {order} differs from C++ at n={n}")
                what = ("list(iter())" if mode == "list" else "`indices(0)`")
                rows.append((f"ours, {order} order, {what}", r, theirs))
        for what, r, base in rows:
            ratio = f"{base['seconds'] / r['seconds']:.0f}x faster" if base else "-"
            emit(f"| {fmt_n(n)} | {what} | {fmt_s(r['seconds'])} | "
                 f"{r['count'] / r['seconds'] / 1e6:.0f} M | {r['peak_mb']:.0f} MB | {ratio} |")
    emit()

    emit("## The epoch boundary of a training loop (torch order, n = 10^8, W = 8)")
    emit()
    emit("One rank reads epoch 0 at a training pace (its batches of 256 spread over the epoch's "
         "duration, as compute would), then `set_epoch(1)` and the first index of epoch 1 are "
         "timed. PyTorch and ours without prefetching build epoch 1's permutation at that "
         "moment; ours with `prefetch=True` (the default) built it in the background while "
         "epoch 0 was read (prefetch.h). The first index of epoch 1 is the same in all three.")
    emit()
    emit("| sampler | epoch 0 lasted | set_epoch(1) to the first index | peak | vs PyTorch |")
    emit("|---|---|---|---|---|")
    boundary_n, epoch_s = 10**8, 6.0
    boundary = {}
    for kind, label in (("pytorch", "PyTorch `DistributedSampler`"),
                        ("ours", "ours, `prefetch=False`"),
                        ("ours-prefetch", "ours, `prefetch=True`")):
        r = run([py, "-c", EPOCH_BOUNDARY, kind, str(boundary_n), str(W), str(epoch_s)],
                env=env)
        boundary[kind] = r
        ratio = ("" if kind == "pytorch" else
                 f"{boundary['pytorch']['seconds'] / r['seconds']:.0f}x faster")
        emit(f"| {label} | {fmt_s(r['epoch_seconds'])} | {r['seconds'] * 1000:.2f} ms | "
             f"{r['peak_mb']:.0f} MB | {ratio} |")
    if len({r["first"] for r in boundary.values()}) != 1:
        raise RuntimeError("the first index of epoch 1 differs between the samplers")
    emit()

    emit("## Memory of a node's local ranks (torch order, n = 10^8, 4 local ranks)")
    emit()
    emit("`bench/node_memory.py`: 4 processes as torchrun's local ranks of one node each read "
         "epoch 0 (all but its last index) with `prefetch=True`, and are measured once epoch 1's "
         "permutation is ready beside it (two alive, the steady state of a training loop). PSS "
         "(/proc/PID/smaps_rollup) divides shared pages among the processes mapping them, so its "
         "sum counts the node's memory once; the peak RSS sum counts a shared page in every "
         "rank that touched it. Each process includes its interpreter and `import torch`. "
         "`node_shared=True`: local rank 0 builds each permutation in an anonymous memory file "
         "(memfd) and hands it to the others, which map it (node/node_order.h).")
    emit()
    node = json.loads(subprocess.run(
        [py, os.path.join(os.path.dirname(__file__), "node_memory.py"), "--json"], env=env,
        capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    emit("| local ranks | PSS sum | peak RSS sum | PSS vs one rank |")
    emit("|---|---|---|---|")
    one = node["one rank"]["pss_mb"]
    for key, label in (("one rank", "1 rank"), ("per-rank", "4 ranks, per-rank permutations"),
                       ("node-shared", "4 ranks, `node_shared=True`")):
        r = node[key]
        emit(f"| {label} | {r['pss_mb']:.0f} MB | {r['peak_rss_mb']:.0f} MB | "
             f"{r['pss_mb'] / one:.2f}x |")
    emit()

    emit("## The loader: batches per second against torch's DataLoader")
    emit()
    loader_bin = os.path.join(bin_dir, "loader_throughput")
    if os.path.exists(loader_bin):
        emit("`bench/loader/loader_compare.py` (what it measures: "
             "[loader.md](loader.md#throughput-against-pytorch-benchloader)); its output:")
        emit()
        out = subprocess.run([py, os.path.join(os.path.dirname(__file__), "loader",
                                               "loader_compare.py"), loader_bin],
                             capture_output=True, text=True, check=True).stdout
        # Measured timings: the docs test (tests/docs/docs_test.py) needs a rule for the block.
        emit("<!-- docs-test: skip timings measured by scripts/bench.sh (bench/compare.py writes "
             "this block), not reproducible -->")
        emit()
        emit("```")
        for line in out.strip().splitlines():
            emit(line)
        emit("```")
    else:
        emit(f"Not run: {loader_bin} is not built (`bash scripts/bench.sh` builds it).")
    emit()

    if headline:
        t, o = headline["theirs"], headline["ours"]
        emit(f"**Headline (n = 10^8, W = 8):** feistel {fmt_s(o['seconds'])} and "
             f"{o['peak_mb']:.0f} MB vs PyTorch's DistributedSampler {fmt_s(t['seconds'])} and "
             f"{t['peak_mb']:.0f} MB: {t['seconds'] / o['seconds']:.0f}x faster, "
             f"{100 * o['peak_mb'] / t['peak_mb']:.2f}% of the memory.")
        emit()
    emit(f"Whole run: {time.time() - started:.0f} s.")

    if args.write:
        with open(args.write, "w") as f:
            f.write(HEADER.format(machine=machine(args.torch2_python),
                                  date=time.strftime("%Y-%m-%d")))
            f.write("\n".join(lines) + "\n")
        print(f"wrote {args.write}")
    return 0


HEADER = """# Benchmarks

Measured on {date} by `bash scripts/bench.sh` (which builds with
`-DDISTSAMPLER_BUILD_BENCHMARKS=ON`, builds `loader_throughput`, and runs `/usr/bin/python3
bench/compare.py --build build --torch2-python .venv/bin/python --write docs/benchmarks.md`); every
number below comes from that one run, ours and PyTorch's side by side, and so do the Peers and
Token streams sections at the end (the same command's next stages, each naming its command to run
it alone). Nothing here is a test: the tests check bits, never times.

Machine: {machine}.

"""

if __name__ == "__main__":
    sys.exit(main())
