"""Reading commands stream: their memory does not grow with the run's size.

Measured with `tracemalloc` (allocated bytes, not time): the peak of exporting and
chain-verifying a run ten times as long must stay within a small factor of the short
run's, where holding the run's events grows with it (docs/performance.md "Reading
commands on a large run").
"""

from __future__ import annotations

import contextlib
import io
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runjournal.adapters.export import (
    decode_export,
    export_events,
    export_run,
    import_stream,
    verify_export,
)
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import JournalStore, open_journal
from runjournal.adapters.projection_store import ProjectionStore
from runjournal.adapters.run_directory_check import RunFacts
from runjournal.cli.output import emit_json, emit_json_streamed, json_bytes, json_bytes_streamed
from runjournal.domain.audit import audit_run
from runjournal.domain.events import RunEvent
from runjournal.domain.merkle import HASH_SIZE
from runjournal.projections.base import fold
from runjournal.projections.reasons_report import ReasonReportProjection
from support import synthetic as syn
from support.inprocess import InProcess


def _peak(fn: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result = fn()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


HELD_EVENT = 300
"""Bytes a decoded event costs at least while it is held (a StageDecided and its chunk id)."""


def _grows_less_than_the_events(peaks: list[int], counts: list[int]) -> None:
    """What the longer run adds to the peak, per event it adds, is well below what holding
    the events would cost. (A ratio of the two peaks would punish a smaller fixed part:
    delta rows made the short run's peak about three times smaller, docs/internals.md
    "Delta rows".)"""
    growth = (peaks[1] - peaks[0]) / (counts[1] - counts[0])
    assert growth < HELD_EVENT / 2, (peaks, counts, growth)


def _journal(tmp_path: Path, lanes: int, jobs: int = 1) -> tuple[JournalStore, str]:
    """A run of `lanes` lanes; with `jobs` > 1, that many lanes' events interleave."""
    run = syn.synthetic_run(syn.run_id_for(lanes), lanes=lanes, chunks=150)
    if jobs > 1:
        run = syn.interleave_lanes(run, jobs)
    store = open_journal(str(tmp_path / f"j{lanes}-{jobs}.sqlite3"))
    store.append_events(run.run_id, run.events, batch=256)
    return store, run.run_id


def _audit(store: JournalStore, run_id: str) -> object:
    """What `journal audit` does: one pass feeding the audit and the run's facts, then
    the chain."""
    facts = RunFacts()

    def fed() -> Iterator[RunEvent]:
        for event in store.events(run_id):
            facts.feed(event)
            yield event

    report = audit_run(fed())
    assert report.ok and store.verify_chain(run_id).events == report.events
    return report


def test_export_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Export holds only the run's Merkle leaves, packed 32 bytes an event
    (docs/internals.md "Export and import"): what a longer run adds to the peak, per
    event, stays under two leaves' worth (a bytes object and a list slot each would be
    about 140)."""
    peaks, counts = [], []
    for lanes in (4, 40):
        store, run_id = _journal(tmp_path, lanes)
        with store:
            peak, (data, count) = _peak(  # type: ignore[misc]
                lambda s=store, r=run_id: export_run(s, r, tool_version="t", created_by="t")
            )
            assert decode_export(data).header.events == count
        peaks.append(peak - 2 * len(data))  # the file itself is returned whole
        counts.append(count)
    growth = (peaks[1] - peaks[0]) / (counts[1] - counts[0])
    assert growth < 2 * HASH_SIZE, (peaks, counts, growth)


def test_audit_and_chain_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    peaks: list[int] = []
    counts: list[int] = []
    for lanes in (4, 40):
        store, run_id = _journal(tmp_path, lanes)
        counts.append(store.last_version(run_id))
        with store:
            peaks.append(_peak(lambda s=store, r=run_id: _audit(s, r))[0])
    # Run.replay keeps the last decision of each stage scope (its ordering invariant),
    # so a little grows with the run; the events themselves must not be held.
    _grows_less_than_the_events(peaks, counts)


def _import(data: bytes, target: Path) -> int:
    """What `journal import` does: verify the whole file, then append it streamed."""
    header = verify_export(data)
    with open_journal(str(target)) as store:
        result = import_stream(store, header, lambda: export_events(data), batch=500)
        assert store.last_version(header.run_id) == header.events
    return result.events


def test_import_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    peaks = []
    for lanes in (4, 40):
        store, run_id = _journal(tmp_path, lanes)
        with store:
            data, count = export_run(store, run_id, tool_version="t", created_by="t")
        target = tmp_path / f"imported-{lanes}.sqlite3"
        peak, events = _peak(lambda d=data, t=target: _import(d, t))
        assert events == count
        peaks.append(peak - len(data))
    assert peaks[1] < 3 * peaks[0], peaks


class _Sink:
    """A stdout that keeps only how much was written (and, when asked, the text)."""

    def __init__(self, keep: bool = False) -> None:
        self.size, self.parts, self.keep = 0, [], keep

    def write(self, text: str) -> int:
        self.size += len(text)
        if self.keep:
            self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def _explain_json(store: JournalStore, run_id: str, out: _Sink) -> int:
    """What `explain RUN --json` does: fold the reasons, stream the document."""
    streamed = fold(ReasonReportProjection(), store.events(run_id)).streamed_view()
    with contextlib.redirect_stdout(out):  # type: ignore[type-var]
        emit_json_streamed(streamed.doc, "steps", streamed.items)
    return out.size


@pytest.mark.parametrize("jobs", [1, 4])
def test_explain_json_memory_does_not_grow_with_the_run(tmp_path: Path, jobs: int) -> None:
    peaks: list[int] = []
    counts: list[int] = []
    for lanes in (4, 40):
        store, run_id = _journal(tmp_path, lanes, jobs)
        counts.append(store.last_version(run_id))
        with store:
            peak, size = _peak(lambda s=store, r=run_id: _explain_json(s, r, _Sink()))
            # The streamed document is the view, byte for byte.
            kept, whole = _Sink(keep=True), io.StringIO()
            _explain_json(store, run_id, kept)
            with contextlib.redirect_stdout(whole):
                emit_json(fold(ReasonReportProjection(), store.events(run_id)).view())
            assert "".join(kept.parts) == whole.getvalue()
            assert size > 1000 * lanes
        peaks.append(peak)
    # Each decision is held compact until its lane is written: neither the events nor
    # every decision's dict are held for the whole run.
    _grows_less_than_the_events(peaks, counts)


def _projection_store(store: JournalStore, views: Path) -> ProjectionStore:
    """The projection store `projections rebuild` and `status` use, views under `views`."""
    return ProjectionStore(
        store, str(views), json_bytes, open_root=FsRoot.open, render_streamed=json_bytes_streamed
    )


def test_rebuild_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    peaks: list[int] = []
    counts: list[int] = []
    for lanes in (4, 40):
        store, run_id = _journal(tmp_path, lanes)
        counts.append(store.last_version(run_id))
        with store:
            views = tmp_path / f"views{lanes}"
            projections = _projection_store(store, views)
            peak, results = _peak(lambda p=projections, r=run_id: p.rebuild(None, r))
            assert all(not r.failures for r in results), results  # type: ignore[attr-defined]
        written = sum(f.stat().st_size for f in views.rglob("*.json"))
        peaks.append(peak - 2 * written)  # each file is rendered whole before it is written
    _grows_less_than_the_events(peaks, counts)


def _command_peak(invoke: InProcess, *args: str) -> tuple[int, str]:
    """The allocation peak of one command run in this process, and what it printed."""
    invoke(*args)  # once first: the modules it imports on first use are not the run's
    peak, result = _peak(lambda: invoke(*args))
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    return peak, result.stdout  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "command",
    [("runs", "show"), ("runs", "show", "--json"), ("runs", "show", "--outputs"), ("runs", "diff")],
)
def test_runs_show_and_diff_memory_does_not_grow_with_the_run(
    tmp_path: Path, invoke: InProcess, command: tuple[str, ...]
) -> None:
    peaks = []
    for lanes in (4, 40):
        out = tmp_path / f"out{lanes}"
        run = syn.synthetic_journal(out, n=lanes, lanes=lanes, chunks=150)
        runs = (run.run_id, run.run_id) if command[1] == "diff" else (run.run_id,)
        peak, printed = _command_peak(
            invoke, *command[:2], *runs, *command[2:], "--output-root", str(out)
        )
        assert run.run_id in printed
        peaks.append(peak)
    # The views fold per lane (counts, outputs), one pass over the journal's pages:
    # holding the run's events grows ten times.
    assert peaks[1] < 3 * peaks[0], peaks


def test_projections_status_memory_is_the_view_file_not_the_view(tmp_path: Path) -> None:
    for lanes in (4, 40):
        store, run_id = _journal(tmp_path, lanes)
        with store:
            views = tmp_path / f"status{lanes}"
            projections = _projection_store(store, views)
            projections.rebuild(None, run_id)
            peak, rows = _peak(lambda p=projections: p.status(None))
            assert [r.name for r in rows if r.stale] == [], rows  # type: ignore[attr-defined]
        largest = max(f.stat().st_size for f in views.rglob("*.json"))
        assert largest > 1000 * lanes
        # Each view file is read whole (in 1 MiB reads, joined: at most twice its size),
        # but only its `last_version` is decoded: decoding the view it holds took about
        # three times the file.
        assert peak < 2.5 * largest, (peak, largest)
