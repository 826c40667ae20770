"""cli/heap.py: the start-up heap is frozen while the stages run and given back after."""

from __future__ import annotations

import gc

import pytest
from runjournal.app.heap import settled_heap


def test_objects_are_frozen_inside_and_given_back_after() -> None:
    kept = [object() for _ in range(3)]  # tracked: a list
    before = gc.get_freeze_count()
    with settled_heap():
        assert gc.get_freeze_count() > before
        assert gc.isenabled()  # nothing is disabled: the run's own objects are collected
    assert gc.get_freeze_count() == before
    assert kept


def test_given_back_when_the_run_raises() -> None:
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), settled_heap():
        raise RuntimeError("a stage failed")
    assert gc.get_freeze_count() == before
