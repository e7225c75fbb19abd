"""Each public module's ``__all__`` is its API: every name it lists exists, and every public
name of the module (not starting with _) is listed, unless it is a module, a typing helper,
another library's object, or one of the package's own helpers imported on purpose (PRIVATE).
mypy --strict takes ``__all__`` as what a user may import (tests/typing/)."""
import importlib
import types

import pytest

# Names a module imports from the package's private modules for its own use: not its API.
PRIVATE = {
    "distsampler.torch": {"PlainShell", "Shell", "gather_in_step", "import_numpy",
                          "spans_group"},
    "distsampler.policies": {"PlainShell", "Shell", "check_uint64", "randperm_variant",
                             "resolve_world"},
    # SeedOverflowError: raised here, exported by distsampler.torch.
    "distsampler.data": {"PlainShell", "Shell", "SeedOverflowError", "check_uint64"},
    "distsampler.torchrun": {"libuv_available"},
    "distsampler.launch": set(),
    "distsampler.tokens": {"resolve_world"},
    "distsampler": set(),
}


def _is_api_candidate(value: object) -> bool:
    """Whether a module attribute could be this package's API (not a module, a typing helper
    or another library's object)."""
    if isinstance(value, types.ModuleType):
        return False
    module = getattr(value, "__module__", None)
    if module is None:  # a constant (int, str, tuple): the module's own
        return True
    return module == "distsampler" or module.startswith("distsampler.")


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_all_lists_the_public_names(name):
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    absent = [n for n in exported if not hasattr(module, n)]
    assert not absent, f"{name}.__all__ lists {absent}, which the module lacks"
    unlisted = sorted(n for n in dir(module) if not n.startswith("_") and n not in exported
                      and n not in PRIVATE[name] and _is_api_candidate(getattr(module, n)))
    assert not unlisted, (
        f"{name} has public names {unlisted} outside __all__: add them to __all__, import them "
        "under a private name, or list them in PRIVATE here as deliberate imports")
    stale = sorted(n for n in PRIVATE[name] if not hasattr(module, n))
    assert not stale, f"PRIVATE[{name!r}] names {stale}, which the module no longer has"
    both = sorted(PRIVATE[name] & set(exported))
    assert not both, f"PRIVATE[{name!r}] names {both}, which __all__ exports"
