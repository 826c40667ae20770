"""Projections are pure folds: the manifest and reason report from hand-built events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    ChunkPlanResolved,
    LaneResolved,
    OutputsValidated,
    OutputWritten,
    PlanOutcome,
    RefusedName,
    RunAllocated,
    RunError,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
)
from runjournal.domain.identity import LaneComponents, invocation_identity
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.projections.base import fold, storage_name
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection
from runjournal.projections.runs_index import RunsIndexProjection

T0 = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)
COMPS = LaneComponents("c", "m", "", "", "", "", "")


def clock():
    t = [T0]

    def tick():
        t[0] += timedelta(seconds=1)
        return t[0]

    return tick


def build_run(status=RunStatus.SUCCEEDED):
    run = Run(run_aggregate_id("r1"), clock())
    run.trigger(
        RunAllocated,
        run_id="r1",
        pipeline="p",
        pipeline_file="/p.toml",
        argv=[],
        tool_version="0.1.0",
        run_dir="/out/r1",
        output_root="/out",
        cache_root="/c",
        workspace=None,
        debug_bundle=None,
        host="h",
        pid=1,
        process_start=0.0,
    )
    run.trigger(
        ChunkPlanResolved,
        source="a.md",
        plan_key="k" * 64,
        outcomes=[PlanOutcome.COMPUTED, PlanOutcome.PUBLISHED],
        chunks=2,
    )
    for lane, lid in (("a.md", "id-a"), ("b.md", "id-b")):
        run.trigger(
            LaneResolved,
            step="s",
            lane=lane,
            components=COMPS,
            lane_identity=lid,
            dependencies=[],
            chunks=1,
            forced=False,
        )
        for stage, code in (
            (Stage.EXTRACT, ReasonCode.REUSED),
            (Stage.MERGE, ReasonCode.STAGE_INPUT_CHANGED),
        ):
            run.trigger(
                StageDecided,
                step="s",
                lane=lane,
                stage=stage,
                chunk="",
                code=code,
                category=category_of(code),
                detail=detail_for(code),
                forced=False,
                resumed=True,
                checkpoint=CheckpointState.PRESENT,
                input="i",
                dependencies="",
                recorded={"input": "old"} if code is ReasonCode.STAGE_INPUT_CHANGED else {},
            )
            if code is not ReasonCode.REUSED:  # the stage ran
                run.trigger(
                    StageExecuted,
                    step="s",
                    lane=lane,
                    stage=stage,
                    chunk="",
                    sha256="e" * 64,
                    size=1,
                )
    run.trigger(OutputsValidated, checked=1, refused=[])
    run.trigger(OutputWritten, name="out.md", sha256="d" * 64, size=3)
    error = (
        None
        if status is RunStatus.SUCCEEDED
        else RunError(message="boom", step="s", lane="b.md", reason_code=ReasonCode.STAGE_FAILED)
    )
    run.trigger(RunTerminated, status=status, phase=RunPhase.EXECUTION, error=error)
    return run.collect_events()


def test_manifest_fold():
    view = fold(ManifestProjection(), build_run()).view()
    assert view["run_id"] == "r1" and view["status"] == "succeeded"
    assert view["workspace_schema_version"] == 3
    assert view["decisions"] == {"reused": 2, "stage_input_changed": 2}
    assert view["plans"] == {"computed": 1, "published": 1}
    assert view["outputs"] == [{"name": "out.md", "sha256": "d" * 64, "size": 3}]
    assert view["invocation_identity"] == invocation_identity(["id-b", "id-a"])
    assert view["validation"]["status"] == "passed"
    assert view["error"] is None
    assert view["projection"] == {"name": "manifest", "version": ManifestProjection.VERSION}


def test_manifest_of_failed_run_and_refused_names():
    events = build_run(RunStatus.FAILED)
    view = fold(ManifestProjection(), events).view()
    assert view["status"] == "failed"
    assert view["error"]["reason_code"] == "stage_failed" and view["error"]["lane"] == "b.md"
    projection = ManifestProjection()
    projection.apply(
        OutputsValidated(
            originator_id=events[0].originator_id,
            originator_version=99,
            timestamp=T0,
            checked=2,
            refused=[RefusedName("x", "reserved")],
        )
    )
    assert projection.view()["validation"]["status"] == "failed"


def test_folding_twice_gives_the_same_view():
    events = build_run()
    assert fold(ManifestProjection(), events).view() == fold(ManifestProjection(), events).view()


def test_reason_report_groups_by_step_lane_stage():
    view = fold(ReasonReportProjection(), build_run()).view()
    assert view["totals"] == {"reused": 2, "stage_input_changed": 2}
    lanes = view["steps"][0]["lanes"]
    assert [lane["lane"] for lane in lanes] == ["a.md", "b.md"]
    assert lanes[0]["stages"] == {"extract": {"reused": 1}, "merge": {"stage_input_changed": 1}}
    assert lanes[0]["decisions"][1]["differs"] == ["input"]
    assert fold(ReasonReportProjection(step="other"), build_run()).view()["steps"] == []


def test_runs_index():
    view = fold(RunsIndexProjection(), build_run()).view()
    assert [(r["run_id"], r["status"]) for r in view["runs"]] == [("r1", "succeeded")]


def test_storage_name_includes_version():
    assert storage_name(ManifestProjection) == f"manifest.v{ManifestProjection.VERSION}"
