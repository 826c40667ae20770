"""The packed store (docs/internals.md "Packed store"): names to bytes in segments with one
SQLite index; crash tails ignored and reported; compaction that keeps every live entry."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore, segment_records


def _data(name: str, version: int = 0, size: int = 300) -> bytes:
    seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


@pytest.fixture
def root(tmp_path):
    with FsRoot.open(tmp_path / "cache", create=True) as handle:
        yield handle


def _files(path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs
    )


def test_round_trip_overwrite_and_listing(root):
    store = PackedStore(root)
    try:
        assert store.get("a/b.ckpt") is None
        assert not store.exists
        store.put("ws/p/steps/a/x.ckpt", b"one")
        store.put("ws/p/steps/a/y.ckpt", b"two")
        store.put("ws/p/steps/b/latest.extract", b"ptr")
        store.put("ws/p/steps/a/x.ckpt", b"one, again")
        assert store.get("ws/p/steps/a/x.ckpt") == b"one, again"
        assert store.children("ws/p/steps") == ["a", "b"]
        assert store.children("ws/p/steps/a") == ["x.ckpt", "y.ckpt"]
        assert store.names("ws/p/steps/b/") == ["ws/p/steps/b/latest.extract"]
        assert store.names("ws/q/") == []
    finally:
        store.close()
    again = PackedStore(root)
    try:
        assert again.get("ws/p/steps/a/y.ckpt") == b"two"
        assert again.remove(["ws/p/steps/a/y.ckpt", "ws/p/nothing"]) == 1
        assert again.get("ws/p/steps/a/y.ckpt") is None
    finally:
        again.close()


def test_a_directory_this_store_made_skips_the_lookup_but_never_a_rewrite_check(root, tmp_path):
    """Puts under a directory the store created skip the index lookup for leaves it has
    not written there (docs/performance.md
    "Concurrency: `--jobs N` against an LLM endpoint"); a rewrite of one it has written, a
    write after a `remove`, and another store's writes there still behave as before."""
    store = PackedStore(root)
    other = PackedStore(root)
    try:
        store.put("ws/p/fresh/a.ckpt", b"one")
        size = store._writer.size if store._writer is not None else 0
        store.put("ws/p/fresh/a.ckpt", b"one")  # the same bytes: nothing written
        assert store._writer is not None and store._writer.size == size
        store.put("ws/p/fresh/a.ckpt", b"two")
        assert store.get("ws/p/fresh/a.ckpt") == b"two"
        other.put("ws/p/fresh/b.ckpt", b"theirs")  # another writer, same directory
        store.put("ws/p/fresh/b.ckpt", b"mine")
        assert other.get("ws/p/fresh/b.ckpt") == b"mine"
        assert store.remove(["ws/p/fresh/a.ckpt"]) == 1
        store.put("ws/p/fresh/a.ckpt", b"two")  # removed, so written again
        assert store.get("ws/p/fresh/a.ckpt") == b"two"
        assert store.names("ws/p/fresh/") == ["ws/p/fresh/a.ckpt", "ws/p/fresh/b.ckpt"]
    finally:
        other.close()
        store.close()


def test_a_reader_creates_nothing(tmp_path):
    with FsRoot.open(tmp_path, create=True) as handle:
        store = PackedStore(handle)
        assert store.get("x/y") is None
        assert store.names("") == [] and list(store.entries()) == []
        store.close()
    assert _files(tmp_path) == []


def test_many_entries_take_a_few_files(root, tmp_path):
    store = PackedStore(root, segment_limit=1 << 20)
    try:
        for i in range(3000):
            store.put(f"ws/p/steps/s/lane{i % 30}/extract/{i:064x}.ckpt", _data(str(i)))
        for i in range(3000):
            assert store.get(f"ws/p/steps/s/lane{i % 30}/extract/{i:064x}.ckpt") == _data(str(i))
    finally:
        store.close()
    # 3000 entries of 300 bytes: the index and one segment per MiB
    assert len(_files(tmp_path / "cache")) <= 3


