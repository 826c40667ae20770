"""`gc --cache` over a packed store at scale (docs/performance.md "gc, audit and explain
at scale"): the store's names are listed once (a second full listing for the lanes'
pointers was held beside the scan's entries), compaction holds the records of the
segments it rewrites only, and pointers of lanes left empty still go."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from runjournal.adapters.cache_gc import WORKSPACES, LaneCensus, Retention, collect
from runjournal.adapters.checkpoints import Workspace
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.cache_refs import RunReferences
from runjournal.domain.decisions import Stage
from runjournal.domain.ports import CheckpointKey, StoreScope

SCOPE = StoreScope("a" * 32, "", "b" * 64)


def _key(lane: str) -> CheckpointKey:
    return CheckpointKey("s", lane, Stage.EXTRACT, "c" * 64, SCOPE)


def _ckpt(lane: str) -> str:
    return f"{WORKSPACES}/p/{Workspace.checkpoint_name(_key(lane))}"


def _pointer(lane: str) -> str:
    return f"{WORKSPACES}/p/{Workspace.pointer_name('s', lane, Stage.EXTRACT)}"


@pytest.fixture
def root(tmp_path):
    with FsRoot.open(tmp_path / "cache", create=True) as handle:
        yield handle


def test_collect_lists_the_store_once_and_drops_the_pointers_of_emptied_lanes(
    root, monkeypatch
) -> None:
    store = PackedStore(root)
    for lane in ("docs/kept.md", "docs/gone.md"):
        store.put(_ckpt(lane), b"checkpoint " + lane.encode())
        store.put(_pointer(lane), b"pointer")
    store.close()
    listed = []
    for method in ("names", "entries", "entries_unordered"):
        real = getattr(PackedStore, method)

        def counted(self, prefix="", _real=real, _method=method):  # type: ignore[no-untyped-def]
            listed.append((_method, prefix))
            return _real(self, prefix)

        monkeypatch.setattr(PackedStore, method, counted)
    kept = RunReferences(
        run_id="r",
        pipeline="p",
        started=datetime(2026, 12, 1, tzinfo=UTC),
        checkpoints={_key("docs/kept.md")},
    )
    result = collect(root, [kept], None, dry_run=False, keep=Retention(epoch_ns=-1))
    assert [r.name for r in result.removed] == [_ckpt("docs/gone.md")]
    # once per base (workspaces/, chunkplans/): no second listing of every name; the
    # lane of a removed entry is listed on its own (are its pointers all it has left?)
    lane = _ckpt("docs/gone.md").split("/")[:5]
    assert sorted(listed) == [
        ("entries_unordered", "chunkplans/"),
        ("entries_unordered", "workspaces/"),
        ("names", "/".join(lane) + "/"),
    ]
    monkeypatch.undo()
    store = PackedStore(root)
    try:
        left = store.names(f"{WORKSPACES}/")
    finally:
        store.close()
    assert left == sorted([_ckpt("docs/kept.md"), _pointer("docs/kept.md")])


def test_the_census_counts_a_lanes_other_entries_and_its_pointers() -> None:
    census = LaneCensus()
    names = [
        _pointer("docs/a.md"),
        _ckpt("docs/a.md"),
        _pointer("docs/b.md"),  # pointers only: nothing to point at
        f"{WORKSPACES}/p/workspace.json",
        f"{WORKSPACES}/p/steps/s/x/deeper/latest.extract",  # not a lane's pointer
    ]
    for name in names:
        census.see(name)
    assert census.orphan_pointers([]) == [_pointer("docs/b.md")]
    assert sorted(census.orphan_pointers([_ckpt("docs/a.md")])) == sorted(
        [_pointer("docs/a.md"), _pointer("docs/b.md")]
    )


def test_compaction_reads_the_records_of_the_segments_it_rewrites_only(root) -> None:
    """The live records of every idle segment were held (a tuple per entry of the store)
    to judge them; they are counted, and only a rewritten segment's records are read."""
    name = f"{WORKSPACES}/p/steps/s/l{{}}/x.ckpt".format
    store = PackedStore(root, segment_limit=4096)  # about 8 records a segment
    for n in range(64):
        store.put(name(n), bytes([n]) * 400)
    store.close()
    dropped = [n for n in range(24) if n % 8 < 6]  # most of the first segments' records
    store = PackedStore(root)
    store.remove(name(n) for n in dropped)
    read: list[int] = []
    original = PackedStore._live_records

    def spy(db, segments):  # type: ignore[no-untyped-def]
        out = original(db, segments)
        read.append(sum(len(records) for records in out.values()))
        return out

    PackedStore._live_records = staticmethod(spy)  # type: ignore[method-assign]
    try:
        done = store.compact()
    finally:
        PackedStore._live_records = staticmethod(original)  # type: ignore[method-assign]
        store.close()
    live = 64 - len(dropped)
    assert done.segments_removed >= 2 and 0 < done.records_moved < live
    assert read == [done.records_moved]  # one read, of what was moved, not of every entry
    store = PackedStore(root)
    try:
        for n in set(range(64)) - set(dropped):
            assert store.get(name(n)) == bytes([n]) * 400
        assert store.get(name(dropped[0])) is None
    finally:
        store.close()
