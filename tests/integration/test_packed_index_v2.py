"""Index schema 2 and sealed segments of the packed store (docs/internals.md "Packed
store", issue 29: "cache bytes at most 3x the corpus"): names packed and kept once,
records compressed in blocks when their writer retires the segment, bytes per entry
bounded on a generated cache; an index of schema 1 (and its `RJPK`/`RJPL` records) still
read, and migrated by the first writer; a sealing killed at any moment loses nothing."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import (
    PackedStore,
    _pack_path,
    _unpack_path,
    segment_records,
)


def _hex(seed: str, size: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:size]


@pytest.fixture
def root(tmp_path):
    with FsRoot.open(tmp_path / "cache", create=True) as handle:
        yield handle


def _checkpoint_names(lanes: int, chunks: int) -> list[str]:
    """Names as the runner makes them: a lane's pointer, its scope's extracts, a merge."""
    names = []
    for lane in range(lanes):
        base = f"workspaces/glossary/steps/terms/docs__page{lane}.rst-{_hex(str(lane), 8)}"
        scope = f"{base}/{_hex(f's{lane}', 32)}/{_hex(f'd{lane}', 64)}"
        names.append(f"{base}/latest.extract")
        names += [f"{scope}/extract/{_hex(f'{lane}/{c}', 64)}.ckpt" for c in range(chunks)]
        names.append(f"{scope}/{_hex(f'l{lane}', 64)}/merge.ckpt")
    return names


def test_bytes_per_entry_stay_bounded(root, tmp_path):
    """The index and the records' framing per entry, on 1,640 runner-shaped names. Schema
    1 (names as text, the directory twice) took 150 index bytes per entry and 80 of
    record framing; schema 2 92 and 52."""
    names = _checkpoint_names(lanes=40, chunks=39)
    payload = 100
    store = PackedStore(root, seal_min=None)  # the records as appended
    try:
        for name in names:
            store.put(name, b"p" * payload)
    finally:
        store.close()
    pack = tmp_path / "cache" / "pack"
    index = sum(p.stat().st_size for p in pack.glob("index.sqlite*"))
    (segment,) = (pack / "segments").iterdir()
    framing = segment.stat().st_size - payload * len(names)
    assert index / len(names) < 110, index / len(names)
    assert framing / len(names) < 56, framing / len(names)
    again = PackedStore(root)
    try:
        assert all(again.get(n) == b"p" * payload for n in names[::97])
        assert [n for n, _ in segment_records(segment.read_bytes())][:2] == [
            "latest.extract",
            names[1].rsplit("/", 1)[1],
        ]
    finally:
        again.close()


@given(
    st.lists(
        st.one_of(
            st.text(alphabet="ab\x01\x02.-_é/", max_size=6),
            st.sampled_from(
                [_hex("x", 64), _hex("y", 32) + ".ckpt", _hex("z", 34), _hex("w", 31), "0", ""]
            ),
        ),
        max_size=6,
    )
)
def test_packed_paths_round_trip_and_keep_directories_apart(parts):
    path = "/".join(parts)
    assert _unpack_path(_pack_path(path)) == path
    if path:
        child = _pack_path(f"{path}/{_hex('c', 64)}.ckpt")
        key = _pack_path(path)
        assert key + b"/" <= child < key + b"0"


# Schema 1, as runjournal wrote it before schema 2 (the old `_create_schema`).
_V1 = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('schema', 1);
CREATE TABLE IF NOT EXISTS dirs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS entries (
    dir INTEGER NOT NULL,
    leaf TEXT NOT NULL,
    segment INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    object TEXT,
    written INTEGER NOT NULL,
    PRIMARY KEY (dir, leaf)
) WITHOUT ROWID;
COMMIT;
"""


