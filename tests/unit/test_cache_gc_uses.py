"""`adapters/cache_gc.py` `last_uses`: what gc holds per referenced checkpoint.

A run references each checkpoint under two names (the scoped layout and the one before
scopes); with the scan's names given, only names that exist are kept, as the scan's own
string objects, and every run's references share one key object (memory grows with the
distinct checkpoints, not with runs x names: docs/performance.md "Memory of `run` on a
60k-decision corpus").
"""

from __future__ import annotations

from datetime import UTC, datetime

from runjournal.adapters.cache_gc import WORKSPACES, CacheEntry, last_uses, select
from runjournal.adapters.checkpoints import Workspace, scope_dir
from runjournal.domain.cache_refs import RunReferences
from runjournal.domain.decisions import Stage
from runjournal.domain.events import CacheEntryKind
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


class _CountedEntries(list):  # type: ignore[type-arg]
    """The scan's entries, counting how often they are walked."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().__iter__()


def test_restored_lanes_walk_the_entries_once_not_once_per_lane() -> None:
    """A normalize restored under --recompute keeps every stored normalize of its lane
    identity; finding them walked every entry once per restored lane identity (entries x
    lanes: quadratic in the corpus for a --recompute of every lane)."""
    lanes = 40
    entries = _CountedEntries()
    restored, others = set(), set()
    for n in range(lanes):
        lane, lid = f"docs/d{n}.md", f"{n:064x}"
        restored.add(("terms", lane, lid))
        for identity in (lid, f"{n + 1000:064x}"):  # the restored identity, another one
            scope = StoreScope("1" * 32, "", identity)
            key = CheckpointKey("terms", lane, Stage.NORMALIZE, "", scope)
            name = f"{WORKSPACES}/p/{Workspace.checkpoint_name(key)}"
            entries.append(CacheEntry(CacheEntryKind.CHECKPOINT, name, 10))
            if identity != lid:
                others.add(name)
    when = datetime(2026, 12, 1, tzinfo=UTC)
    run = RunReferences(run_id="r", pipeline="p", started=when, restored=restored)
    removed = select(entries, [run], None)
    assert entries.walks <= 4  # was lanes + 2
    assert {r.name for r in removed} == others  # each restored identity's normalize stays


def test_keys_are_named_a_lane_after_another_so_lane_directories_are_made_once() -> None:
    """Naming a checkpoint caches its lane's directory (4,096 lanes); a set's order named
    keys of lanes at random, and past 4,096 lanes every name made its directory again."""
    lanes = 4500
    keys = {
        CheckpointKey("terms", f"docs/d{n}.md", Stage.EXTRACT, f"{c:064x}", SCOPE)
        for n in range(lanes)
        for c in range(3)
    }
    when = datetime(2026, 12, 1, tzinfo=UTC)
    run = RunReferences(run_id="r", pipeline="p", started=when, checkpoints=keys)
    scope_dir.cache_clear()
    uses = last_uses([run])
    assert len(uses) == 2 * len(keys)  # scoped and the layout before scopes
    assert scope_dir.cache_info().misses == lanes  # was about one per key
