"""Shared fixtures: the built CLI and the golden files, located through the environment that
ctest sets (DISTSAMPLER_BIN, DISTSAMPLER_GOLDEN_DIR) or the default build folder."""
import os
import sys
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every skip, with its reason, to DISTSAMPLER_SKIP_LOG (tests/skip_log.py; scripts/test.sh prints it).
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skip_log import pytest_runtest_logreport  # noqa: E402,F401
# tests/golden's regenerating scripts, which the tests share the cases of.
sys.path.append(os.path.join(ROOT, "tests", "golden"))


def pytest_report_header(config):
    """The PyTorch stack under test (the suite runs on each): torch's version and the interpreter."""
    try:
        import torch
        return f"torch {torch.__version__} at {sys.executable}"
    except ImportError:
        return f"no torch at {sys.executable}"


@pytest.fixture(scope="session")
def cli_path():
    """The built CLI's path (for a script that runs it itself)."""
    path = os.environ.get("DISTSAMPLER_BIN", os.path.join(ROOT, "build", "bin", "distsampler"))
    if not os.path.exists(path):
        pytest.fail(f"distsampler binary not found at {path}; build first")
    return path


@pytest.fixture(scope="session")
def cli(cli_path):
    def run(*args, check=True):
        proc = subprocess.run([cli_path, *map(str, args)], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"distsampler {' '.join(map(str, args))}: {proc.stderr}")
        return proc

    return run


# The built Python package (build/python/distsampler/): ctest passes its folder; by hand the
# default build folder is used.
PYTHON_DIR = os.environ.get("DISTSAMPLER_PYTHON_DIR", os.path.join(ROOT, "build", "python"))
sys.path.insert(0, PYTHON_DIR)


def planned_lines(stream, world_size, rank, first, last):
    """What `distsampler tokens plan --world-size W --rank R --steps FIRST:LAST` prints for the
    plan of `stream` (a TokenStream at step 0, which this moves), as parsed JSON lines."""
    out = []
    for step in range(last + 1):
        for k, spans in stream._plan.plan_step(world_size, rank):
            if step >= first:
                out.append({"step": step, "rank": rank, "sequence": k,
                            "spans": [list(x[:4]) for x in spans]})
    return out
