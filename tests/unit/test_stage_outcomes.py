"""Stage outcomes: a decision to execute counts only once its stage ran (hypothesis).

projections/stage_outcomes.py: over any run that stops somewhere, the reasons view, the
manifest and the report agree: `totals`/`decisions` plus `not_started` are every decision
journaled, a decision is `executed` exactly when its stage's `StageExecuted` follows, and
a stage that never ran is never counted under its reason code.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    RunAllocated,
    RunPhase,
    RunStatus,
    RunTerminated,
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

T0 = datetime(2026, 12, 1, tzinfo=UTC)

# Per chunk: its decision code and what happened to the stage afterwards.
CHUNK = st.tuples(
    st.sampled_from([ReasonCode.NOT_RESUMED, ReasonCode.REUSED, ReasonCode.INPUT_CHANGED]),
    st.sampled_from(["ran", "never", "failed"]),
)


def _run(lanes: list[list[tuple[ReasonCode, str]]], status: RunStatus) -> list:
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
    for n, chunks in enumerate(lanes):
        lane = f"l{n}"
        run.resolve_lane(
            step="s",
            lane=lane,
            components=LaneComponents("c", "m", "", "", "", "", ""),
            lane_identity=f"id-{lane}",
            dependencies=[],
            chunks=len(chunks),
            forced=False,
        )  # before its decisions, as the aggregate wants
        for i, (code, _fate) in enumerate(chunks):  # every extract decided first
            run.trigger(StageDecided, **_decision(lane, f"c{i}", code))
        for i, (code, fate) in enumerate(chunks):
            if code is ReasonCode.REUSED or fate == "never":
                continue
            stage = {"step": "s", "lane": lane, "stage": Stage.EXTRACT, "chunk": f"c{i}"}
            if fate == "ran":
                run.trigger(StageExecuted, **stage, sha256="e" * 64, size=1)
            else:
                run.trigger(StageDecided, **_decision(lane, f"c{i}", ReasonCode.STAGE_FAILED))
                run.trigger(StageFailed, **stage, code=ReasonCode.STAGE_FAILED, message="boom")
    run.trigger(RunTerminated, status=status, phase=RunPhase.EXECUTION)
    return run.collect_events()


def _decision(lane: str, chunk: str, code: ReasonCode) -> dict:
    return {
        "step": "s",
        "lane": lane,
        "stage": Stage.EXTRACT,
        "chunk": chunk,
        "code": code,
        "category": category_of(code),
        "detail": detail_for(code),
        "forced": False,
        "resumed": False,
        "failed": code is ReasonCode.STAGE_FAILED,
        "checkpoint": CheckpointState.NOT_LOOKED_UP,
        "input": "i",
        "dependencies": "",
        "recorded": {},
    }


@settings(max_examples=150, deadline=None)
@given(
    lanes=st.lists(st.lists(CHUNK, min_size=1, max_size=4), min_size=1, max_size=4),
    status=st.sampled_from([RunStatus.INTERRUPTED, RunStatus.FAILED, RunStatus.SUCCEEDED]),
)
def test_only_stages_that_took_effect_are_counted(
    lanes: list[list[tuple[ReasonCode, str]]], status: RunStatus
) -> None:
    events = _run(lanes, status)
    every: dict[str, int] = {}
    for e in events:
        if isinstance(e, StageDecided):
            every[e.code.value] = every.get(e.code.value, 0) + 1
    never: dict[str, int] = {}
    for chunks in lanes:
        for code, fate in chunks:
            if code is not ReasonCode.REUSED and fate == "never":
                never[code.value] = never.get(code.value, 0) + 1
    reasons = fold(ReasonReportProjection(), events).view()
    assert reasons["not_started"] == dict(sorted(never.items()))
    merged = {k: reasons["totals"].get(k, 0) + never.get(k, 0) for k in every}
    assert merged == every
    for view in (
        fold(ManifestProjection(), events).view(),
        fold(ReportProjection(), events).view(),
    ):
        assert view["decisions"] == reasons["totals"]
        assert view["not_started"] == reasons["not_started"]
    outcomes = [
        d["outcome"]
        for s in reasons["steps"]
        for lane in s["lanes"]
        for d in lane["decisions"]
        if d["code"] != "stage_failed"
    ]
    expected = [
        "reused" if code is ReasonCode.REUSED else {"ran": "executed"}.get(fate, fate)
        for chunks in lanes
        for code, fate in chunks
    ]
    assert outcomes == [o.replace("never", "not_started") for o in expected]


def test_immediate_is_the_at_once_table_for_every_category() -> None:
    """`immediate` compares members by identity (their hash is a Python call): it must
    answer what the `_AT_ONCE` table says, for every category."""
    from types import SimpleNamespace

    from runjournal.domain.reasons import Category
    from runjournal.projections.stage_outcomes import _AT_ONCE, immediate

    for category in Category:
        event = SimpleNamespace(category=category)
        assert immediate(event) is _AT_ONCE.get(category)  # type: ignore[arg-type]
