"""cli/heap.py: the start-up heap is frozen while the stages run and given back after."""

from __future__ import annotations

import gc

import pytest
from runjournal.app.heap import YOUNG_THRESHOLD, settled_heap


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


def test_young_threshold_raised_inside_and_restored_after() -> None:
    before = gc.get_threshold()
    with settled_heap():
        assert gc.get_threshold()[0] >= YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
    assert gc.get_threshold() == before


def test_the_client_import_joins_a_frozen_heap() -> None:
    from runjournal.adapters.llm.runtime import _load_client

    before = gc.get_freeze_count()
    with settled_heap():
        frozen = gc.get_freeze_count()
        late = [[] for _ in range(50)]  # what an import thread leaves, after the freeze
        _load_client()
        assert gc.get_freeze_count() >= frozen + len(late)
    assert gc.get_freeze_count() == before
    _load_client()  # outside a run: nothing is frozen
    assert gc.get_freeze_count() == before
