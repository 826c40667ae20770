"""A compact journal: delta rows of per-lane events (docs/internals.md "Delta rows").

A reused decision must cost at most 200 bytes of journal, also when every lane is one
chunk (its lane events weigh on each decision), and delta rows must read back as exactly
the events written, audit clean and verify their hash chain. Journals written with the
packed rows of alike decisions before (`fixtures/journal-packed.sqlite3`) still read.
"""

from __future__ import annotations

import shutil
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import zstandard
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic
from runjournal.adapters.journal import JournalCorrupt, open_journal
from runjournal.adapters.journal.chain import ChainStatus
from runjournal.adapters.journal.codec import EventMapper
from runjournal.domain.audit import audit_run
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    LaneResolved,
    RunAllocated,
    RunEvent,
    StageDecided,
)
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.domain.run import run_aggregate_id
from support import synthetic as syn

BATCH = 256  # the session's default batch: a pack never spans two commits


def _db_bytes(path: Path) -> int:
    """The database's size with its WAL folded in (what the journal occupies)."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        return int(pages * db.execute("PRAGMA page_size").fetchone()[0])


def _append(url: str, run: syn.SyntheticRun) -> None:
    with open_journal(url) as store:
        for start in range(0, len(run.events), BATCH):
            store.append_events(run.run_id, run.events[start : start + BATCH])


@pytest.mark.parametrize(("lanes", "chunks"), [(30, 120), (300, 1)])
def test_a_reused_decision_costs_at_most_200_bytes(tmp_path: Path, lanes: int, chunks: int) -> None:
    path = tmp_path / "journal.sqlite3"
    cold = syn.synthetic_run(syn.run_id_for(1), lanes=lanes, chunks=chunks)
    resume = syn.synthetic_run(syn.run_id_for(2), lanes=lanes, chunks=chunks, previous=cold)
    _append(str(path), cold)
    before = _db_bytes(path)
    _append(str(path), resume)
    reused = [d for d in resume.decisions if d.code is ReasonCode.REUSED]
    assert len(reused) == len(resume.decisions) == lanes * (chunks + 2)
    per_decision = (_db_bytes(path) - before) / len(reused)
    assert per_decision <= 200, f"{per_decision:.0f} bytes of journal per reused decision"

    with open_journal(str(path)) as store:
        assert list(store.events(resume.run_id)) == resume.events
        chain = store.verify_chain(resume.run_id)
        report = audit_run(store.events(resume.run_id))
    assert chain.status is ChainStatus.VERIFIED and chain.events == len(resume.events)
    assert report.ok and report.decisions == len(resume.decisions)


def test_packed_rows_hold_many_events_and_notifications_see_each(tmp_path: Path) -> None:
    url = str(tmp_path / "journal.sqlite3")
    run = syn.synthetic_run(syn.run_id_for(3), lanes=3, chunks=50)
    _append(url, run)
    with open_journal(url) as store:
        rows = list(store._app.recorder.select_events(run_aggregate_id(run.run_id)))
        assert len(rows) < len(run.events) - 100  # 150 extract decisions went into 3 rows
        assert [e for _, e in store.notifications()] == run.events
        assert store.last_version(run.run_id) == len(run.events)


def _decision(version: int, at: datetime, **changes: object) -> StageDecided:
    code = changes.pop("code", ReasonCode.REUSED)
    fields: dict[str, object] = {
        "step": "terms",
        "lane": "docs/a.md",
        "stage": Stage.EXTRACT,
        "chunk": f"{version:064x}",
        "code": code,
        "category": category_of(code),  # type: ignore[arg-type]
        "detail": detail_for(code),  # type: ignore[arg-type]
        "forced": False,
        "resumed": True,
        "checkpoint": CheckpointState.PRESENT,
        "input": f"{version:064x}",
        "dependencies": "",
        "recorded": {},
    }
    fields.update(changes)
    return StageDecided(
        originator_id=run_aggregate_id("r"), originator_version=version, timestamp=at, **fields
    )


def _roundtrip(events: list[RunEvent], chained: bool = True) -> list[RunEvent]:
    mapper = EventMapper()
    rows, _ = mapper.to_stored_rows(events, b"\0" * 32 if chained else None)
    return [e for row in rows for e in mapper.to_domain_events(row)], rows  # type: ignore[return-value]


def test_every_field_comes_back_exactly() -> None:
    t = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    events: list[RunEvent] = [
        _decision(2, t),
        _decision(3, t + timedelta(microseconds=7), input="A" * 64),  # not lowercase hex
        _decision(4, t - timedelta(days=3), chunk="", input="\udc80 odd", stage=Stage.MERGE),
        _decision(5, t, chunk="ABC", input=f"{9:064x}"),
        _decision(6, t, recorded={"input": "x"}, code=ReasonCode.INPUT_CHANGED),  # new pack
        _decision(7, t, recorded={"input": "x"}, code=ReasonCode.INPUT_CHANGED),
        _decision(8, t.replace(tzinfo=None)),  # naive: never packed
        _decision(9, t.astimezone(timezone(timedelta(hours=2)))),
        _decision(10, t),
    ]
    got, rows = _roundtrip(events)
    assert got == events
    assert [type(g) for g in got] == [StageDecided] * len(events)
    assert got[2].stage is Stage.MERGE and got[2].timestamp < got[1].timestamp
    assert got[6].timestamp.tzinfo is None  # naive stays naive
    assert [r.originator_version for r in rows] == [10]  # one delta row


def test_a_pack_never_spans_a_gap_in_versions() -> None:
    t = datetime(2025, 1, 2, tzinfo=UTC)
    events: list[RunEvent] = [_decision(2, t), _decision(3, t), _decision(5, t), _decision(6, t)]
    got, rows = _roundtrip(events, chained=False)
    assert got == events
    assert [r.originator_version for r in rows] == [3, 6]


def test_an_edited_item_of_a_packed_row_breaks_the_chain(tmp_path: Path) -> None:
    url = str(tmp_path / "journal.sqlite3")
    run = syn.synthetic_run(syn.run_id_for(4), lanes=1, chunks=20)
    _append(url, run)
    victim = run.decisions[5].chunk  # inside the delta row of the lane's events
    with sqlite3.connect(tmp_path / "journal.sqlite3") as db:
        (version, state) = next(
            (v, _plain(s))
            for v, s in db.execute("SELECT originator_version, state FROM stored_events")
            if bytes.fromhex(victim) in _plain(s)
        )
        edited = state.replace(bytes.fromhex(victim), b"\x01" * 32)
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_version = ?", (edited, version)
        )
    with open_journal(url) as store:
        chain = store.verify_chain(run.run_id)
        events = list(store.events(run.run_id))
    assert chain.status is ChainStatus.BROKEN
    assert [b.version for b in chain.breaks] == [version]
    assert events[run.decisions[5].originator_version - 1].chunk == "01" * 32


def _plain(state: bytes) -> bytes:
    """A row's state uncompressed (format 0x01), its other header bits kept."""
    state = bytes(state)
    if state[0] & 0x0F != 0x02:
        return state
    head = 3 if state[0] & 0x60 else 1  # the event count of a delta or packed row
    body = zstandard.ZstdDecompressor().decompress(state[head:])
    return bytes((state[0] & 0xF0 | 0x01,)) + state[1:head] + body


