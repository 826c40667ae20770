"""The traced peak of one in-process run: what the memory-growth tests compare at two
corpus sizes (issue 29; a ratio of peaks, never a wall-clock bound)."""

from __future__ import annotations

import functools
import gc
import tracemalloc
from typing import Any

import pytest
import runjournal
from runjournal.adapters import packed_store
from runjournal.adapters.journal import session


def traced_run_peak(project: runjournal.Project, *, resume: bool) -> tuple[int, Any]:
    """Peak bytes traced while `project` runs, and its result (which must succeed)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = project.run(resume=resume)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.succeeded, result.document
    return peak, result


def shrink_bounded_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make small what is bounded by a size a test corpus does not reach, so both corpus
    sizes a growth test compares are past it: the events of reuse summaries a resume holds
    until their batch commits, the lanes held for one block summary, the sealed blocks
    held decompressed, the directories a store created, the directory ids it remembers
    and its packed path components."""
    monkeypatch.setattr(session, "EXPANSIONS_HELD", 256)
    monkeypatch.setattr(session, "MAX_UNITS", 8)
    monkeypatch.setattr(packed_store, "_HELD_BLOCKS", 2)
    monkeypatch.setattr(packed_store, "_FRESH_DIRS", 4)
    monkeypatch.setattr(packed_store, "_KNOWN_DIRS", 8)
    packed = functools.lru_cache(maxsize=64)(packed_store._pack_part.__wrapped__)
    monkeypatch.setattr(packed_store, "_pack_part", packed)
