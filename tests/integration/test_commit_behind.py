"""`RunSession(behind=True)`: full batches commit on their own thread while the run goes on
(docs/internals.md "Batching (`RunSession`)"), with the synchronous session's guarantees:
order, no gap after a failed commit, the group sync before each commit, and a
synchronous `flush`."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from runjournal.adapters.journal import JournalError, RunSession
from runjournal.domain.events import RunEvent, WarningRecorded
from runjournal.domain.run import Run, run_aggregate_id
from support.hand_made import emit

WAIT_S = 10  # bound on every wait below


class StepClock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def new_run() -> Run:
    run_id = "20250102T030405Z-1a2b3c4d"
    return Run.allocate(
        StepClock(),
        run_id=run_id,
        pipeline="p",
        pipeline_file="/p.toml",
        argv=["run"],
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


def warn(session: RunSession, i: int) -> None:
    emit(session, WarningRecorded, step=None, lane=None, message=f"w{i}")


class Journal:
    """A commit that records versions and the thread, and can be held or made to fail."""

    def __init__(self) -> None:
        self.versions: list[int] = []
        self.log: list[str] = []
        self.threads: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail = False

    def commit(self, events: Sequence[RunEvent]) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT_S)
        if self.fail:
            raise JournalError("disk I/O error")
        self.threads.add(threading.current_thread().name)
        self.versions.extend(e.originator_version for e in events)
        self.log.append("commit")

    def sync(self) -> None:
        self.log.append("sync")


def test_emit_goes_on_while_a_batch_commits_and_flush_waits_for_it() -> None:
    journal = Journal()
    session = RunSession(journal.commit, new_run(), batch_size=3, behind=True)
    assert journal.versions == [1]  # RunAllocated: committed at once, synchronously
    journal.gate.clear()
    journal.entered.clear()
    for i in range(3):
        warn(session, i)  # the third hands the batch over
    assert journal.entered.wait(WAIT_S)
    warn(session, 3)  # returns although the batch is still committing
    assert journal.versions == [1] and session.pending == 4
    journal.gate.set()
    session.flush()
    assert journal.versions == [1, 2, 3, 4, 5] and session.pending == 0
    assert "runjournal-commit" in journal.threads


def test_a_failed_commit_behind_is_raised_later_and_retried_without_a_gap() -> None:
    journal = Journal()
    session = RunSession(journal.commit, new_run(), batch_size=2, behind=True)
    journal.fail = True
    warn(session, 0)
    warn(session, 1)  # handed over; fails on its thread
    warn(session, 2)
    with pytest.raises(JournalError):
        warn(session, 3)  # the next handover waits for the failed one and raises
    assert session.pending == 4  # nothing lost
    journal.fail = False
    session.flush()
    assert journal.versions == [1, 2, 3, 4, 5]


def test_the_group_sync_runs_before_each_commit_behind() -> None:
    journal = Journal()
    session = RunSession(
        journal.commit, new_run(), batch_size=2, behind=True, before_commit=journal.sync
    )
    for i in range(5):
        warn(session, i)
    session.flush()
    assert journal.log == ["sync", "commit"] * 4
    assert journal.versions == list(range(1, 7))


def test_the_default_session_commits_on_the_calling_thread() -> None:
    journal = Journal()
    session = RunSession(journal.commit, new_run(), batch_size=2)
    warn(session, 0)
    warn(session, 1)
    assert journal.versions == [1, 2, 3]
    assert journal.threads == {threading.current_thread().name}
    assert run_aggregate_id("20250102T030405Z-1a2b3c4d") == session.run.id