def _old_cache(tmp_path, entries: dict[str, bytes]) -> None:
    """A packed store as the code before schema 2 left it: a schema 1 index, one segment
    of `RJPL` records (and one `RJPK`: the first format), a second segment id retired."""
    pack = tmp_path / "cache" / "pack"
    (pack / "segments").mkdir(parents=True)
    seg_name = "18eee4d550a62eaa-a21353a9af4b.seg"
    data = bytearray()
    with contextlib.closing(sqlite3.connect(pack / "index.sqlite")) as db:
        db.executescript(_V1)
        db.execute("INSERT INTO segments (name) VALUES ('gone.seg')")
        db.execute("DELETE FROM segments")  # id 1 retired: never to be reused
        seg_id = db.execute("INSERT INTO segments (name) VALUES (?)", (seg_name,)).lastrowid
        for i, (name, value) in enumerate(entries.items()):
            directory, _, leaf = name.rpartition("/")
            db.execute("INSERT OR IGNORE INTO dirs (name) VALUES (?)", (directory,))
            (dir_id,) = db.execute("SELECT id FROM dirs WHERE name = ?", (directory,)).fetchone()
            if i == 0:
                encoded = name.encode()
                record = struct.pack(">4sII", b"RJPK", len(encoded), len(value)) + encoded
            else:
                encoded = leaf.encode()
                record = struct.pack(">4sIHI", b"RJPL", dir_id, len(encoded), len(value))
                record += encoded
            record += value
            db.execute(
                "INSERT INTO entries VALUES (?, ?, ?, ?, ?, NULL, ?)",
                (dir_id, leaf, seg_id, len(data), len(record), 1_000 + i),
            )
            data += record
        db.commit()
    (pack / "segments" / seg_name).write_bytes(bytes(data))


def _schema(tmp_path) -> int:
    with contextlib.closing(sqlite3.connect(tmp_path / "cache" / "pack" / "index.sqlite")) as db:
        return db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]


def test_an_index_of_schema_1_is_read_then_migrated_by_a_writer(root, tmp_path):
    names = _checkpoint_names(lanes=3, chunks=4)
    entries = {n: f"value of {n}".encode() for n in names}
    _old_cache(tmp_path, entries)
    lane = names[0].rsplit("/", 1)[0]

    reader = PackedStore(root)
    try:
        assert all(reader.get(n) == v for n, v in entries.items())
        assert reader.names("workspaces/") == sorted(names)
        assert [e.name for e in reader.entries(lane + "/")] == sorted(
            n for n in names if n.startswith(lane + "/")
        )
        assert reader.children(lane) == sorted(
            {n[len(lane) + 1 :].split("/")[0] for n in names if n.startswith(lane + "/")}
        )
        reader.read_lane(lane)
        assert reader.get(names[1]) == entries[names[1]]
        assert reader.get(lane + "/missing.ckpt") is None
    finally:
        reader.close()
    assert _schema(tmp_path) == 1  # reading changes nothing

    writer = PackedStore(root)
    watcher = PackedStore(root)
    other = PackedStore(root)
    try:
        assert watcher.get(names[2]) == entries[names[2]]  # read schema 1
        assert other.get(names[2]) == entries[names[2]]
        writer.put("workspaces/glossary/steps/terms/new/latest.extract", b"new")
        assert _schema(tmp_path) == 3  # schema 1 -> 2 -> 3 (`entries.facts`)
        # a store that read schema 1 before the migration reads on
        assert watcher.get(names[3]) == entries[names[3]]
        assert watcher.get("workspaces/glossary/steps/terms/new/latest.extract") == b"new"
        # ... an entry of a directory it knows, in a segment sealed since, too
        sealer = PackedStore(root, seal_min=0)
        late = names[2].rsplit("/", 1)[0] + "/" + _hex("late", 64) + ".ckpt"
        sealer.put(late, b"late " * 40)
        sealer.close()
        assert other.get(late) == b"late " * 40
        assert all(writer.get(n) == v for n, v in entries.items())
        assert sorted(e.written_ns for e in writer.entries("workspaces/"))[0] == 1_000
        writer.put(names[0], entries[names[0]])  # the same bytes: nothing written
        seg = tmp_path / "cache" / "pack" / "segments"
        assert len(list(seg.iterdir())) == 3  # the old one, the writer's, the sealed one
        assert writer.remove([names[1]]) == 1
        done = writer.compact(keep_ratio=1.0)
        assert done.segments_removed >= 1 and done.torn_segments == 0
    finally:
        writer.close()
        watcher.close()
        other.close()
    again = PackedStore(root)
    try:
        assert again.get(names[1]) is None
        assert all(again.get(n) == v for n, v in entries.items() if n != names[1])
        with contextlib.closing(
            sqlite3.connect(tmp_path / "cache" / "pack" / "index.sqlite")
        ) as db:
            ids = [i for (i,) in db.execute("SELECT id FROM segments")]
        assert 1 not in ids and min(ids) > 2  # a retired id is never reused
    finally:
        again.close()
    assert not any(p.name.endswith(".new") for p in (tmp_path / "cache" / "pack").iterdir())
    assert os.listdir(tmp_path / "cache" / "pack" / "segments")