def test_a_delta_row_with_a_wrong_count_is_refused() -> None:
    t = datetime(2025, 1, 2, tzinfo=UTC)
    mapper = EventMapper()
    (row,), _ = mapper.to_stored_rows([_decision(2, t), _decision(3, t), _decision(4, t)], None)
    state = bytearray(row.state)
    assert state[0] & 0x40 and state[1:3] == b"\x00\x03"
    state[2] = 4
    with pytest.raises(JournalCorrupt, match="delta row of 4 events holds 3"):
        mapper.to_domain_events(
            StoredEvent(row.originator_id, row.originator_version, row.topic, bytes(state))
        )
    with pytest.raises(JournalCorrupt, match="holds 3 events, not one"):
        mapper.to_domain_event(row)


def test_a_journal_of_packed_rows_still_reads(tmp_path: Path) -> None:
    """`fixtures/journal-packed.sqlite3`: a cold run and a resume of 2 lanes x 6 chunks
    (`support.synthetic`, appended 256 at a time) written by the packed-row writer."""
    path = tmp_path / "journal.sqlite3"
    shutil.copyfile(Path(__file__).parents[1] / "fixtures" / "journal-packed.sqlite3", path)
    with sqlite3.connect(path) as db:
        heads = {bytes(s)[0] for (s,) in db.execute("SELECT state FROM stored_events")}
    assert 0x21 in heads and not any(h & 0x40 for h in heads)  # packed rows, no delta row
    cold = syn.synthetic_run(syn.run_id_for(1), lanes=2, chunks=6)
    resume = syn.synthetic_run(syn.run_id_for(2), lanes=2, chunks=6, previous=cold)
    with open_journal(str(path)) as store:
        for run in (cold, resume):
            assert list(store.events(run.run_id)) == run.events
            assert store.verify_chain(run.run_id).status is ChainStatus.VERIFIED
            assert audit_run(store.events(run.run_id)).ok
        more = syn.synthetic_run(syn.run_id_for(3), lanes=2, chunks=6, previous=resume)
        _append(str(path), more)  # new rows are delta rows next to the packed ones
        assert list(store.events(more.run_id)) == more.events


def test_notifications_of_lane_event_types_read_them_from_delta_rows(tmp_path: Path) -> None:
    url = str(tmp_path / "journal.sqlite3")
    run = syn.synthetic_run(syn.run_id_for(5), lanes=4, chunks=3)
    _append(url, run)
    wanted = (LaneResolved, ArtifactGenerated)
    with open_journal(url) as store:
        got = [e for _, e in store.notifications(0, [get_topic(c) for c in wanted])]
        summaries = [e for _, e in store.notifications(0, [get_topic(RunAllocated)])]
    assert got == [e for e in run.events if isinstance(e, wanted)] and len(got) == 8
    assert summaries == run.events[:1]
