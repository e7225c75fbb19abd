"""Preparing data as Ray tasks, for real (issue 52; docs/tokens.md, "On SLURM and Ray"): a local
cluster started here (`ray start --head --block` on 127.0.0.1, 2 CPUs, its own --temp-dir, no
dashboard, no usage stats), the driver connected with ray.init(address=...), and 3 tasks
@ray.remote(max_retries=2), task i calling distsampler.prepare.prepare(..., task=i, tasks=3).
Task 1's first attempt SIGKILLs its own worker process mid-shard (a thread waits for a .partial
file of its process, then os.kill(os.getpid(), SIGKILL)), so that Ray itself retries it; each
attempt appends its process id to a marker file, so task 1 must show two attempts, and its
second must find the first one's .partial file left (the kill came mid-shard). Then finalize,
and the folder must be the one-machine run's (--workers 1): every file byte for byte, every
document once, no .partial file left (tests/dist/prepare_tasks.py).

    ray_prepare.py

The cluster runs in a session of its own: stopped by SIGTERM to `ray start` (which stops what it
started), then SIGKILL to that session's processes and to any process whose command line names
the cluster's --temp-dir (`ray stop` would stop every Ray cluster of the host). Without ray or
tokenizers: a skip (exit 77, the reason in DISTSAMPLER_SKIP_LOG), a failure when
DISTSAMPLER_REQUIRE_ALL_TESTS=1.
"""
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

DIST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dist")
sys.path.insert(0, DIST)
import prepare_tasks  # noqa: E402

TASKS, KILLED = 3, 1
SKIP = 77
# Ray takes 127.0.0.1 for this host's outward address and binds its servers to every interface,
# unless clusters of more than one node are off (Ray's switch for Windows and macOS): then the
# node's address is 127.0.0.1 and every server listens there. Set before ray is imported, for
# the driver's ray.init(address=...) and, inherited, for `ray start` and its processes.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_task(root, out, task, tasks):
    """One task's shards; on task KILLED's first attempt, the worker SIGKILLs itself mid-shard.
    Appends {"pid", "left"} to root/attempts.TASK first ("left": the .partial files of this
    task's shards a killed attempt left)."""
    from distsampler.prepare import prepare
    marker = os.path.join(root, f"attempts.{task}")
    with open(marker, "a+") as f:
        f.seek(0)
        first = not f.read()
        f.write(json.dumps({"pid": os.getpid(),
                            "left": prepare_tasks.own_partials(out, task, tasks)}) + "\n")
    done = threading.Event()
    if task == KILLED and first:
        def kill_mid_shard():
            mine = f"-{os.getpid()}.bin"
            deadline = time.monotonic() + 60
            while not done.is_set() and time.monotonic() < deadline:
                if any(n.endswith(mine) for n in prepare_tasks.own_partials(out, task, tasks)):
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(0.001)
        threading.Thread(target=kill_mid_shard, daemon=True).start()
    inputs = prepare_tasks.inputs(root)
    try:
        result = prepare(inputs, out, os.path.join(root, "tokenizer.json"), eod=prepare_tasks.EOD,
                         shard_size=prepare_tasks.SHARD_BYTES, task=task, tasks=tasks, quiet=True)
    finally:
        done.set()
    return [s["documents"] for s in result["shards"]]


def start_cluster(temp, log):
    """`ray start --head --block` in a session of its own: (the process, the address)."""
    port = free_port()
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    command = [ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
               "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
               f"--temp-dir={temp}"]
    if not os.path.exists(ray):
        command = [sys.executable, "-m", "ray.scripts.scripts", *command[1:]]
    # The workers inherit this environment: the package (PYTHONPATH) and prepare_tasks.
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), DIST) if p)
    env = dict(os.environ, RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", OMP_NUM_THREADS="1",
               PYTHONPATH=path)
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        with open(log.name, errors="replace") as f:
            if "Ray runtime started" in f.read():
                return process, f"127.0.0.1:{port}"
        time.sleep(0.2)
    raise RuntimeError(f"`ray start` did not start a cluster in 90 s (exit status "
                       f"{process.poll()}); its output is in {log.name}")


