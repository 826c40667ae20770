"""Decision facts in the packed index (index schema 3, docs/internals.md "Decision facts
in the index"): each checkpoint's header kept in its index row, a lane decided from the
rows when the loader trusts them (`input_check = "stat"`), reading only the payloads it
uses; records without facts (index schema 2, `tests/fixtures/packed-v2.tar.gz`) read as
before; a damaged record still detected where it is read."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path

import msgspec
import pytest
from runjournal.adapters import checkpoints
from runjournal.adapters.checkpoints import (
    CheckpointLoader,
    CheckpointRecorder,
    Workspace,
    envelope_facts,
)
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore, _pack_path
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents, sequence_digest, step_identity
from runjournal.domain.llm import LLMUsage
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, StoreScope
from support.fixture_archives import unpack_fixture

COMPONENTS = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "ab"), *[""] * 5)
SID = step_identity(COMPONENTS)


def _record(stage: str, payload: bytes, lid: str, stage_input: str, dep: str) -> CheckpointRecord:
    """What `tests/fixtures/make_packed_v2.py` writes."""
    return CheckpointRecord(
        codec_id=f"terms:{stage}:v1",
        lane_identity=lid,
        digests=StageDigests(COMPONENTS, stage_input, dep),
        output_sha256=hashlib.sha256(payload).hexdigest(),
        payload=payload,
        warnings=["w"] if stage == "extract" else [],
        provenance=None,
        usage=LLMUsage(calls=1, prompt_tokens=3) if stage == "extract" else None,
    )


def _lane(lane_no: int) -> tuple[list[CheckpointKey], list[CheckpointRecord]]:
    """The keys and records of one lane of the fixture (three extracts, merge, normalize)."""
    lane = f"docs/page{lane_no}.md"
    lid = hashlib.sha256(lane.encode()).hexdigest()
    dep = hashlib.sha256(b"d" + lane.encode()).hexdigest()
    scope = StoreScope(SID, dep, lid)
    keys, records, outputs = [], [], []
    for i in range(3):
        chunk = hashlib.sha256(f"{lane}/{i}".encode()).hexdigest()
        r = _record("extract", f'["{lane} {i}"]'.encode(), lid, chunk, dep)
        keys.append(CheckpointKey("terms", lane, Stage.EXTRACT, chunk, scope))
        records.append(r)
        outputs.append(r.output_sha256)
    merge = _record("merge", f'["{lane}"]'.encode(), lid, sequence_digest(outputs), dep)
    keys.append(CheckpointKey("terms", lane, Stage.MERGE, "", scope))
    records.append(merge)
    norm = _record("normalize", b'{"n":1}', lid, merge.output_sha256, dep)
    keys.append(CheckpointKey("terms", lane, Stage.NORMALIZE, "", scope))
    records.append(norm)
    return keys, records


CODECS = ["terms:extract:v1"] * 3 + ["terms:merge:v1", "terms:normalize:v1"]
PAYLOADS = [False] * 4 + [True]  # a no-op resume uses the normalize's payload only


def _without_payload(record: CheckpointRecord, used: bool) -> CheckpointRecord:
    return record if used else msgspec.structs.replace(record, payload=b"")


class _Counts:
    """Records read (`PackedStore.read_found`) and trailing digests checked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read = 0
        self.digests = 0
        real_read, real_digest = PackedStore.read_found, checkpoints._scope_digest

        def read(store, rows):  # type: ignore[no-untyped-def]
            self.read += sum(row is not None for row in rows)
            return real_read(store, rows)

        def digest(key, body):  # type: ignore[no-untyped-def]
            self.digests += 1
            return real_digest(key, body)

        monkeypatch.setattr(PackedStore, "read_found", read)
        monkeypatch.setattr(checkpoints, "_scope_digest", digest)


def _write_lanes(root: FsRoot, store: PackedStore, lanes: range) -> None:
    recorder = CheckpointRecorder(Workspace.in_cache(root, "glossary", packed=store))
    for lane_no in lanes:
        keys, records = _lane(lane_no)
        for key, record in zip(keys, records, strict=True):
            recorder.write(key, record)
    recorder.sync()


def _load(root: FsRoot, lane_no: int, *, trust: bool) -> list[CheckpointRecord] | None:
    store = PackedStore(root)
    try:
        loader = CheckpointLoader(Workspace.in_cache(root, "glossary", packed=store))
        if trust:
            loader.trust_index_facts()
        keys, _ = _lane(lane_no)
        return loader.load_lane(keys, CODECS, PAYLOADS)
    finally:
        store.close()


def _expected(lane_no: int) -> list[CheckpointRecord]:
    _, records = _lane(lane_no)
    return [_without_payload(r, used) for r, used in zip(records, PAYLOADS, strict=True)]


def _facts_rows(cache: Path) -> list[bytes | None]:
    index = cache / "pack" / "index.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
        return [row[0] for row in db.execute("SELECT facts FROM entries ORDER BY written")]


def test_a_trusted_lane_is_decided_from_its_rows_reading_only_the_normalize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        store = PackedStore(root, seal_min=None)
        try:
            _write_lanes(root, store, range(2))
        finally:
            store.close()
        counts = _Counts(monkeypatch)
        assert _load(root, 0, trust=True) == _expected(0)
        assert (counts.read, counts.digests) == (1, 1)  # the normalize, whose payload is used
        assert _load(root, 1, trust=False) == _expected(1)
        assert (counts.read, counts.digests) == (1 + 5, 1 + 5)  # `verify`: every record