def test_lane_pointers_are_binary_and_text_pointers_still_read(root):
    """A `latest.<stage>` pointer is 49 or 81 bytes (was 99 or 131 of text); a text
    pointer written before is read, and the recorder leaves it while it names the scope."""
    from runjournal.adapters.checkpoints import Workspace, _pointer_bytes, _pointer_of
    from runjournal.domain.ports import Stage, StoreScope

    with_d = StoreScope(_hex("s", 32), _hex("d", 64), _hex("l", 64))
    without = StoreScope(_hex("s", 32), "", _hex("l", 64))
    assert [len(_pointer_bytes(s)) for s in (with_d, without)] == [81, 49]
    assert _pointer_of(_pointer_bytes(with_d)) == with_d
    assert _pointer_of(_pointer_bytes(without)) == without
    assert _pointer_of(b"\x00" + b"x" * 10) is None
    odd = StoreScope(_hex("s", 32), "", "")  # no lane identity: not a pointer, as before
    assert _pointer_of(_pointer_bytes(odd)) is None
    store = PackedStore(root)
    try:
        workspace = Workspace.in_cache(root, "p", packed=store)
        name = Workspace.pointer_name("terms", "a.md", Stage.EXTRACT)
        text = f"{with_d.step_identity}/{with_d.dependencies}/{with_d.lane_identity}"
        workspace.write(name, text.encode(), durable=False)
        assert workspace.latest_scope("terms", "a.md", Stage.EXTRACT) == with_d
    finally:
        store.close()


def _envelope_like(name: str) -> bytes:
    """What a checkpoint record holds: digests shared by a lane's records (the shared
    entry's, the lane identity, D), one of its own, and a small JSON payload."""
    lane = name.split("/")[4]
    shared = hashlib.sha256(lane.encode()).digest() * 3
    own = hashlib.sha256(name.encode()).digest()
    words = ",".join(f'"term{int.from_bytes(own[i : i + 1], "big") % 40}":{i}' for i in range(12))
    return b"RJCK\x00\x03" + shared + own + ("{" + words + "}").encode() + own


def test_a_retired_segment_is_sealed_smaller_and_read_whole(root, tmp_path):
    """The segment a writer retires is rewritten as zstd blocks: every entry reads back
    (one by one, by lane, after a reopen), overwrites and compaction go on, and the
    records are still scanned. Bytes per entry on disk are bounded (appended: 349; sealed:
    109)."""
    names = _checkpoint_names(lanes=40, chunks=39)
    expected = {n: _envelope_like(n) for n in names}
    store = PackedStore(root)
    try:
        for name, data in expected.items():
            store.put(name, data)
    finally:
        store.close()
    pack = tmp_path / "cache" / "pack"
    (segment,) = (pack / "segments").iterdir()
    data = segment.read_bytes()
    assert data[:4] == b"RJPZ"
    assert len(data) / len(names) < 160, len(data) / len(names)
    assert sorted(n for n, _ in segment_records(data)) == sorted(n.rsplit("/", 1)[1] for n in names)
    again = PackedStore(root)
    try:
        again.read_lane(names[0].rsplit("/", 1)[0])
        assert all(again.get(n) == v for n, v in expected.items())
        for name in names[::3]:
            expected[name] = _envelope_like(name + "/2")
            again.put(name, expected[name])
        assert all(again.get(n) == v for n, v in expected.items())
    finally:
        again.close()
    third = PackedStore(root)
    try:
        done = third.compact(keep_ratio=1.0)
        assert done.torn_segments == 0 and done.segments_removed >= 1
        assert third.names("workspaces/") == sorted(names)
        assert all(third.get(n) == v for n, v in expected.items())
    finally:
        third.close()
    fourth = PackedStore(root)
    try:
        assert all(fourth.get(n) == v for n, v in expected.items())
    finally:
        fourth.close()


_SEALER = """
import hashlib, sys
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore

def data(name, round):
    seed = hashlib.sha256(f"{name}/{round}".encode()).digest()
    return seed + b"x" * 200 + seed

with FsRoot.open(sys.argv[1]) as handle:
    round = 0
    while True:
        store = PackedStore(handle, seal_min=0)
        for i in range(300):
            name = f"ws/p/{i % 5}/{i}.ckpt"
            store.put(name, data(name, round))
        if round == 1:
            print("ready", flush=True)
        store.close()  # seals
        round += 1
"""


