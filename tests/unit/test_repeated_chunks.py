"""Repeated chunk ids: every decision is counted once, whatever its stage key shares.

A chunk's id is the digest of its source name and bytes (domain/identity.py), so a
document that repeats a paragraph has chunks with one id: one lane decides every one of
them before any runs (domain/runner/lanes.py). Each decision to execute must be settled
by its own stage's `StageExecuted`, in decision order, never overwritten by its twin
(issue #25: a cold run's manifest counted fewer decisions than the journal held, and
`journal audit` of the untouched run failed).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    RunAllocated,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
)
from runjournal.domain.identity import LaneComponents
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection
from runjournal.projections.report import ReportProjection
from runjournal.projections.stage_outcomes import Outcome, PendingStages

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _decided(chunk: str, code: ReasonCode = ReasonCode.NOT_RESUMED) -> dict:
    return {
        "step": "s",
        "lane": "l",
        "stage": Stage.EXTRACT,
        "chunk": chunk,
        "code": code,
        "category": category_of(code),
        "detail": detail_for(code),
        "forced": False,
        "resumed": False,
        "failed": False,
        "checkpoint": CheckpointState.NOT_LOOKED_UP,
        "input": "i",
        "dependencies": "",
        "recorded": {},
    }


def _events(chunks: list[str], ran: int, status: RunStatus) -> list[RunEvent]:
    """One lane deciding `chunks` in order, then the first `ran` of them executed."""
    t = [T0]

    def tick() -> datetime:
        t[0] += timedelta(milliseconds=1)
        return t[0]

    run = Run(run_aggregate_id("r"), tick)
    run.trigger(
        RunAllocated,
        run_id="r",
        pipeline="p",
        pipeline_file="/p.toml",
        argv=[],
        tool_version="0",
        run_dir="/out/r",
        output_root="/out",
        cache_root="/c",
        workspace=None,
        debug_bundle=None,
        host="h",
        pid=1,
        process_start=0.0,
    )
    lane = "l"
    run.resolve_lane(
        step="s",
        lane=lane,
        components=LaneComponents("c", "m", "", "", "", "", ""),
        lane_identity=f"id-{lane}",
        dependencies=[],
        chunks=len(chunks),
        forced=False,
    )  # before its decisions, as the aggregate wants
    for chunk in chunks:
        run.trigger(StageDecided, **_decided(chunk))
    for chunk in chunks[:ran]:
        run.trigger(
            StageExecuted,
            step="s",
            lane="l",
            stage=Stage.EXTRACT,
            chunk=chunk,
            sha256="e" * 64,
            size=1,
        )
    run.trigger(RunTerminated, status=status, phase=RunPhase.EXECUTION)
    return run.collect_events()


def test_twin_decisions_are_settled_one_each_in_decision_order() -> None:
    pending = PendingStages()
    events = _events(["a", "b", "a", "a"], ran=4, status=RunStatus.SUCCEEDED)
    decided = [e for e in events if isinstance(e, StageDecided)]
    for n, event in enumerate(decided):
        assert pending.apply(event, n) is None
    settled = [pending.apply(e) for e in events if isinstance(e, StageExecuted)]
    assert settled == [
        (0, Outcome.EXECUTED),
        (1, Outcome.EXECUTED),
        (2, Outcome.EXECUTED),
        (3, Outcome.EXECUTED),
    ]
    assert pending.never_started() == []


def test_a_repeated_chunk_is_counted_as_often_as_it_was_decided() -> None:
    events = _events(["a", "b", "a", "c", "a"], ran=5, status=RunStatus.SUCCEEDED)
    for projection in (ManifestProjection(), ReportProjection()):
        view = fold(projection, events).view()
        assert view["decisions"] == {"not_resumed": 5}, type(projection).__name__
        assert view["not_started"] == {}
    reasons = fold(ReasonReportProjection(), events).view()
    assert reasons["totals"] == {"not_resumed": 5} and reasons["not_started"] == {}
    outcomes = [d["outcome"] for d in reasons["steps"][0]["lanes"][0]["decisions"]]
    assert outcomes == ["executed"] * 5


@settings(max_examples=100, deadline=None)
@given(
    chunks=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8),
    data=st.data(),
)
def test_every_decision_is_executed_or_not_started(chunks: list[str], data: st.DataObject) -> None:
    ran = data.draw(st.integers(min_value=0, max_value=len(chunks)))
    status = RunStatus.SUCCEEDED if ran == len(chunks) else RunStatus.INTERRUPTED
    events = _events(chunks, ran, status)
    manifest = fold(ManifestProjection(), events).view()
    assert manifest["decisions"] == ({"not_resumed": ran} if ran else {})
    never = len(chunks) - ran
    assert manifest["not_started"] == ({"not_resumed": never} if never else {})
    reasons = fold(ReasonReportProjection(), events).view()
    outcomes = [d["outcome"] for d in reasons["steps"][0]["lanes"][0]["decisions"]]
    assert outcomes == ["executed"] * ran + ["not_started"] * never


# --- issue 32: explain's word for a twin whose identical stage ran --------------------------


def _explain(events: list[RunEvent]) -> str:
    from runjournal.cli.explain import Selection, text_lines
    from runjournal.cli.style import Styler

    view = fold(ReasonReportProjection(), events).view()
    return "\n".join(text_lines("r", view, Selection(), Styler(False)))


def test_a_twin_whose_identical_stage_ran_is_deduplicated_not_stopped_before() -> None:
    """A successful run whose repeated identical chunk ran once: explain said the run
    "stopped before" the twins; they are deduplicated (reused from this run)."""
    events = _events(["a", "b", "a", "a"], ran=2, status=RunStatus.SUCCEEDED)
    reasons = fold(ReasonReportProjection(), events).view()
    outcomes = [d["outcome"] for d in reasons["steps"][0]["lanes"][0]["decisions"]]
    assert outcomes == ["executed", "executed", "deduplicated", "deduplicated"]
    assert reasons["outcomes"] == {"executed": 2, "deduplicated": 2}
    # counted as the manifest counts them (its invariant with the reasons view holds)
    assert reasons["not_started"] == {"not_resumed": 2} and reasons["totals"] == {"not_resumed": 2}
    text = _explain(events)
    assert "stopped before" not in text and "not started" not in text
    assert "stages: 2 executed, 2 deduplicated" in text
    assert "(deduplicated: an identical chunk of this run ran)" in text
    # The manifest's counts are unchanged: every decision is still counted once.
    manifest = fold(ManifestProjection(), events).view()
    assert sum(manifest["decisions"].values()) + sum(manifest["not_started"].values()) == 4


def test_a_stage_that_never_ran_at_all_is_still_not_started() -> None:
    events = _events(["a", "b", "c"], ran=1, status=RunStatus.INTERRUPTED)
    text = _explain(events)
    assert "stages: 1 executed, 2 not started" in text
    assert "the run stopped before them" in text and "deduplicated" not in text
