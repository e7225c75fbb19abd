"""The PyTorch stack under test in pytest's header, as in tests/python/conftest.py."""
import sys


def pytest_report_header(config):
    try:
        import torch
        return f"torch {torch.__version__} at {sys.executable}"
    except ImportError:
        return f"no torch at {sys.executable}"
