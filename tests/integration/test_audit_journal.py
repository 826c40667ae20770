"""`audit_run` over stored journals: a tampered row, both backends, the committed v1 journal.

Journal-backed tests (SQLite always, PostgreSQL when RUNJOURNAL_TEST_POSTGRES_URL is set)
that tamper with a stored row and read a committed journal whose LaneResolved rows are
class_version 1. The pure audit tests are in tests/unit/test_audit.py.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from runjournal.adapters.journal import EventMapper, JournalStore, open_journal
from runjournal.adapters.journal.delta import groups
from runjournal.domain.audit import Problem, audit_run
from runjournal.domain.events import LaneResolved
from runjournal.domain.reasons import ReasonCode
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from support import synthetic as syn
from support.paths import FIXTURES
from support.v1_journal import COLD, RESUME


@pytest.fixture(scope="module")
def cold() -> syn.SyntheticRun:
    return syn.synthetic_run(syn.run_id_for(1), lanes=2, chunks=3)


@pytest.fixture(scope="module")
def resume(cold: syn.SyntheticRun) -> syn.SyntheticRun:
    return syn.synthetic_run(syn.run_id_for(2), previous=cold, changed=frozenset({(1, 1)}))


# --- journal-backed: tampering, both backends, and the v1 fixture --------------------


@pytest.fixture(params=["sqlite", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, JournalStore]]:
    with syn.backend(request.param, tmp_path) as url:
        store = open_journal(url)
        try:
            yield url, store
        finally:
            store.close()


def tamper(url: str, run: syn.SyntheticRun, version: int, **changes: object) -> None:
    """Rewrite one stored event in place, as someone editing the database would: the
    row that holds it (a delta row, docs/internals.md "Delta rows") with it changed.
    The run was appended in one commit, so its rows are `groups` of all its events."""
    mapper = EventMapper()
    group = next(g for g in groups(run.events) if g[-1].originator_version >= version)
    events = [
        msgspec.structs.replace(e, **changes) if e.originator_version == version else e
        for e in group
    ]
    (row,), _ = mapper.to_stored_rows(events, None)
    state, version = row.state, row.originator_version
    aggregate = run.events[0].originator_id
    if url.startswith("sqlite://"):
        with sqlite3.connect(url[len("sqlite://") :]) as db:
            db.execute(
                "UPDATE stored_events SET state = ? "
                "WHERE originator_id = ? AND originator_version = ?",
                (state, aggregate.hex, version),
            )
            assert db.total_changes == 1
    else:
        syn.pg_execute(
            url,
            "UPDATE runjournal_events SET state = %s "
            "WHERE originator_id = %s AND originator_version = %s",
            (state, aggregate, version),
        )


class TestJournalBacked:
    def test_stored_runs_audit_clean_and_a_tampered_row_is_named(
        self, journal: tuple[str, JournalStore], resume: syn.SyntheticRun
    ) -> None:
        url, store = journal
        store.append_events(resume.run_id, resume.events)
        assert audit_run(store.events(resume.run_id)).ok
        target = next(d for d in resume.decisions if d.code is ReasonCode.STAGE_INPUT_CHANGED)
        tamper(url, resume, target.originator_version, code=ReasonCode.REUSED)
        report = audit_run(store.events(resume.run_id))
        assert not report.ok
        assert [(d.version, d.problem) for d in report.differences] == [
            (target.originator_version, Problem.CODE),
            (target.originator_version, Problem.CATEGORY),
        ]
        assert report.differences[0].redecided is ReasonCode.STAGE_INPUT_CHANGED


@pytest.fixture
def v1_journal(tmp_path: Path) -> Path:
    """A private copy: opening a SQLite journal switches it to WAL, never touch the fixture."""
    copy = tmp_path / "journal.sqlite3"
    shutil.copyfile(FIXTURES / "journal-v1.sqlite3", copy)
    return copy


class TestEventVersions:
    def test_fixture_rows_are_really_version_1_without_forced(self, v1_journal: Path) -> None:
        with sqlite3.connect(v1_journal) as db:
            rows = db.execute(
                "SELECT state FROM stored_events WHERE topic = ?",
                ("runjournal.domain.events:LaneResolved",),
            ).fetchall()
        assert len(rows) == 4
        for (state,) in rows:
            assert state[0] == 0x01  # class_version 1: no version suffix
            assert "forced" not in msgspec.msgpack.decode(state[1:])
        assert LaneResolved.class_version == 2

    def test_v1_journal_reads_audits_and_projects(self, v1_journal: Path) -> None:
        expected = json.loads((FIXTURES / "journal-v1.expected.json").read_text())
        with open_journal(str(v1_journal)) as store:
            assert [r.run_id for r in store.list_runs()] == [COLD, RESUME]
            for run_id in (COLD, RESUME):
                events = list(store.events(run_id))
                lanes = [e for e in events if isinstance(e, LaneResolved)]
                assert lanes and all(e.forced is False for e in lanes)
                assert audit_run(events).ok
                assert fold(ManifestProjection(), events).view() == expected[run_id]
        assert expected[RESUME]["decisions"] == {
            "input_changed": 1,
            "reused": 5,
            "stage_input_changed": 2,
        }

    def test_v1_events_import_into_either_backend(
        self, v1_journal: Path, journal: tuple[str, JournalStore]
    ) -> None:
        _, store = journal
        with open_journal(str(v1_journal)) as source:
            events = list(source.events(RESUME))
        store.append_events(RESUME, events)
        again = list(store.events(RESUME))
        assert again == events
        assert audit_run(again).ok

    def test_the_fixture_is_what_the_script_writes(self, tmp_path: Path) -> None:
        from support.v1_journal import build

        out = tmp_path / "regen"
        out.mkdir()
        expected = build(out)
        assert expected == json.loads((FIXTURES / "journal-v1.expected.json").read_text())
        committed = tmp_path / "committed.sqlite3"
        shutil.copyfile(FIXTURES / "journal-v1.sqlite3", committed)
        with open_journal(str(out / "journal-v1.sqlite3")) as a, open_journal(str(committed)) as b:
            for run_id in (COLD, RESUME):
                assert list(a.events(run_id)) == list(b.events(run_id))