def test_put_many_indexes_a_batch_in_one_transaction(root, tmp_path):
    """`put_many` (a checkpoint and its lane pointer; a batch of replies): every entry
    readable once it returns, by another store too, in one index commit; a rewrite of the
    same bytes and a large payload inside the batch as `put` does them."""
    store = PackedStore(root, large=1000)
    commits = []
    try:
        store.put("ws/p/x/a.ckpt", b"before")
        db = store._write_db
        assert db is not None
        db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
        items = [(f"ws/p/x/{i:064x}.ckpt", _data(str(i))) for i in range(40)]
        items += [("ws/p/x/a.ckpt", b"before"), ("ws/p/y/big.ckpt", _data("big", size=5000))]
        store.put_many(items)
        assert len(commits) <= 2  # the rows, and the new directory's id
        other = PackedStore(root)
        try:
            for name, data in items:
                assert other.get(name) == data
        finally:
            other.close()
        store.put_many([])
        store.put_many([("ws/p/x/a.ckpt", b"after")])
        assert store.get("ws/p/x/a.ckpt") == b"after"
    finally:
        store.close()


def _count_transactions(db) -> list[int]:
    """[write transactions] of `db` from here on: BEGIN ... COMMIT, or a write outside one."""
    state = {"open": False}
    count = [0]

    def traced(sql: str) -> None:
        if sql.startswith("BEGIN"):
            state["open"] = True
            count[0] += 1
        elif sql in ("COMMIT", "ROLLBACK"):
            state["open"] = False
        elif not state["open"] and sql.split(" ", 1)[0] in ("INSERT", "UPDATE", "DELETE"):
            count[0] += 1

    db.set_trace_callback(traced)
    return count


def test_a_new_directory_is_created_in_its_first_entrys_transaction(root):
    """A put under a directory the index does not have yet: the directory's row and the
    entry's in one write transaction (a cold run creates about one directory a call)."""
    store = PackedStore(root)
    try:
        store.put("ws/p/first/a.ckpt", b"a")  # the segment registered
        db = store._write_db
        assert db is not None
        count = _count_transactions(db)
        for i in range(3):
            store.put(f"ws/p/d{i}/{i:064x}.ckpt", _data(str(i)))
        assert count[0] == 3  # was 6: the directory's own transaction, then the entry's
        store.put_many([(f"ws/p/e{i}/x.ckpt", _data(str(i))) for i in range(3)])
        assert count[0] == 4
        store.put("ws/p/d0/again.ckpt", b"known")  # a known directory: the entry alone
        assert count[0] == 5
    finally:
        store.close()
    again = PackedStore(root)
    try:
        assert again.get("ws/p/d2/" + f"{2:064x}.ckpt") == _data("2")
        assert again.get("ws/p/e1/x.ckpt") == _data("1")
        assert again.names("ws/p/d0/") == [f"ws/p/d0/{0:064x}.ckpt", "ws/p/d0/again.ckpt"]
    finally:
        again.close()


def test_put_many_across_a_segment_rotation_loses_no_entry(root, tmp_path):
    """A batch whose appends retire the segment (sealed into blocks, its rows switched):
    the rows appended before are committed first, so the seal moves them too."""
    store = PackedStore(root, segment_limit=4000, seal_min=0)
    items = [(f"ws/p/s/l{i % 3}/{i:064x}.ckpt", _data(str(i), size=700)) for i in range(60)]
    try:
        for at in range(0, 60, 20):
            store.put_many(items[at : at + 20])
        for name, data in items:
            assert store.get(name) == data
    finally:
        store.close()
    again = PackedStore(root)
    try:
        for name, data in items:
            assert again.get(name) == data
    finally:
        again.close()


def test_large_payloads_are_content_addressed_objects(root, tmp_path):
    store = PackedStore(root, large=1000)
    try:
        big = _data("big", size=5000)
        store.put("ws/p/a/one.ckpt", big)
        store.put("ws/p/b/two.ckpt", big)  # the same bytes: one object
        assert store.get("ws/p/b/two.ckpt") == big
        objects = [f for f in _files(tmp_path / "cache") if "/objects/" in f]
        assert len(objects) == 1
        store.remove(["ws/p/a/one.ckpt"])
        assert store.compact().objects_removed == 0  # still named by two.ckpt
        store.remove(["ws/p/b/two.ckpt"])
        assert store.compact().objects_removed == 1
    finally:
        store.close()
    assert not [f for f in _files(tmp_path / "cache") if "/objects/" in f]


