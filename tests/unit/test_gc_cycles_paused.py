"""`app/collect_garbage.py` `cycles_paused`: the cycle collector is off while the cache is
collected (its full passes over gc's keys and entries grew with the cache:
docs/performance.md "gc, audit and explain at scale") and left as it was after."""

from __future__ import annotations

import gc

import pytest
from runjournal.app.collect_garbage import cycles_paused


def test_paused_inside_and_restored_after_even_on_error() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with cycles_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(RuntimeError), cycles_paused():
            raise RuntimeError("boom")
        assert gc.isenabled()
        gc.disable()
        with cycles_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        (gc.enable if was else gc.disable)()
