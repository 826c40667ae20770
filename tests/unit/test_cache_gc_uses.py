"""`adapters/cache_gc.py` `last_uses`: what gc holds per referenced checkpoint.

A run references each checkpoint under two names (the scoped layout and the one before
scopes); with the scan's names given, only names that exist are kept, as the scan's own
string objects, and every run's references share one key object (memory grows with the
distinct checkpoints, not with runs x names: docs/performance.md "Memory of `run` on a
60k-decision corpus").
"""

from __future__ import annotations

from datetime import UTC, datetime

from runjournal.adapters.cache_gc import WORKSPACES, last_uses
from runjournal.adapters.checkpoints import Workspace
from runjournal.domain.cache_refs import RunReferences
from runjournal.domain.decisions import Stage
from runjournal.domain.ports import CheckpointKey, StoreScope

SCOPE = StoreScope("a" * 32, "", "b" * 64)


def key() -> CheckpointKey:  # a new, equal object each time (as decoded from two runs)
    return CheckpointKey("terms", "docs/a.md", Stage.EXTRACT, "c" * 64, SCOPE)


def refs(day: int) -> RunReferences:
    when = datetime(2026, 12, day, tzinfo=UTC)
    return RunReferences(run_id=f"r{day}", pipeline="p", started=when, checkpoints={key()})


def test_only_names_the_scan_found_are_kept_as_its_own_strings() -> None:
    scoped = "".join([WORKSPACES, "/p/", Workspace.checkpoint_name(key())])  # a new object
    legacy = f"{WORKSPACES}/p/{Workspace.checkpoint_name(key().position)}"
    assert scoped != legacy
    everything = last_uses([refs(1), refs(3)])
    assert set(everything) == {scoped, legacy}
    uses = last_uses([refs(1), refs(3), refs(2)], [scoped])
    assert list(uses) == [scoped] and next(iter(uses)) is scoped
    assert uses[scoped] == datetime(2026, 12, 3, tzinfo=UTC)  # the newest run's start
    assert last_uses([refs(1)], []) == {}
