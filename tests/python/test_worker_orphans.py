"""distsampler.data.DataLoader's workers end with the process that started them, also when it dies
during their start-up (issue 28), where PyTorch's wait forever: its ManagerWatchdog reads
os.getppid() after the set-up, by then init's pid, and watches init.

A parent process starts a loader whose workers stop at a known point of their start-up and report
there (a file named by their pid); the test kills the parent with SIGKILL while both workers wait
there, then lets them go on, and requires that no process of the run (found by a marker in its
environment) is alive EXIT_TIMEOUT seconds later. Survivors are killed and fail the test. The
points: after our hook (worker_init_fn: the death signal ends the worker), and before it (fork:
an os.register_at_fork child handler; spawn: the worker's import of the main module), where the
hook's start-up check must end it; and workers started from another thread than the main one
(forkserver's, and those, are watched by a thread instead). Linux only (prctl, pidfd)."""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import torch

from conftest import PYTHON_DIR
from distsampler.data import DataLoader

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the worker guard's death signal is Linux's prctl")

START_TIMEOUT = 180.0  # seconds for both workers to reach their waiting point (spawn imports torch)
EXIT_TIMEOUT = 20.0    # seconds after the parent's death for every process of the run to be gone
HOLD_TIMEOUT = 300.0   # a worker waits at most this long for the test's go (then goes on anyway)
SEED = 0               # the loader's generator (the test draws nothing at random)

PARENT = r'''
import os
import time

DIR = os.environ["ORPHAN_TEST_DIR"]
WINDOW = os.environ["ORPHAN_TEST_WINDOW"]
METHOD = os.environ["ORPHAN_TEST_METHOD"]


def hold(where):
    """In a worker: report the pid, then wait for the test's go (the parent dies meanwhile)."""
    with open(os.path.join(DIR, "worker-%d" % os.getpid()), "w") as report:
        report.write(where)
    deadline = time.monotonic() + float(os.environ["ORPHAN_TEST_HOLD"])
    while not os.path.exists(os.path.join(DIR, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)


def init(worker_id):
    if WINDOW == "after-hook":
        hold("worker_init_fn")


if __name__ == "__mp_main__" and WINDOW == "before-hook":
    hold("import of the main module")  # spawn: before the worker's Process is unpickled

if __name__ == "__main__":
    import torch
    from distsampler.data import DataLoader

    if WINDOW == "before-hook" and METHOD == "fork":
        os.register_at_fork(after_in_child=lambda: hold("register_at_fork"))
    loader = DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=init,
                        multiprocessing_context=METHOD,
                        generator=torch.Generator().manual_seed(int(os.environ["ORPHAN_TEST_SEED"])))

    def read():
        for batch in loader:  # the test kills this process while the workers start
            pass

    if os.environ["ORPHAN_TEST_THREAD"] == "1":  # workers started from another thread
        import threading
        reader = threading.Thread(target=read)
        reader.start()
        reader.join()
    else:
        read()
    print("the parent read every batch: the test did not kill it", flush=True)
'''


def _marked(marker: str):
    """{pid: command line} of the live processes whose environment holds `marker`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker.encode() not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found[int(entry)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


@pytest.mark.parametrize("method, window, thread", [
    ("fork", "after-hook", False), ("fork", "before-hook", False), ("spawn", "after-hook", False),
    ("spawn", "before-hook", False), ("forkserver", "after-hook", False),
    ("fork", "after-hook", True), ("spawn", "before-hook", True)])
def test_workers_end_when_the_parent_dies_during_their_start_up(tmp_path, method, window, thread):
    marker = f"DISTSAMPLER_ORPHAN_TEST={uuid.uuid4().hex}"
    print(f"method={method} window={window} thread={thread} seed={SEED} "
          f"START_TIMEOUT={START_TIMEOUT} "
          f"EXIT_TIMEOUT={EXIT_TIMEOUT} HOLD_TIMEOUT={HOLD_TIMEOUT} marker={marker}")
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, ORPHAN_TEST_DIR=str(tmp_path),
               ORPHAN_TEST_WINDOW=window, ORPHAN_TEST_METHOD=method,
               ORPHAN_TEST_HOLD=str(HOLD_TIMEOUT), ORPHAN_TEST_SEED=str(SEED),
               ORPHAN_TEST_THREAD=str(int(thread)))
    env[marker.split("=")[0]] = marker.split("=")[1]
    log = open(tmp_path / "parent.log", "w+")
    parent = subprocess.Popen([sys.executable, str(script)], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    survivors = {}
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            workers = sorted(p.name for p in tmp_path.glob("worker-*"))
            if len(workers) >= 2:
                break
            if parent.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"the workers did not reach their waiting point ({workers}); parent "
                            f"exit code {parent.returncode}, output:\n{log.read()}")
            time.sleep(0.05)
        reports = {name: (tmp_path / name).read_text() for name in workers}
        print(f"workers waiting: {reports}; SIGKILL to the parent {parent.pid}")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        (tmp_path / "go").touch()
        died = time.monotonic()
        while True:
            survivors = _marked(marker)
            waited = time.monotonic() - died
            if not survivors or waited > EXIT_TIMEOUT:
                break
            time.sleep(0.1)
        print(f"alive {waited:.1f} s after the parent's death: {survivors}")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in _marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
    assert not survivors, (
        f"{len(survivors)} process(es) of the loader outlived its parent by {EXIT_TIMEOUT} s "
        f"(killed now): {survivors}")


def test_workers_started_on_a_thread_outlive_the_thread():
    """The death signal follows the parent thread: a loader whose persistent workers were started
    on a thread that has ended reads on, and it still reports the context it was given."""
    loader = DataLoader(list(range(32)), batch_size=4, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork",
                        generator=torch.Generator().manual_seed(SEED))
    assert loader.multiprocessing_context is torch.multiprocessing.get_context("fork")
    got = []

    def first_pass():
        got.extend(int(i) for batch in loader for i in batch)

    thread = threading.Thread(target=first_pass)
    thread.start()
    thread.join()
    time.sleep(0.5)  # a death signal, were one set, would have killed the workers by now
    got.extend(int(i) for batch in loader for i in batch)
    assert got == list(range(32)) * 2
