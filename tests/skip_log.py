"""A pytest hook that appends every skipped test, with its reason, to the file named by
DISTSAMPLER_SKIP_LOG (scripts/test.sh prints that file in its last lines). Imported by the
suites' conftest.py files; the C++ tests' twin is tests/cpp/skip_log.h."""
import os
import sys


def pytest_runtest_logreport(report):
    path = os.environ.get("DISTSAMPLER_SKIP_LOG")
    if not path or not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    torch = sys.modules.get("torch")
    stack = f"torch {torch.__version__}" if torch else sys.executable
    with open(path, "a") as f:  # one short write: appends from parallel tests do not interleave
        f.write(f"pytest ({stack}): {report.nodeid}: {' '.join(reason.split())}\n")