def stop_cluster(process, temp):
    """SIGTERM to `ray start` (it stops what it started), then SIGKILL to its session and to any
    process whose command line names `temp`: those, as (pid, command line)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    killed = {}
    for _ in range(50):
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if temp in line and int(pid) != os.getpid():
                found.append(int(pid))
                killed.setdefault(int(pid), line[:120])
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not found:
            break
        time.sleep(0.1)
    return sorted(killed.items())


def run(root):
    """Problems (strings) of the Ray run over the corpus in root."""
    import ray
    out = os.path.join(root, "out")
    temp = os.path.join(root, "r")  # short: Ray's socket paths must fit in 107 bytes
    problems = []
    with open(os.path.join(root, "ray-start.log"), "w") as log:
        process, address = start_cluster(temp, log)
        try:
            ray.init(address=address, log_to_driver=False)
            nodes = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
            if nodes != ["127.0.0.1"]:
                problems.append(f"the cluster's nodes are at {nodes}, not 127.0.0.1 alone")
            task = ray.remote(max_retries=2)(prepare_task)
            refs = [task.remote(root, out, i, TASKS) for i in range(TASKS)]
            documents = ray.get(refs, timeout=120)
            print(f"ray: {TASKS} tasks, documents per shard {documents}")
        finally:
            ray.shutdown()
            for pid, line in stop_cluster(process, temp):
                print(f"ray: killed {pid}, left after the cluster stopped: {line}")
    attempts = {}
    for i in range(TASKS):
        with open(os.path.join(root, f"attempts.{i}")) as f:
            attempts[i] = [json.loads(line) for line in f]
    want = {i: 2 if i == KILLED else 1 for i in range(TASKS)}
    if {i: len(a) for i, a in attempts.items()} != want:
        problems.append(f"attempts per task {attempts}, expected {want} (Ray retries task "
                        f"{KILLED} once)")
    elif not any(n.endswith(f"-{attempts[KILLED][0]['pid']}.bin")
                 for n in attempts[KILLED][1]["left"]):
        problems.append(f"task {KILLED}: its retry found no .partial file of the killed attempt "
                        f"(the kill did not come mid-shard): {attempts[KILLED]}")
    else:
        print(f"ray: task {KILLED} killed itself in process {attempts[KILLED][0]['pid']}, "
              f"leaving {', '.join(attempts[KILLED][1]['left'])}; Ray retried it in process "
              f"{attempts[KILLED][1]['pid']}")
    from distsampler.prepare import prepare
    manifest = prepare(prepare_tasks.inputs(root), out, os.path.join(root, "tokenizer.json"),
                       eod=prepare_tasks.EOD, shard_size=prepare_tasks.SHARD_BYTES, finalize=True)
    print(f"ray: finalized {len(manifest['shards'])} shards")
    return problems + prepare_tasks.check(root, out)


def main():
    start = time.monotonic()
    for module in ("ray", "tokenizers"):
        try:
            importlib.import_module(module)
        except ImportError as e:
            reason = f"ray_prepare: {module} is not installed in {sys.executable} ({e})"
            if os.environ.get("DISTSAMPLER_REQUIRE_ALL_TESTS") == "1":
                print(f"FAIL: {reason} (requirements/torch2.txt pins it)")
                return 1
            print(f"skipped: {reason}")
            if os.environ.get("DISTSAMPLER_SKIP_LOG"):
                with open(os.environ["DISTSAMPLER_SKIP_LOG"], "a") as f:
                    f.write(reason + "\n")
            return SKIP
    root = tempfile.mkdtemp(prefix="dsray.", dir="/tmp")
    problems = ["(not run)"]
    try:
        prepare_tasks.corpus(root)
        print(f"ray: one machine: {prepare_tasks.reference(root)}")
        problems = run(root)
    finally:
        verdict = "FAILED" if problems else "ok"
        print(f"ray_prepare: {verdict} in {time.monotonic() - start:.1f} s")
        for problem in problems:
            print(f"  {problem}")
        if problems:
            print(f"  files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
