"""Live views equal their rebuild, byte for byte, over any interleaving of lanes.

A run's views are fed by its session's listeners as events are recorded, and rebuilt by
folding the journal (docs/internals.md "Projections"). With `--jobs N` lanes finish in
any order and the scheduler journals each when it is done, so the events of different
lanes interleave in any way the threads' timing allows, and a lane may repeat a chunk id
(docs/internals.md "Identity per stage"). For every interleaving hypothesis draws, fed
through a real SQLite session with small batches committed behind: the manifest,
report and reasons views built live equal the fold of the journal read back (the same
JSON bytes), and the manifest's `decisions` plus `not_started` are every `StageDecided`
journaled, which `journal audit` and `run`'s own check hold it to (issue #25).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters.journal import open_journal
from runjournal.app.manifest_check import CommittedFold, fold_mismatch, manifest_mismatch
from runjournal.cli.output import json_bytes
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    LaneResolved,
    RunAllocated,
    RunError,
    RunPhase,
    RunStatus,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.identity import LaneComponents
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection
from runjournal.projections.report import ReportProjection
from support.hand_made import emit

RUN_ID = "20261201T000000Z-0000abcd"
T0 = datetime(2026, 12, 1, tzinfo=UTC)

# One chunk of a lane: its id (few ids, so lanes repeat them), its decision, its fate.
CHUNK = st.tuples(
    st.sampled_from(["c1", "c2", "c3"]),
    st.sampled_from([ReasonCode.NOT_RESUMED, ReasonCode.REUSED, ReasonCode.INPUT_CHANGED]),
    st.sampled_from(["ran", "ran", "never", "failed"]),
)
LANES = st.lists(st.lists(CHUNK, min_size=1, max_size=5), min_size=1, max_size=4)

Emitted = tuple[type, dict[str, Any]]


def _resolved(lane: str, chunks: int) -> dict[str, Any]:
    return {
        "step": "s",
        "lane": lane,
        "components": LaneComponents("c", "m", "", "", "", "", ""),
        "lane_identity": f"id-{lane}",
        "dependencies": [],
        "chunks": chunks,
        "forced": False,
    }


def _decided(lane: str, chunk: str, code: ReasonCode) -> dict[str, Any]:
    return {
        "step": "s",
        "lane": lane,
        "stage": Stage.EXTRACT,
        "chunk": chunk,
        "code": code,
        "category": category_of(code),
        "detail": detail_for(code),
        "forced": False,
        "resumed": code is not ReasonCode.NOT_RESUMED,
        "failed": code is ReasonCode.STAGE_FAILED,
        "checkpoint": CheckpointState.NOT_LOOKED_UP,
        "input": chunk,
        "dependencies": "",
        "recorded": {},
    }


def lane_events(n: int, chunks: list[tuple[str, ReasonCode, str]]) -> list[Emitted]:
    """One lane as the runner journals it: resolved, every extract decided, then the misses
    run in chunk order; a failure is its second decision and `StageFailed`, and ends the
    lane. A chunk id a lane repeats is the same text, so each copy gets the decision of
    the first (the journal's aggregate refuses an execution after a reuse of its scope).
    """
    lane = f"l{n}"
    first: dict[str, ReasonCode] = {}
    chunks = [(c, first.setdefault(c, code), fate) for c, code, fate in chunks]
    out: list[Emitted] = [(LaneResolved, _resolved(lane, len(chunks)))]
    out += [(StageDecided, _decided(lane, c, code)) for c, code, _ in chunks]
    for c, code, fate in chunks:
        if code is ReasonCode.REUSED or fate == "never":
            continue
        stage = {"step": "s", "lane": lane, "stage": Stage.EXTRACT, "chunk": c}
        if fate == "ran":
            out.append((StageExecuted, {**stage, "sha256": "e" * 64, "size": 1}))
            continue
        out.append((StageDecided, _decided(lane, c, ReasonCode.STAGE_FAILED)))
        out.append((StageFailed, {**stage, "code": ReasonCode.STAGE_FAILED, "message": "boom"}))
        break
    return out


def interleave(lanes: list[list[Emitted]], picks: list[int]) -> list[Emitted]:
    """Merge the lanes' events in the order `picks` names lanes (each lane's own order
    kept); what `picks` leaves over follows lane by lane."""
    queues = [list(reversed(events)) for events in lanes]
    out: list[Emitted] = []
    for pick in picks:
        live = [q for q in queues if q]
        if not live:
            break
        out.append(live[pick % len(live)].pop())
    for q in queues:
        out.extend(reversed(q))
    return out


def _allocation() -> dict[str, Any]:
    return {
        "run_id": RUN_ID,
        "pipeline": "p",
        "pipeline_file": "/p.toml",
        "argv": [],
        "tool_version": "0",
        "run_dir": f"/out/{RUN_ID}",
        "output_root": "/out",
        "cache_root": "/c",
        "workspace": None,
        "debug_bundle": None,
        "host": "h",
        "pid": 1,
        "process_start": 0.0,
    }


def record(
    path: Path,
    events: list[Emitted],
    status: RunStatus,
    batch: int,
    committed: CommittedFold | None = None,
) -> dict[str, bytes]:
    """Record `events` through a session feeding the live views (and `committed` with
    each batch the journal commits, as `run` does); their JSON bytes."""
    t = [T0]

    def tick() -> datetime:
        t[0] += timedelta(milliseconds=1)
        return t[0]

    views = {"manifest": ManifestProjection(), "report": ReportProjection()}
    views["reasons"] = ReasonReportProjection()  # type: ignore[assignment]
    with open_journal(str(path)) as store:
        session = store.session(
            Run(run_aggregate_id(RUN_ID), tick),
            batch_size=batch,
            listeners=[v.apply for v in views.values()],
            behind=True,  # full batches commit on their own thread, as `run` does
            committed=committed.committed if committed is not None else None,
        )
        emit(session, RunAllocated, **_allocation())
        for event_type, fields in events:
            emit(session, event_type, **fields)
        error = None if status is RunStatus.SUCCEEDED else RunError(message=status.value)
        session.terminate(status, RunPhase.EXECUTION, error)
        session.flush()
    return {name: json_bytes(view.view()) for name, view in views.items()}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lanes=LANES,
    picks=st.lists(st.integers(min_value=0, max_value=3), max_size=40),
    status=st.sampled_from([RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED]),
    batch=st.integers(min_value=1, max_value=7),
)
def test_live_views_equal_the_journal_fold_in_any_interleaving(
    tmp_path_factory: Any,
    lanes: list[list[tuple[str, ReasonCode, str]]],
    picks: list[int],
    status: RunStatus,
    batch: int,
) -> None:
    path = tmp_path_factory.mktemp("live") / "journal.sqlite3"
    events = interleave([lane_events(n, chunks) for n, chunks in enumerate(lanes)], picks)
    committed = CommittedFold()
    live = record(path, events, status, batch, committed)
    with open_journal(str(path)) as store:
        journaled = list(store.events(RUN_ID))
        last_version = store.last_version(RUN_ID)
    rebuilt = {
        "manifest": fold(ManifestProjection(), journaled).view(),
        "report": fold(ReportProjection(), journaled).view(),
        "reasons": fold(ReasonReportProjection(), journaled).view(),
    }
    for name, view in rebuilt.items():
        assert live[name] == json_bytes(view), name
    decided: dict[str, int] = {}
    for event in journaled:
        if isinstance(event, StageDecided):
            decided[event.code.value] = decided.get(event.code.value, 0) + 1
    manifest = rebuilt["manifest"]
    counted = dict(manifest["decisions"])
    for code, n in manifest["not_started"].items():
        counted[code] = counted.get(code, 0) + n
    assert counted == decided
    reasons = rebuilt["reasons"]
    assert reasons["totals"] == manifest["decisions"]
    assert reasons["not_started"] == manifest["not_started"]
    # `run`'s own check (app/manifest_check.py) finds nothing to report, whether it reads
    # the journal back or folds the batches as they were committed
    assert manifest_mismatch(journaled, manifest) is None
    assert committed.usable and committed.last_version == last_version
    assert committed.view() == manifest and committed.journaled == decided
    assert fold_mismatch(committed.view(), committed.journaled, manifest) is None


def test_the_check_names_a_fold_that_loses_decisions(tmp_path: Path) -> None:
    """A fold that loses a decision (the bug of issue #25) is what `run` reports."""

    class Lossy(ManifestProjection):
        def apply(self, event: Any) -> None:
            if isinstance(event, StageExecuted) and event.lane == "l0" and event.chunk == "c1":
                return  # as if the decision's twin had overwritten it
            super().apply(event)

    events = lane_events(0, [("c1", ReasonCode.NOT_RESUMED, "ran")] * 3)
    record(tmp_path / "journal.sqlite3", events, RunStatus.SUCCEEDED, 2)
    with open_journal(str(tmp_path / "journal.sqlite3")) as store:
        journaled = list(store.events(RUN_ID))
    live = fold(Lossy(), journaled).view()
    mismatch = manifest_mismatch(journaled, live)
    assert mismatch is not None
    assert "differs from the journal's fold (3 decisions) in decisions, not_started" in (
        mismatch.message
    )
    assert mismatch.view == fold(ManifestProjection(), journaled).view()


def test_the_committed_fold_names_a_fold_that_loses_decisions(tmp_path: Path) -> None:
    """The same lossy live fold, caught by the fold of the committed batches alone."""

    class Lossy(ManifestProjection):
        def apply(self, event: Any) -> None:
            if isinstance(event, StageExecuted) and event.lane == "l0" and event.chunk == "c1":
                return
            super().apply(event)

    events = lane_events(0, [("c1", ReasonCode.NOT_RESUMED, "ran")] * 3)
    committed = CommittedFold()
    record(tmp_path / "journal.sqlite3", events, RunStatus.SUCCEEDED, 2, committed)
    with open_journal(str(tmp_path / "journal.sqlite3")) as store:
        journaled = list(store.events(RUN_ID))
    live = fold(Lossy(), journaled).view()
    mismatch = fold_mismatch(committed.view(), committed.journaled, live)
    assert mismatch is not None
    assert "differs from the journal's fold (3 decisions) in decisions, not_started" in (
        mismatch.message
    )
    assert mismatch.view == fold(ManifestProjection(), journaled).view()
