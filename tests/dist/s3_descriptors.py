"""Long reads of s3:// token sources on a real S3 server (SeaweedFS, tests/dist/s3_server.py) hold
a bounded number of descriptors and threads, and running out of descriptors is one clear error
(issue 50). Each case runs in a fresh process:

1. READS batches of a TokenStream over s3:// sources (one batch a step) through
   TokenStream.loader, with 0 and 2 workers under each planner ("node", "process", "inline"):
   the loop's process (its workers' too, while they run) may
   hold at most SLACK descriptors and SLACK threads more at the end than after its first READS // 10
   batches (counted from /proc/self/fd and /proc/self/task). A thread per step whose libcurl
   handle outlived it left a socket a step: thousands.
2. The descriptors used up (RLIMIT_NOFILE lowered, the rest filled) after the first batches, once
   the read-ahead thread of the next step has ended (each step's read-ahead is a thread of its
   own, with a connection of its own: filled while one still runs, its exit frees a descriptor the
   next one takes, and the read goes on), with 0 workers: the loop gets one error within
   FAIL_SECONDS naming the limit (not a retry of the connection for the whole retry window,
   nor a read-ahead failure swallowed and the step read again).
3. DISTSAMPLER endpoints of another scheme (AWS_ENDPOINT_URL=ftp://...): one error at once
   naming the variable.

Usage: s3_descriptors.py PYTHON_PACKAGE_DIR S3_VENV_PYTHON [--reads N]   (weed beside it)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SEQ_LEN, BATCH = 63, 4
SLACK = 24
FAIL_SECONDS = 10

# A fresh process: READS batches, the descriptors and threads of this process (and of its
# DataLoader workers, each reporting its own through the batches it sends) early and at the end.
READ = r"""
import json, os, sys
sys.path.insert(0, {package_dir!r})
from distsampler.tokens import TokenStream

def counts():
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))

class Counted(TokenStream):
    def __iter__(self):
        for batch in super().__iter__():
            batch["counts"] = counts()  # the process that read it: a worker's or the loop's
            yield batch

s = Counted({sources!r}, seq_len={seq_len}, global_batch={batch}, seed=5, rank=0, world_size=1,
            planner={planner!r})