@pytest.mark.parametrize("seed", range(4))
def test_sigkill_mid_seal_loses_nothing(root, tmp_path, seed):
    """A writer killed at a random moment of writing or sealing: every indexed entry
    reads back as one of the rounds wrote it; compaction then runs and keeps it."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SEALER, str(tmp_path / "cache")], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    for _ in range((seed + 1) * 4000):
        os.sched_yield()
    child.send_signal(signal.SIGKILL)
    child.wait()

    def valid(name: str, value: bytes | None) -> bool:
        if value is None or len(value) != 264:
            return False
        return any(
            value == (s := hashlib.sha256(f"{name}/{r}".encode()).digest()) + b"x" * 200 + s
            for r in range(200)
        )

    store = PackedStore(root)
    try:
        names = store.names("ws/p/")
        assert len(names) == 300
        assert all(valid(n, store.get(n)) for n in names)
        store.compact()
        assert all(valid(n, store.get(n)) for n in names)
    finally:
        store.close()


def test_payloads_are_left_to_the_blocks_of_a_sealing_store(root, tmp_path):
    """With a store that seals its segments, the recorder stores payloads as they are
    (they compress better together); a store that does not seal keeps zstd frames. Both
    load back, before and after the sealing."""
    from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
    from runjournal.domain.decisions import CheckpointState, Stage
    from runjournal.domain.identity import LaneComponents
    from runjournal.domain.ports import CheckpointKey
    from support.checkpoint_records import CODEC, record_maker

    make_record = record_maker(LaneComponents(_hex("a", 64), _hex("b", 64), *[""] * 5))
    big = b'{"terms":[' + b'"repeated term",' * 500 + b'"end"]}'
    for seal_min, frame in ((0, False), (None, True)):
        packed = PackedStore(root, seal_min=seal_min)
        workspace = Workspace.in_cache(root, f"p{seal_min}", packed=packed)
        keys = [
            CheckpointKey("terms", "a.md", Stage.EXTRACT, _hex(f"{seal_min}{i}", 64))
            for i in range(30)
        ]
        try:
            recorder = CheckpointRecorder(workspace)
            for key in keys:
                recorder.write(key, make_record(big))
            data = packed.get(f"workspaces/p{seal_min}/" + Workspace.checkpoint_name(keys[0]))
            assert data is not None and bool(data[10] & 0x01) is frame  # flag: a zstd frame
            assert (len(data) < len(big)) is frame
            loader = CheckpointLoader(workspace)
            assert all(loader.load(k, CODEC).record == make_record(big) for k in keys)
        finally:
            packed.close()
        again = PackedStore(root)
        try:
            loader = CheckpointLoader(Workspace.in_cache(root, f"p{seal_min}", packed=again))
            for key in keys:
                loaded = loader.load(key, CODEC)
                assert loaded.state is CheckpointState.PRESENT
                assert loaded.record == make_record(big)
        finally:
            again.close()


def _sealed_flags(tmp_path) -> list[int]:
    with contextlib.closing(sqlite3.connect(tmp_path / "cache" / "pack" / "index.sqlite")) as db:
        return [s for (s,) in db.execute("SELECT sealed FROM segments ORDER BY id")]


def test_compaction_seals_what_a_killed_writer_left_and_leaves_what_does_not_shrink(root, tmp_path):
    """A segment its writer never sealed (killed: here a store that does not seal) is
    copied by the next compaction and the copy sealed; a segment its writer judged not
    worth sealing (random bytes) is marked so and left alone by compaction."""
    names = _checkpoint_names(lanes=10, chunks=20)
    expected = {n: _envelope_like(n) for n in names}
    store = PackedStore(root, seal_min=None)
    for name, data in expected.items():
        store.put(name, data)
    store.close()
    assert _sealed_flags(tmp_path) == [0]
    noise = {f"ws/noise/{i}.bin": os.urandom(1000) for i in range(100)}
    store = PackedStore(root)
    for name, data in noise.items():
        store.put(name, data)
    store.close()
    assert _sealed_flags(tmp_path) == [0, 2]  # judged: random bytes do not shrink
    store = PackedStore(root)
    try:
        done = store.compact()
        assert done.segments_removed == 1 and done.records_moved == len(names)
    finally:
        store.close()
    assert _sealed_flags(tmp_path) == [2, 1]
    store = PackedStore(root)
    try:
        assert store.compact().segments_removed == 0  # nothing left to seal
        assert all(store.get(n) == v for n, v in {**expected, **noise}.items())
    finally:
        store.close()


class SealingModel(RuleBasedStateMachine):
    """A store that seals every segment it retires (rotation every 4,000 bytes, every
    reopen), against a dict, through puts, removes, compactions and reopenings."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.root = FsRoot.open(self.dir)
        self.store = self._open()
        self.model: dict[str, bytes] = {}

    def _open(self) -> PackedStore:
        return PackedStore(self.root, large=3000, segment_limit=4000, seal_min=0)

    names = st.sampled_from([f"ws/p/{d}/{n:064x}.ckpt" for d in "ab" for n in range(4)])

    @rule(name=names, size=st.integers(0, 1200), version=st.integers(0, 3))
    def put(self, name: str, size: int, version: int) -> None:
        seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
        data = (seed * (size // 32 + 1))[:size]
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
        self.store = self._open()

    @invariant()
    def agrees(self) -> None:
        for name in [f"ws/p/{d}/{n:064x}.ckpt" for d in "ab" for n in range(4)]:
            assert self.store.get(name) == self.model.get(name)
        assert self.store.names("ws/p/") == sorted(self.model)

    def teardown(self) -> None:
        self.store.close()
        self.root.close()
        shutil.rmtree(self.dir, ignore_errors=True)


SealingModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSealingModel = SealingModel.TestCase


def test_a_cache_written_before_schema_2_is_read_then_written(tmp_path):
    """`tests/fixtures/packed-v1.tar.gz`: a cache the code before index schema 2 wrote
    (`tests/fixtures/make_packed_v1.py`, run on that code): a schema 1 index, `RJPL`
    records, envelope version 3 with zstd frames, text lane pointers. Every checkpoint
    loads; a new one migrates the index; all load again, after a compaction too."""
    from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
    from runjournal.domain.decisions import CheckpointState, Stage, StageDigests
    from runjournal.domain.identity import LaneComponents, step_identity
    from runjournal.domain.ports import CheckpointKey, CheckpointRecord, StoreScope
    from support.fixture_archives import unpack_fixture

    unpack_fixture("packed-v1.tar.gz", tmp_path)
    components = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "ab"), *[""] * 5)
    sid = step_identity(components)

    def payload(i: int) -> bytes:
        return ('{"terms":[' + ",".join(f'"term {i} {j}"' for j in range(i * 40)) + "]}").encode()

    def record(p: bytes, lid: str, dep: str) -> CheckpointRecord:
        return CheckpointRecord(
            codec_id="terms:extract:v1",
            lane_identity=lid,
            digests=StageDigests(components, "", dep),
            output_sha256=hashlib.sha256(p).hexdigest(),
            payload=p,
            warnings=[],
            provenance=None,
        )

    expected = {}
    for lane_no in range(3):
        lane = f"docs/page{lane_no}.md"
        lid = hashlib.sha256(lane.encode()).hexdigest()
        dep = hashlib.sha256(b"d" + lane.encode()).hexdigest()
        for i in range(6):
            chunk = hashlib.sha256(f"{lane}/{i}".encode()).hexdigest()
            key = CheckpointKey("terms", lane, Stage.EXTRACT, chunk, StoreScope(sid, dep, lid))
            expected[key] = record(payload(i), lid, dep)

    def check(root: FsRoot) -> None:
        packed = PackedStore(root)
        try:
            workspace = Workspace.in_cache(root, "glossary", packed=packed)
            loader = CheckpointLoader(workspace)
            for key, want in expected.items():
                loaded = loader.load(key, "terms:extract:v1")
                assert loaded.state is CheckpointState.PRESENT, key
                assert loaded.record == want
                assert workspace.latest_scope(key.step, key.lane, Stage.EXTRACT) == key.scope
        finally:
            packed.close()

    with FsRoot.open(tmp_path / "cache") as root:
        check(root)
        assert _schema(tmp_path) == 1
        packed = PackedStore(root)
        try:
            recorder = CheckpointRecorder(Workspace.in_cache(root, "glossary", packed=packed))
            key = next(iter(expected))
            new_key = CheckpointKey(key.step, "docs/new.md", key.stage, key.chunk, key.scope)
            recorder.write(new_key, expected[key])
            recorder.sync()
        finally:
            packed.close()
        assert _schema(tmp_path) == 3  # schema 1 -> 2 -> 3 (`entries.facts`)
        check(root)
        packed = PackedStore(root)
        try:
            packed.compact(keep_ratio=1.0)
        finally:
            packed.close()
        check(root)
