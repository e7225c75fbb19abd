"""The variant tables in Python (python/bind_order.cc over variants.h): the names and versions the
C++ tables hold, and their parsers, which accept exactly those and refuse anything else with
Python's spelling of the C++ message (the parameter, the value's repr, the allowed ones)."""
import pytest

from distsampler import _core


def test_tables_are_the_cpp_ones():
    assert _core.ORDER_KINDS == ("torch", "feistel")
    assert _core.RANDPERM_VARIANTS == ("current", "classic")
    assert _core.FEISTEL_VERSIONS == (1, 2)
    assert tuple(_core.RandpermVariant.__members__) == _core.RANDPERM_VARIANTS


def test_every_row_parses_to_itself():
    for name in _core.ORDER_KINDS:
        assert _core.parse_order_kind(name) == name
    for name in _core.RANDPERM_VARIANTS:
        assert _core.parse_randperm_variant(name) == name
    for version in _core.FEISTEL_VERSIONS:
        assert _core.parse_feistel_version(version) == version
    assert _core.parse_randperm_variant("auto", also=["auto"]) == "auto"


@pytest.mark.parametrize("call, message", [
    (lambda: _core.parse_order_kind(None),
     "order = None is not an order; allowed: 'torch', 'feistel'"),
    (lambda: _core.parse_order_kind(3, "order"),
     "order = 3 is not an order; allowed: 'torch', 'feistel'"),
    (lambda: _core.parse_order_kind("Torch", parameter="--order"),
     "--order = 'Torch' is not an order; allowed: 'torch', 'feistel'"),
    (lambda: _core.parse_randperm_variant("new", also=["auto"]),
     "randperm = 'new' is not a variant; allowed: 'auto', 'current', 'classic'"),
    (lambda: _core.parse_feistel_version(3),
     "feistel_version = 3 is not a version; allowed: 1, 2"),
    (lambda: _core.parse_feistel_version(True),
     "feistel_version = True is not a version; allowed: 1, 2"),
    (lambda: _core.parse_feistel_version("2"),
     "feistel_version = '2' is not a version; allowed: 1, 2"),
    (lambda: _core.parse_feistel_version(2 ** 80),
     f"feistel_version = {2 ** 80} is not a version; allowed: 1, 2"),
])
def test_anything_else_is_refused_listing_the_allowed_ones(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message