early = {{}}
late = {{}}
loader = s.loader(num_workers={workers})
for i in range({reads}):
    b = next(loader)
    who = "loop" if {workers} == 0 else "worker %d" % (i % {workers})
    here = counts()
    (early if i < {reads} // 10 else late)[who] = list(b["counts"])
    (early if i < {reads} // 10 else late)["loop"] = list(here)
print(json.dumps({{"early": early, "late": late}}))
"""

# A fresh process: the first batches, then every descriptor up to a low limit taken, then more
# batches: the error the loop gets, and how long it took.
EXHAUST = r"""
import os, resource, sys, time
sys.path.insert(0, {package_dir!r})
from distsampler.tokens import TokenStream
s = TokenStream({sources!r}, seq_len={seq_len}, global_batch={batch}, seed=5, rank=0,
                world_size=1, planner="process")
loader = s.loader(num_workers=0)
for _ in range(3):
    next(loader)
# The read-ahead thread of the next step ends first (its exit closes its connection, which would
# free a descriptor for the thread after it): the thread count steady for a second.
deadline, last, steady = time.monotonic() + 30, None, 0
while steady < 10 and time.monotonic() < deadline:
    time.sleep(0.1)
    now = len(os.listdir("/proc/self/task"))
    steady, last = (steady + 1 if now == last else 0), now
limit = len(os.listdir("/proc/self/fd")) + 64
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
start = time.monotonic()
try:
    for _ in range(200):
        next(loader)
    print("no error in 200 batches")
except Exception as e:
    print("%.1f %s: %s" % (time.monotonic() - start, type(e).__name__, e))
"""


def run(code, env, timeout=600):
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=timeout)
    return out.returncode, out.stdout.strip(), out.stderr.strip()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("package_dir")
    p.add_argument("s3_python")
    p.add_argument("--reads", type=int, default=2000)
    args = p.parse_args()
    package_dir = os.path.abspath(args.package_dir)
    sys.path.insert(0, package_dir)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from s3_server import SeaweedS3
    from s3_tokens import prefixes, write_sources
    s3_python = os.path.abspath(args.s3_python)
    weed = os.path.join(os.path.dirname(s3_python), "weed")
    if not os.access(weed, os.X_OK):
        print(f"FAIL: no weed binary at {weed} (scripts/deps.sh's ensure_s3_venv installs it)")
        return 1
    problems = []
    root = tempfile.mkdtemp(prefix="distsampler-s3fd-")
    local_root = os.path.join(root, "local")
    os.makedirs(local_root)
    sources, files = write_sources(local_root)
    with SeaweedS3(weed, os.path.join(root, "server")) as server:
        server.upload(s3_python, "corpus", {f"v1/{f}": os.path.join(local_root, f)
                                            for f in files})
        env = {**os.environ, **server.env(), "DISTSAMPLER_S3_CACHE": os.path.join(root, "cache"),
               "DISTSAMPLER_S3_RETRY_SECONDS": "20", "OMP_NUM_THREADS": "1"}
        remote = prefixes(sources, "s3://corpus/v1/")

        # 1: descriptors and threads over a long read.
        for planner, workers in [(p, w) for w in (0, 2) for p in ("node", "process", "inline")]:
            t = time.monotonic()
            code = READ.format(package_dir=package_dir, sources=remote, seq_len=SEQ_LEN,
                               batch=BATCH, planner=planner, workers=workers, reads=args.reads)
            status, out, err = run(code, env)
            label = f"planner {planner!r}, {workers} workers"
            if status != 0:
                problems.append(f"{label}: exit {status}: {err[-2000:]}")
                continue
            got = json.loads(out.splitlines()[-1])
            for who in sorted(got["late"]):
                (fd0, task0), (fd1, task1) = got["early"][who], got["late"][who]
                print(f"part 1: {label}, {who}: {fd0} -> {fd1} descriptors, {task0} -> {task1} "
                      f"threads over {args.reads} batches", flush=True)
                if fd1 - fd0 > SLACK or task1 - task0 > SLACK:
                    problems.append(f"{label}, {who}: {fd0} -> {fd1} descriptors, {task0} -> "
                                    f"{task1} threads over {args.reads} batches")
            print(f"  ({time.monotonic() - t:.0f} s)", flush=True)

        # 2: out of descriptors.
        status, out, err = run(EXHAUST.format(package_dir=package_dir, sources=remote,
                                              seq_len=SEQ_LEN, batch=BATCH), env)
        print(f"part 2: descriptors used up: {out or err[-2000:]}", flush=True)
        seconds, _, message = out.partition(" ")
        if status != 0 or not seconds.replace(".", "").isdigit():
            problems.append(f"descriptors used up: exit {status}, {out!r} {err[-2000:]}")
        elif float(seconds) > FAIL_SECONDS or "RLIMIT_NOFILE" not in message or \
                "s3://corpus/v1/" not in message:
            problems.append(f"descriptors used up: after {seconds} s {message!r}; expected one "
                            f"error within {FAIL_SECONDS} s naming the object and RLIMIT_NOFILE")

    # 3: an endpoint of another scheme.
    code = ("from distsampler.tokens import TokenStream\n"
            f"TokenStream([({remote[0][0]!r}, 1.0)], seq_len=63, global_batch=4, seed=5)")
    bad = {**env, "AWS_ENDPOINT_URL": "ftp://127.0.0.1:1", "DISTSAMPLER_S3_CACHE":
           os.path.join(root, "cache-ftp")}
    bad.pop("AWS_ENDPOINT_URL_S3", None)
    t = time.monotonic()
    status, out, err = run(f"import sys; sys.path.insert(0, {package_dir!r})\n{code}", bad,
                           timeout=120)
    line = err.splitlines()[-1] if err else ""
    took = time.monotonic() - t
    print(f"part 3: AWS_ENDPOINT_URL=ftp://...: exit {status} after {took:.1f} s: {line}")
    if status == 0 or took > FAIL_SECONDS or "AWS_ENDPOINT_URL" not in line or \
            "ftp://127.0.0.1:1" not in line:
        problems.append(f"ftp endpoint: exit {status} after {took:.1f} s: {line!r}")
    for problem in problems:
        print("FAIL:", problem)
    print("s3_descriptors:", "passed" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