def test_facts_are_kept_through_sealing_and_compaction(tmp_path: Path) -> None:
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        store = PackedStore(root, seal_min=1)  # every retired segment sealed
        try:
            _write_lanes(root, store, range(2))
        finally:
            store.close()
        store = PackedStore(root, seal_min=1)
        try:
            store.compact(keep_ratio=1.0)
        finally:
            store.close()
        assert _load(root, 0, trust=True) == _expected(0)
        assert _load(root, 1, trust=False) == _expected(1)
    facts = [f for f in _facts_rows(tmp_path / "cache") if f is not None]
    assert len(facts) == 10  # every envelope's; the pointers and shared entries have none


def test_a_rewrite_without_facts_clears_them(tmp_path: Path) -> None:
    keys, _ = _lane(0)
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        store = PackedStore(root, seal_min=None)
        try:
            _write_lanes(root, store, range(1))
            name = "workspaces/glossary/" + Workspace.checkpoint_name(keys[0])
            data = store.get(name)
            assert data is not None
            [row] = store.lookup_many([name])
            assert row is not None and row.facts == envelope_facts(data)
            store.put(name, data)  # the same bytes, without facts (another writer's)
            [row] = store.lookup_many([name])
            assert row is not None and row.facts is None
        finally:
            store.close()
        # a record without facts is read and checked as before, trusted or not
        assert _load(root, 0, trust=True) == _expected(0)


def _flip_in_segment(cache: Path, name: str, at_end: int) -> None:
    """Flip one byte of `name`'s record where it lies (an unsealed segment), `at_end`
    bytes before the record's end; its index row (and facts) left as they are."""
    directory, _, leaf = name.rpartition("/")
    index = cache / "pack" / "index.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
        segment, offset, length, sealed = db.execute(
            "SELECT s.name, e.offset, e.length, s.sealed FROM entries e JOIN dirs d"
            " ON d.id = e.dir JOIN segments s ON s.id = e.segment"
            " WHERE d.name = ? AND e.leaf = ?",
            (_pack_path(directory), _pack_path(leaf)),
        ).fetchone()
    assert not sealed
    with open(cache / "pack" / "segments" / segment, "r+b") as handle:
        handle.seek(offset + length - at_end)
        byte = handle.read(1)
        handle.seek(offset + length - at_end)
        handle.write(bytes([byte[0] ^ 0x01]))


def test_a_damaged_record_is_detected_where_it_is_read(tmp_path: Path) -> None:
    keys, _ = _lane(0)
    cache = tmp_path / "cache"
    with FsRoot.open(cache, create=True) as root:
        store = PackedStore(root, seal_min=None)
        try:
            _write_lanes(root, store, range(1))
        finally:
            store.close()
        # an extract's payload byte: its facts decide a trusted lane (the payload is not
        # used), `verify` reads it and finds it damaged, and so does a load that uses it
        extract = "workspaces/glossary/" + Workspace.checkpoint_name(keys[1])
        _flip_in_segment(cache, extract, at_end=33)
        assert _load(root, 0, trust=True) == _expected(0)
        assert _load(root, 0, trust=False) is None
        store = PackedStore(root)
        try:
            loader = CheckpointLoader(Workspace.in_cache(root, "glossary", packed=store))
            loader.trust_index_facts()
            assert loader.load(keys[1], CODECS[1]).state is CheckpointState.CORRUPT
        finally:
            store.close()
        # the normalize's payload, used: trusted or not, the lane is not reused as a whole
        normalize = "workspaces/glossary/" + Workspace.checkpoint_name(keys[4])
        _flip_in_segment(cache, normalize, at_end=33)
        assert _load(root, 0, trust=True) is None


def test_a_cache_written_before_schema_3_is_decided_from_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tests/fixtures/packed-v2.tar.gz` (`tests/fixtures/make_packed_v2.py`, run on the
    code before index schema 3): its records have no facts, so a trusting loader reads
    and checks each as before; a writer migrates the index to schema 3 and the lane it
    writes then is decided from its rows, the old ones still from their records."""
    unpack_fixture("packed-v2.tar.gz", tmp_path)
    cache = tmp_path / "cache"

    def schema() -> int:
        index = cache / "pack" / "index.sqlite"
        with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
            return int(db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0])

    assert schema() == 2
    with FsRoot.open(cache) as root:
        counts = _Counts(monkeypatch)
        for lane_no in range(2):
            assert _load(root, lane_no, trust=True) == _expected(lane_no)
        assert counts.read == 10  # every record, as before
        assert schema() == 2  # a reader migrates nothing
        store = PackedStore(root, seal_min=None)
        try:
            _write_lanes(root, store, range(2, 3))
        finally:
            store.close()
        assert schema() == 3
        counts.read = 0
        assert _load(root, 2, trust=True) == _expected(2)
        assert counts.read == 1
        for lane_no in range(2):
            assert _load(root, lane_no, trust=True) == _expected(lane_no)
        assert counts.read == 1 + 10


def test_facts_that_do_not_repeat_the_first_extract_are_decided_in_full(
    tmp_path: Path,
) -> None:
    """An extract recorded under another lane identity (or with other warnings and
    usage) is decided from its own facts, not taken for the first extract's header."""
    keys, records = _lane(0)
    other = msgspec.structs.replace(records[1], lane_identity="9" * 64, warnings=[], usage=None)
    records = [records[0], other, *records[2:]]
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        store = PackedStore(root, seal_min=None)
        try:
            recorder = CheckpointRecorder(Workspace.in_cache(root, "glossary", packed=store))
            for key, record in zip(keys, records, strict=True):
                recorder.write(key, record)
            recorder.sync()
        finally:
            store.close()
        found = _load(root, 0, trust=True)
    assert found is not None
    want = [_without_payload(r, used) for r, used in zip(records, PAYLOADS, strict=True)]
    assert found == want
    assert found[1].lane_identity == "9" * 64 and found[2].lane_identity == records[0].lane_identity