def test_a_damaged_record_is_returned_as_found_and_never_another_entry(root, tmp_path):
    store = PackedStore(root)
    store.put("ws/p/a.ckpt", b"A" * 100)
    store.put("ws/p/b.ckpt", b"B" * 100)
    store.close()
    (segment,) = (tmp_path / "cache" / "pack" / "segments").iterdir()
    data = bytearray(segment.read_bytes())
    where = data.index(b"a.ckpt")
    data[where] ^= 0xFF  # the record no longer names the entry asked for
    segment.write_bytes(bytes(data))
    again = PackedStore(root)
    try:
        assert again.get("ws/p/a.ckpt") == b""  # then the content's own digest rejects it
        assert again.get("ws/p/b.ckpt") == b"B" * 100
    finally:
        again.close()


def test_a_record_names_its_entry_by_directory_id_and_leaf(root, tmp_path):
    """The directory part of a name is stored once (`dirs`), not in every record; a
    record of another directory with the same leaf is never taken for the entry."""
    directory = "workspaces/p/steps/terms/" + "d" * 100
    store = PackedStore(root)
    store.put(f"{directory}/merge.ckpt", b"M" * 50)
    store.put(f"{directory}x/merge.ckpt", b"N" * 50)
    store.close()
    (segment,) = (tmp_path / "cache" / "pack" / "segments").iterdir()
    data = segment.read_bytes()
    assert directory.encode() not in data
    assert len(data) == 2 * (14 + len("merge.ckpt") + 50)
    assert [name for name, _ in segment_records(data)] == ["merge.ckpt", "merge.ckpt"]
    index = tmp_path / "cache" / "pack" / "index.sqlite"
    with contextlib.closing(sqlite3.connect(index)) as db, db:
        # the first entry's row pointed at the second's record (same leaf, other directory)
        db.execute("UPDATE entries SET offset = ? WHERE offset = 0", (len(data) // 2,))
    again = PackedStore(root)
    try:
        assert again.get(f"{directory}/merge.ckpt") == b""
        assert again.get(f"{directory}x/merge.ckpt") == b"N" * 50
    finally:
        again.close()


def test_records_of_the_earlier_format_are_still_read(root, tmp_path):
    """`RJPK` records (the whole name in each) written before records named their
    directory by id: read, checked against the name, compacted, and scanned."""
    store = PackedStore(root)
    store.put("ws/p/new.ckpt", b"new")
    store.close()
    (segment,) = (tmp_path / "cache" / "pack" / "segments").iterdir()
    name = b"ws/p/old.ckpt"
    old = struct.pack(">4sII", b"RJPK", len(name), 3) + name + b"old"
    offset = segment.stat().st_size
    with open(segment, "ab") as handle:
        handle.write(old)
    index = tmp_path / "cache" / "pack" / "index.sqlite"
    with contextlib.closing(sqlite3.connect(index)) as db, db:
        dir_id, seg_id = db.execute("SELECT dir, segment FROM entries").fetchone()
        db.execute(
            "INSERT INTO entries (dir, leaf, segment, offset, length, object, written)"
            " VALUES (?, 'old.ckpt', ?, ?, ?, NULL, 0)",
            (dir_id, seg_id, offset, len(old)),
        )
        db.execute(
            "INSERT INTO entries (dir, leaf, segment, offset, length, object, written)"
            " VALUES (?, 'other.ckpt', ?, ?, ?, NULL, 0)",
            (dir_id, seg_id, offset, len(old)),
        )
    assert [n for n, _ in segment_records(segment.read_bytes())] == ["new.ckpt", "ws/p/old.ckpt"]
    again = PackedStore(root)
    try:
        assert again.get("ws/p/old.ckpt") == b"old"
        assert again.get("ws/p/other.ckpt") == b""  # the record names another entry
        again.put("ws/p/old.ckpt", b"old")  # the same bytes: nothing written
        assert segment.stat().st_size == offset + len(old)
        done = again.compact(keep_ratio=1.0)
        assert done.torn_segments == 0
        assert again.get("ws/p/old.ckpt") == b"old" and again.get("ws/p/new.ckpt") == b"new"
    finally:
        again.close()


def test_compaction_keeps_every_live_entry_and_frees_the_rest(root, tmp_path):
    store = PackedStore(root, segment_limit=20_000)
    try:
        for version in range(5):
            for i in range(100):
                store.put(f"ws/p/s/{i}.ckpt", _data(str(i), version))
        store.remove([f"ws/p/s/{i}.ckpt" for i in range(0, 100, 2)])
    finally:
        store.close()
    before = sum(os.path.getsize(tmp_path / "cache" / f) for f in _files(tmp_path / "cache"))
    compactor = PackedStore(root, segment_limit=20_000)
    try:
        done = compactor.compact()
        assert done.segments_removed > 0 and done.bytes_freed > 0
        for i in range(100):
            expected = None if i % 2 == 0 else _data(str(i), 4)
            assert compactor.get(f"ws/p/s/{i}.ckpt") == expected
    finally:
        compactor.close()
    segments = tmp_path / "cache" / "pack" / "segments"
    after = sum(p.stat().st_size for p in segments.iterdir())
    assert after < before / 5


def test_compaction_leaves_a_live_writers_segment_alone(root, tmp_path):
    writer = PackedStore(root)
    compactor = PackedStore(root)
    try:
        for i in range(50):
            writer.put(f"ws/p/{i}.ckpt", _data(str(i)))
        writer.remove([f"ws/p/{i}.ckpt" for i in range(50)])  # nothing live in its segment
        assert compactor.compact().segments_removed == 0  # but its writer holds it
        writer.put("ws/p/late.ckpt", b"late")
        assert compactor.get("ws/p/late.ckpt") == b"late"
    finally:
        writer.close()
    try:
        assert compactor.compact().segments_removed == 1
        assert compactor.get("ws/p/late.ckpt") == b"late"
    finally:
        compactor.close()


def test_threads_writing_and_reading_at_once(root):
    store = PackedStore(root, segment_limit=64 << 10)  # many rotations
    errors: list[str] = []

    def work(t: int) -> None:
        for i in range(300):
            name = f"ws/p/t{t}/{i}.ckpt"
            store.put(name, _data(name))
            other = f"ws/p/t{(t + 1) % 8}/{i}.ckpt"
            got = store.get(other)
            if got is not None and got != _data(other):
                errors.append(other)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        for t in range(8):
            for i in range(300):
                name = f"ws/p/t{t}/{i}.ckpt"
                assert store.get(name) == _data(name)
    finally:
        store.close()


def _process_writer(path: str, tag: str, count: int) -> None:
    with FsRoot.open(path) as handle:
        store = PackedStore(handle, segment_limit=32 << 10)
        for i in range(count):
            name = f"ws/p/{tag}/{i}.ckpt"
            store.put(name, _data(name))
            store.put("ws/p/shared.ckpt", _data(tag, i))
        store.close()


def test_processes_writing_one_store(root, tmp_path):
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_process_writer, args=(str(tmp_path / "cache"), f"w{n}", 200))
        for n in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        assert worker.exitcode == 0
    store = PackedStore(root)
    try:
        for n in range(4):
            for i in range(200):
                name = f"ws/p/w{n}/{i}.ckpt"
                assert store.get(name) == _data(name)
        assert store.get("ws/p/shared.ckpt") in {_data(f"w{n}", 199) for n in range(4)}
    finally:
        store.close()


_KILLED_WRITER = """
import hashlib, sys
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore, segment_records

def data(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // 32 + 1))[:size]

with FsRoot.open(sys.argv[1]) as handle:
    store = PackedStore(handle, segment_limit=256 << 10)
    i = 0
    while True:
        name = f"ws/p/{i}.ckpt"
        store.put(name, data(name, 200 + (i * 37) % 4000))
        if i == 50:
            print("ready", flush=True)
        i += 1
"""


@pytest.mark.parametrize("seed", range(3))
def test_sigkill_mid_write_loses_no_indexed_entry(root, tmp_path, seed):
    """A writer killed at a random moment: every indexed entry reads back whole; the
    unindexed tail is reported by compaction and dropped with its segment."""
    path = str(tmp_path / "cache")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, path], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    for _ in range(seed * 2000):
        os.sched_yield()
    child.send_signal(signal.SIGKILL)
    child.wait()
    store = PackedStore(root)
    try:
        names = store.names("ws/p/")
        assert len(names) > 50
        for name in names:
            size = 200 + (int(name.rsplit("/", 1)[1].split(".")[0]) * 37) % 4000
            seed_bytes = hashlib.sha256(name.encode()).digest()
            assert store.get(name) == (seed_bytes * (size // 32 + 1))[:size]
        store.compact()  # runs against the dead writer's segments without error
        for name in names:
            assert store.get(name) is not None
    finally:
        store.close()


def test_a_torn_tail_is_reported(root, tmp_path):
    store = PackedStore(root)
    store.put("ws/p/a.ckpt", b"A" * 500)
    store.close()
    (segment,) = (tmp_path / "cache" / "pack" / "segments").iterdir()
    with open(segment, "ab") as handle:
        handle.write(b"RJPK\x00\x00\x00\x10\x00\x00\x10\x00ws/p/b.ck")  # cut mid-record
    again = PackedStore(root)
    try:
        done = again.compact(keep_ratio=0.0)
        assert done.torn_segments == 1 and done.torn_bytes == 21
        assert again.get("ws/p/a.ckpt") == b"A" * 500
    finally:
        again.close()


class PackedModel(RuleBasedStateMachine):
    """The store against a dict, through puts, removes, compactions and reopenings."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.mkdtemp()
        self.root = FsRoot.open(self.dir)
        self.store = PackedStore(self.root, large=600, segment_limit=4000)
        self.model: dict[str, bytes] = {}

    names = st.sampled_from([f"ws/p/{d}/{n}.ckpt" for d in "ab" for n in range(4)])

    @rule(name=names, size=st.integers(0, 1200), version=st.integers(0, 3))
    def put(self, name: str, size: int, version: int) -> None:
        data = _data(name, version, size)
        self.store.put(name, data)
        self.model[name] = data

    @rule(name=names)
    def remove(self, name: str) -> None:
        self.store.remove([name])
        self.model.pop(name, None)

    @rule()
    def compact(self) -> None:
        self.store.compact()

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = PackedStore(self.root, large=600, segment_limit=4000)

    @invariant()
    def agrees(self) -> None:
        for name in [f"ws/p/{d}/{n}.ckpt" for d in "ab" for n in range(4)]:
            assert self.store.get(name) == self.model.get(name)
        assert self.store.names("ws/p/") == sorted(self.model)

    def teardown(self) -> None:
        import shutil

        self.store.close()
        self.root.close()
        shutil.rmtree(self.dir, ignore_errors=True)


PackedModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPackedModel = PackedModel.TestCase


_KILLED_COMPACTOR = """
import sys
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore, segment_records

with FsRoot.open(sys.argv[1]) as handle:
    store = PackedStore(handle, segment_limit=64 << 10)
    print("ready", flush=True)
    store.compact()
    store.close()
print("done", flush=True)
"""


@pytest.mark.parametrize("seed", range(3))
def test_sigkill_mid_compaction_loses_nothing(root, tmp_path, seed):
    """A compaction killed at a random moment: every entry still reads back as last
    written, and the next compaction finishes the work."""
    store = PackedStore(root, segment_limit=64 << 10)
    expected: dict[str, bytes] = {}
    for version in range(4):
        for i in range(400):
            name = f"ws/p/{i % 7}/{i}.ckpt"
            expected[name] = _data(name, version, 200 + i % 300)
            store.put(name, expected[name])
    for i in range(0, 400, 3):
        name = f"ws/p/{i % 7}/{i}.ckpt"
        store.remove([name])
        del expected[name]
    store.close()
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_COMPACTOR, str(tmp_path / "cache")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    for _ in range((seed + 1) * 3000):
        os.sched_yield()
    child.send_signal(signal.SIGKILL)
    child.wait()
    again = PackedStore(root)
    try:
        assert again.names("ws/p/") == sorted(expected)
        for name, data in expected.items():
            assert again.get(name) == data
        again.compact()
        for name, data in expected.items():
            assert again.get(name) == data
    finally:
        again.close()


_LOOPING_WRITER = """
import hashlib, sys
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore, segment_records

def data(name, version):
    seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
    return (seed * 10)[:300]

with FsRoot.open(sys.argv[1]) as handle:
    store = PackedStore(handle, segment_limit=16 << 10)
    for version in range(int(sys.argv[2])):
        for i in range(60):
            name = f"ws/p/{i}.ckpt"
            store.put(name, data(name, version))
            if store.get(name) != data(name, version):
                print("mismatch", name, version, flush=True)
                sys.exit(1)
    store.close()
"""


def test_compaction_beside_a_writing_process(root, tmp_path):
    """A writer rewriting its entries (rotating small segments) while this process
    compacts again and again: the writer always reads back what it wrote, and at the end
    every entry holds its last version."""
    versions = 40
    child = subprocess.Popen(
        [sys.executable, "-c", _LOOPING_WRITER, str(tmp_path / "cache"), str(versions)],
        stdout=subprocess.PIPE,
        text=True,
    )
    compactor = PackedStore(root)
    compactions = 0
    try:
        while child.poll() is None:
            if compactor.exists:
                done = compactor.compact(keep_ratio=0.9)
                compactions += done.segments_removed > 0
        out, _ = child.communicate()
        assert child.returncode == 0, out
        for i in range(60):
            name = f"ws/p/{i}.ckpt"
            assert compactor.get(name) == _data(name, versions - 1)
        compactor.compact()
        for i in range(60):
            name = f"ws/p/{i}.ckpt"
            assert compactor.get(name) == _data(name, versions - 1)
    finally:
        compactor.close()
    assert compactions > 0


def test_a_lane_read_in_one_query_serves_its_loads_and_sees_later_writes(root):
    """`read_lane` (docs/internals.md "Packed store"): one index query for every directory
    under a lane; the loads that follow need none, and what any store writes afterwards
    (this one, or another process's) is still found."""
    lane = "workspaces/p/steps/s/a-1"
    names = [f"{lane}/latest.extract", f"{lane}/sid/dd/merge.ckpt"] + [
        f"{lane}/sid/dd/extract/c{i}.ckpt" for i in range(5)
    ]
    writer = PackedStore(root)
    for name in names:
        writer.put(name, _data(name))
    writer.put("workspaces/p/steps/s/b-2/latest.extract", _data("other"))
    store = PackedStore(root)
    store.read_lane(lane)
    statements: list[str] = []
    store._reader().set_trace_callback(statements.append)
    assert [store.get(name) for name in names] == [_data(name) for name in names]
    assert [s for s in statements if "entries" in s] == []
    other = PackedStore(root)  # another process, as far as the index is concerned
    other.put(f"{lane}/sid/dd/extract/new.ckpt", _data("new"))
    other.put(names[0], _data(names[0], 1))
    assert store.get(f"{lane}/sid/dd/extract/new.ckpt") == _data("new")
    assert store.get(names[0]) in (_data(names[0]), _data(names[0], 1))
    store.put(names[1], _data(names[1], 2))  # its own write drops what it held
    assert store.get(names[1]) == _data(names[1], 2)
    assert store.get(f"{lane}/sid/dd/extract/absent.ckpt") is None
    for s in (writer, store, other):
        s.close()


def test_the_directory_ids_a_store_holds_are_bounded(root, monkeypatch):
    """A store remembered the id of every directory it met until it closed (a few per
    lane, about 1.5 KB a document of a run; issue 29: peak RSS); now the most recently
    used `_KNOWN_DIRS` only. A directory let go is looked up in the index again, once per
    lane read (not once per entry), and reads and writes there are what they were."""
    from runjournal.adapters import packed_store

    monkeypatch.setattr(packed_store, "_KNOWN_DIRS", 4)
    lanes = [f"workspaces/p/steps/s/doc-{i}" for i in range(30)]
    names = {
        lane: [f"{lane}/latest.extract"] + [f"{lane}/sid/dd/extract/c{j}.ckpt" for j in range(6)]
        for lane in lanes
    }
    writer = PackedStore(root)
    try:
        for lane in lanes:
            writer.put_many((name, _data(name)) for name in names[lane])
        assert len(writer._dir_ids) <= 4
        first = names[lanes[0]]  # directories let go long ago: found in the index again
        assert writer.get(first[1]) == _data(first[1])
        writer.put(first[1], _data(first[1]))  # the same bytes: nothing written
        writer.put(first[2], _data(first[2], 1))
        assert writer.get(first[2]) == _data(first[2], 1)
        assert len(writer._dir_ids) <= 4
    finally:
        writer.close()
    reader = PackedStore(root)
    try:
        reader.read_lane(lanes[0])
        statements: list[str] = []
        reader._reader().set_trace_callback(statements.append)
        for lane in lanes:
            reader.read_lane(lane)
            for name in names[lane]:
                expected = _data(name, 1) if name == first[2] else _data(name)
                assert reader.get(name) == expected
        # one query a lane (`read_lane`), none a load, though the lanes' directories are
        # far more than the store remembers
        index = [s[:90] for s in statements if "dirs" in s or "entries" in s]
        assert len(index) == len(lanes), index
        assert len(reader._dir_ids) <= 4
    finally:
        reader.close()
