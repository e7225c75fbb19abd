"""The PyTorch stack under test in pytest's header, as in tests/python/conftest.py."""
import os
import sys

# Every skip, with its reason, to DISTSAMPLER_SKIP_LOG (tests/skip_log.py; scripts/test.sh prints it).
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skip_log import pytest_runtest_logreport  # noqa: E402,F401


def pytest_report_header(config):
    try:
        import torch
        return f"torch {torch.__version__} at {sys.executable}"
    except ImportError:
        return f"no torch at {sys.executable}"
