"""The live journal's hash chain: how it is written, extended, imported and verified."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from runjournal.adapters.export import decode_export, export_run, import_run
from runjournal.adapters.journal import JournalStore, open_journal
from runjournal.adapters.journal.chain import ChainStatus, genesis, link_digest, verify_chain
from runjournal.adapters.journal.codec import EventMapper
from runjournal.domain.events import (
    RunAllocated,
    RunError,
    RunPhase,
    RunStatus,
    RunTerminated,
    WarningRecorded,
)
from runjournal.domain.run import Run, run_aggregate_id
from support.hand_made import emit
from support.paths import FIXTURES

V1_RUNS = ("20250102T030405Z-0a1b2c3d", "20250102T031000Z-4e5f6a7b")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def allocation(run_id: str) -> dict[str, object]:
    return {
        "run_id": run_id,
        "pipeline": "p",
        "pipeline_file": "/p/pipeline.toml",
        "argv": ["run"],
        "tool_version": "0.1.0",
        "run_dir": f"/out/{run_id}",
        "output_root": "/out",
        "cache_root": "/cache",
        "workspace": None,
        "debug_bundle": None,
        "host": "h",
        "pid": 1,
        "process_start": 1.0,
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JournalStore]:
    with open_journal(str(tmp_path / "journal.sqlite3")) as journal:
        yield journal


def rows(store: JournalStore, run_id: str) -> list[StoredEvent]:
    return list(store._app.recorder.select_events(run_aggregate_id(run_id)))


def record(store: JournalStore, run_id: str, warnings: int = 3, batch: int = 2) -> None:
    run = Run.allocate(Clock(), **allocation(run_id))
    with store.session(run, batch_size=batch) as session:
        for i in range(warnings):
            emit(session, WarningRecorded, step="s", lane="l", message=f"w{i} " + "x" * (i * 900))


def test_every_row_links_to_its_predecessor(store: JournalStore) -> None:
    record(store, "run-a", warnings=4)
    mapper = EventMapper()
    aggregate = run_aggregate_id("run-a")
    previous = genesis(aggregate)
    stored = rows(store, "run-a")
    assert len(stored) == 5 and any(r.state[0] == 0x02 for r in stored)  # one compressed
    for row in stored:
        class_version, body, link = mapper.split_state(row.state)
        assert link == link_digest(
            previous, aggregate, row.originator_version, row.topic, class_version, body
        )
        previous = link
    report = store.verify_chain("run-a")
    assert report.status is ChainStatus.VERIFIED and report.breaks == []
    assert report.head == previous.hex() and report.events == 5


def test_links_do_not_change_what_is_decoded(store: JournalStore) -> None:
    record(store, "run-a")
    unchained = [EventMapper().to_stored_event(e) for e in store.events("run-a")]
    assert [EventMapper().to_domain_event(r) for r in unchained] == list(store.events("run-a"))


def test_a_new_store_extends_the_chain_from_the_stored_predecessor(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.sqlite3")
    with open_journal(path) as first:
        record(first, "run-a")
    with open_journal(path) as second:  # as `recover` does: no cached head
        run = second.load_run("run-a", Clock())
        session = second.session(run)
        emit(session, RunTerminated, status=RunStatus.ABANDONED, phase=RunPhase.RECOVERY)
        session.flush()
        assert second.verify_chain("run-a").status is ChainStatus.VERIFIED


def test_a_run_recorded_unchained_stays_unchained_when_extended(store: JournalStore) -> None:
    """A run written before the chain existed (e.g. killed, then `recover`ed by this version)."""
    mapper = EventMapper()
    run = Run.allocate(Clock(), **allocation("old-run"))
    run.trigger(WarningRecorded, step="s", lane="l", message="before the chain")
    store._app.recorder.insert_events([mapper.to_stored_event(e) for e in run.collect_events()])
    assert store.verify_chain("old-run").status is ChainStatus.UNCHAINED
    loaded = store.load_run("old-run", Clock())
    session = store.session(loaded)
    emit(
        session,
        RunTerminated,
        status=RunStatus.ABANDONED,
        phase=RunPhase.RECOVERY,
        error=RunError(message="gone"),
    )
    session.flush()
    assert all(mapper.split_state(r.state)[2] is None for r in rows(store, "old-run"))
    report = store.verify_chain("old-run")
    assert report.status is ChainStatus.UNCHAINED and report.head is None


def test_an_unchained_row_in_a_chained_run_is_a_break(store: JournalStore) -> None:
    record(store, "run-a")
    mapper = EventMapper()
    aggregate = run_aggregate_id("run-a")
    row = rows(store, "run-a")[2]
    plain = mapper.to_stored_event(mapper.to_domain_event(row))
    with store._app.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = 3",
            (plain.state, aggregate.hex),
        )
    report = store.verify_chain("run-a")
    assert report.status is ChainStatus.BROKEN
    assert [(b.version, b.event) for b in report.breaks] == [(3, "WarningRecorded")]
    assert "carries no chain link" in report.breaks[0].message


def test_verify_reports_an_empty_run(store: JournalStore) -> None:
    assert store.verify_chain("nothing").status is ChainStatus.EMPTY
    assert verify_chain([], run_aggregate_id("x"), EventMapper()).events == 0


def test_import_chains_the_imported_rows_also_after_an_interrupted_import(tmp_path: Path) -> None:
    source = tmp_path / "v1.sqlite3"
    shutil.copyfile(FIXTURES / "journal-v1.sqlite3", source)
    with open_journal(str(source)) as old:
        assert {old.verify_chain(r).status for r in V1_RUNS} == {ChainStatus.UNCHAINED}
        data, count = export_run(old, V1_RUNS[1], tool_version="t", created_by="test")
    export = decode_export(data)
    with open_journal(str(tmp_path / "new.sqlite3")) as new:
        new.append_events(V1_RUNS[1], export.events[:5])  # an import stopped after 5 events
        new._heads.clear()  # a later process: the head comes from the stored row
        result = import_run(new, export)
        assert result.resumed_after == 5 and result.events == count
        report = new.verify_chain(V1_RUNS[1])
        assert report.status is ChainStatus.VERIFIED and report.events == count
        assert list(new.events(V1_RUNS[1])) == export.events


def test_the_v1_fixture_audits_as_unchained(console_env: dict[str, str], tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(FIXTURES / "journal-v1.sqlite3", out / "journal.sqlite3")
    script = Path(sys.executable).parent / "runjournal"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "runjournal.cli.main"]
    for run_id in V1_RUNS:
        proc = subprocess.run(
            [*command, "journal", "audit", run_id, "--output-root", str(out)],
            capture_output=True,
            text=True,
            env=console_env,
            cwd=tmp_path,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "unchained: recorded before the journal hash chain" in proc.stdout
        assert proc.stderr.startswith("runjournal: warning: ") and "hash chain" in proc.stderr
        proc = subprocess.run(
            [*command, "journal", "audit", run_id, "--json", "--output-root", str(out)],
            capture_output=True,
            text=True,
            env=console_env,
            cwd=tmp_path,
            timeout=120,
        )
        doc = json.loads(proc.stdout)
        assert doc["verdict"] == "ok" and doc["chain"]["status"] == "unchained"
        assert doc["chain"]["head"] is None


@pytest.fixture
def console_env(tmp_path: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"))
    return env


def test_allocation_event_is_the_genesis_successor(store: JournalStore) -> None:
    record(store, "run-a", warnings=0)
    (row,) = rows(store, "run-a")
    assert isinstance(EventMapper().to_domain_event(row), RunAllocated)
    class_version, body, link = EventMapper().split_state(row.state)
    assert link == link_digest(
        genesis(run_aggregate_id("run-a")), row.originator_id, 1, row.topic, class_version, body
    )


def test_the_chain_on_postgres(tmp_path: Path) -> None:
    from support import synthetic as syn

    with syn.backend("postgres", tmp_path) as url, open_journal(url) as store:
        record(store, "run-pg", warnings=3)
        report = store.verify_chain("run-pg")
        assert report.status is ChainStatus.VERIFIED and report.events == 4
        row = rows(store, "run-pg")[2]
        mapper = EventMapper()
        event = mapper.to_domain_event(row)
        forged = mapper.to_chained_stored_event(
            msgspec.structs.replace(event, message="forged"), b"\0" * 32
        )[0]
        syn.pg_execute(
            url,
            "UPDATE runjournal_events SET state = %s "
            "WHERE originator_id = %s AND originator_version = 3",
            (forged.state, run_aggregate_id("run-pg")),
        )
        report = store.verify_chain("run-pg")
        assert [(b.version, b.event) for b in report.breaks] == [(3, "WarningRecorded")]
