"""`open_journal(..., read_only=True)`: reading never writes to the journal file."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from runjournal.adapters.journal import JournalError, open_journal
from runjournal.domain.events import RunPhase, RunStatus, RunTerminated, WarningRecorded
from runjournal.domain.run import Run
from support.hand_made import emit


def _clock():
    now = [datetime(2025, 1, 1, tzinfo=UTC)]

    def tick() -> datetime:
        now[0] += timedelta(seconds=1)
        return now[0]

    return tick


def _record(path: Path, run_id: str) -> None:
    with open_journal(str(path)) as store:
        run = Run.allocate(
            _clock(),
            run_id=run_id,
            pipeline="p",
            pipeline_file="/p.toml",
            argv=[],
            tool_version="0.1.0",
            run_dir=f"/out/{run_id}",
            output_root="/out",
            cache_root="/cache",
            workspace=None,
            debug_bundle=None,
            host="h",
            pid=1,
            process_start=1.0,
        )
        with store.session(run) as session:
            emit(session, WarningRecorded, step="s", lane="l", message="m")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reading_read_only_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    _record(path, "run-a")
    before = _digest(path)
    with open_journal(str(path), read_only=True) as store:
        assert [r.run_id for r in store.list_runs()] == ["run-a"]
        assert len(list(store.events("run-a"))) == 2
        assert store.verify_chain("run-a").status.value == "verified"
        run = store.load_run("run-a", _clock())
        session = store.session(run, batch_size=10)  # nothing pending: no write yet
        emit(session, RunTerminated, status=RunStatus.ABANDONED, phase=RunPhase.RECOVERY)
        with pytest.raises(JournalError, match=r"readonly|read-only|read only"):
            session.flush()
    assert _digest(path) == before


def test_a_file_that_is_not_a_journal_yet_is_initialised_as_before(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    path.touch()
    with open_journal(str(path), read_only=True) as store:
        assert store.list_runs() == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file modes")
def test_a_read_only_file_in_a_read_only_directory(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "journal.sqlite3"
    _record(path, "run-a")
    path.chmod(0o444)
    directory.chmod(0o555)
    try:
        with open_journal(str(path), read_only=True) as store:
            assert [r.run_id for r in store.list_runs()] == ["run-a"]
    finally:
        directory.chmod(0o755)
