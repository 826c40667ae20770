"""The runs index table: `list_runs` reads only the events after its position.

docs/internals.md "The runs index table": every write of a run's allocation or
termination brings the table up to date, so a new reader (a `runs list` process) reads
the run summaries from the table and the events after its position only, however large
the runs before it were. SQLite and PostgreSQL (when RUNJOURNAL_TEST_POSTGRES_URL is set).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters.journal import JournalStore, open_journal
from runjournal.domain.events import RunTerminated
from support import synthetic as syn


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with syn.backend(request.param, tmp_path) as journal:
        yield journal


def _reader(url: str) -> JournalStore:
    """A store as `runs list` opens it (SQLite read-only)."""
    return open_journal(url, read_only=True)


class Spy:
    """Records where each read of the event log started and how many rows it returned."""

    def __init__(self, store: JournalStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.starts: list[int] = []
        self.rows = 0
        recorder = store._app.recorder
        real = recorder.select_notifications

        def spy(start: int, limit: int, *args: Any, **kw: Any) -> Any:
            page = real(start, limit, *args, **kw)
            self.starts.append(start)
            self.rows += len(page)
            return page

        monkeypatch.setattr(recorder, "select_notifications", spy)


def _append(url: str, run: syn.SyntheticRun, *, upto: int | None = None) -> None:
    with open_journal(url) as store:
        store.append_events(run.run_id, run.events[:upto])


def _last_position(url: str) -> int:
    with open_journal(url) as store:
        return int(store._app.recorder.max_notification_id() or 0)


@pytest.mark.parametrize("lanes", [2, 60])
def test_a_new_reader_reads_no_event_of_runs_already_indexed(
    url: str, lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = syn.synthetic_run(syn.run_id_for(1), lanes=1, chunks=1)
    big = syn.synthetic_run(syn.run_id_for(2), lanes=lanes, chunks=20)
    _append(url, small)
    _append(url, big)
    end = _last_position(url)  # the log's last row (a packed row holds several events)
    reader = _reader(url)
    spy = Spy(reader, monkeypatch)
    try:
        runs = reader.list_runs()
    finally:
        reader.close()
    assert [(r.run_id, r.status.value) for r in runs] == [
        (small.run_id, "succeeded"),
        (big.run_id, "succeeded"),
    ]
    # the same whatever the size of the runs: nothing before the position is read
    assert reader.runs_index_reads == 0 and spy.rows == 0
    assert spy.starts and min(spy.starts) >= end


def test_events_after_the_position_are_read_and_only_those(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = syn.synthetic_run(syn.run_id_for(3), lanes=10, chunks=10)
    _append(url, first)
    indexed = _last_position(url)
    # a writer that never updates the index (as a run killed before its termination)
    monkeypatch.setattr(JournalStore, "_index_new_events", lambda self: None)
    killed = syn.synthetic_run(syn.run_id_for(4), lanes=2, chunks=2)
    _append(url, killed, upto=-1)  # no RunTerminated
    monkeypatch.undo()
    reader = _reader(url)
    spy = Spy(reader, monkeypatch)
    try:
        runs = reader.list_runs()
    finally:
        reader.close()
    assert [(r.run_id, r.status.value) for r in runs] == [
        (first.run_id, "succeeded"),
        (killed.run_id, "running"),
    ]
    assert min(spy.starts) == indexed and reader.runs_index_reads == 1  # its RunAllocated


def test_a_writer_whose_base_moved_does_not_overwrite_newer_rows(url: str) -> None:
    one = syn.synthetic_run(syn.run_id_for(5), lanes=1, chunks=1)
    two = syn.synthetic_run(syn.run_id_for(6), lanes=1, chunks=1)
    stale = open_journal(url)
    try:
        assert stale.list_runs() == []  # loads the (empty) index at position 0
        _append(url, one)  # another process moves the position
        stale.append_events(two.run_id, two.events)  # its save at base 0 is refused
        assert [r.run_id for r in stale.list_runs()] == [one.run_id, two.run_id]
    finally:
        stale.close()
    reader = _reader(url)
    try:
        runs = reader.list_runs()
        assert reader.runs_index_reads == 0
    finally:
        reader.close()
    assert [(r.run_id, r.status.value) for r in runs] == [
        (one.run_id, "succeeded"),
        (two.run_id, "succeeded"),
    ]


def test_a_read_only_reader_never_creates_the_table(tmp_path: Path) -> None:
    url = str(tmp_path / "journal.sqlite3")
    run = syn.synthetic_run(syn.run_id_for(7), lanes=1, chunks=1)
    _append(url, run)
    with sqlite3.connect(url) as db:
        db.execute("DROP TABLE runjournal_runs_index")
        db.execute("DROP TABLE runjournal_runs_index_position")
    reader = _reader(url)
    try:
        assert [r.run_id for r in reader.list_runs()] == [run.run_id]
        assert reader.runs_index_reads == 2  # folded from the log: allocation, termination
    finally:
        reader.close()
    with sqlite3.connect(url) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not {"runjournal_runs_index", "runjournal_runs_index_position"} & tables


def test_a_damaged_row_falls_back_to_the_log(tmp_path: Path) -> None:
    url = str(tmp_path / "journal.sqlite3")
    run = syn.synthetic_run(syn.run_id_for(8), lanes=1, chunks=1)
    _append(url, run)
    with sqlite3.connect(url) as db:
        db.execute("UPDATE runjournal_runs_index SET summary = '{not json'")
    reader = _reader(url)
    try:
        [row] = reader.list_runs()
    finally:
        reader.close()
    assert (row.run_id, row.status.value) == (run.run_id, "succeeded")


# --- property: whatever the history, the index gives what a fold of the log gives ------

OPS = st.lists(
    st.tuples(st.sampled_from(["start", "end", "list-reader", "list-writer"]), st.integers(0, 5)),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_the_index_always_equals_a_fold_of_the_log(
    tmp_path: Path, ops: list[tuple[str, int]]
) -> None:
    directory = tmp_path / f"h{abs(hash(tuple(ops)))}"
    directory.mkdir()
    url = str(directory / "journal.sqlite3")
    started: dict[int, syn.SyntheticRun] = {}
    ended: set[int] = set()
    writer = open_journal(url)  # a long-lived process: its own view of the index
    try:
        for op, n in ops:
            if op == "start" and n not in started:
                run = syn.synthetic_run(syn.run_id_for(100 + n), lanes=1, chunks=1)
                started[n] = run
                _append(url, run, upto=-1)
            elif op == "end" and n in started and n not in ended:
                run = started[n]
                terminated = run.events[-1]
                assert isinstance(terminated, RunTerminated)
                _append_one(url, run.run_id, terminated)
                ended.add(n)
            elif op == "list-writer":
                _check(writer.list_runs(), started, ended)
            elif op == "list-reader":
                reader = _reader(url) if (directory / "journal.sqlite3").exists() else None
                if reader is not None:
                    try:
                        _check(reader.list_runs(), started, ended)
                    finally:
                        reader.close()
        _check(writer.list_runs(), started, ended)
    finally:
        writer.close()


def _append_one(url: str, run_id: str, event: Any) -> None:
    with open_journal(url) as store:
        store.append_events(run_id, [event])


def _check(runs: list[Any], started: dict[int, syn.SyntheticRun], ended: set[int]) -> None:
    expected = {run.run_id: "succeeded" if n in ended else "running" for n, run in started.items()}
    assert {r.run_id: r.status.value for r in runs} == expected
