"""What the suites share about the stack under test: a package that one stack pins and the other
lacks."""
import importlib
import os
import sys

import pytest


def required(module, variable):
    """The module; a skip saying why, unless the environment variable `variable` is "1" (the
    stack pins the module: ctest sets it for the torch 2 stack), which makes its absence a
    failure."""
    if os.environ.get(variable) == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed on this stack "
                               f"({sys.executable}); the torch 2 stack pins it")
