"""The debug-summary projection: a pure fold of hand-built events into run/warnings/failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from runjournal.adapters.projection_store import available_projections
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    ChunkPlanResolved,
    ConfigurationResolved,
    FileFingerprint,
    InputsFingerprinted,
    LaneResolved,
    OutputsValidated,
    OutputWritten,
    PlanOutcome,
    RefusedName,
    RunAllocated,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    Setting,
    StageDecided,
    StageExecuted,
    TerminalPersistenceFailed,
    WarningRecorded,
)
from runjournal.domain.identity import LaneComponents
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.projections.base import fold, storage_name
from runjournal.projections.debug_summary import DebugSummaryProjection

T0 = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)
COMPS = LaneComponents("c", "m", "", "", "", "", "")
SECRET_SOURCE = "never-in-a-summary"  # names and settings the summary must not copy


class Journal:
    """A run's events, built through the real aggregate (versions, invariants, clock)."""

    def __init__(self, run_id: str = "r1") -> None:
        t = [T0]

        def tick() -> datetime:
            t[0] += timedelta(seconds=1)
            return t[0]

        self.run = Run(run_aggregate_id(run_id), tick)
        self.emit(
            RunAllocated,
            run_id=run_id,
            pipeline="p",
            pipeline_file="/p.toml",
            argv=[],
            tool_version="0.1.0",
            run_dir=f"/out/{run_id}",
            output_root="/out",
            cache_root="/c",
            workspace=None,
            debug_bundle=f"/out/debug/{run_id}",
            host="h",
            pid=1,
            process_start=0.0,
        )

    def emit(self, event_type: type[RunEvent], **fields: Any) -> None:
        self.run.trigger(event_type, **fields)

    def lane(self, step: str, lane: str, *, forced: bool = False) -> None:
        self.emit(
            LaneResolved,
            step=step,
            lane=lane,
            components=COMPS,
            lane_identity=f"id-{step}-{lane}",
            dependencies=[],
            chunks=1,
            forced=forced,
        )

    def decide(self, step: str, lane: str, stage: Stage, code: ReasonCode) -> None:
        self.emit(
            StageDecided,
            step=step,
            lane=lane,
            stage=stage,
            chunk="",
            code=code,
            category=category_of(code),
            detail=detail_for(code),
            forced=code is ReasonCode.FORCED_RECOMPUTE,
            resumed=False,
            checkpoint=CheckpointState.NOT_LOOKED_UP,
            input="i",
            dependencies="",
            recorded={},
        )

    def execute(self, step: str, lane: str, stage: Stage) -> None:
        self.emit(
            StageExecuted, step=step, lane=lane, stage=stage, chunk="", sha256="e" * 64, size=4
        )

    def artifact(self, step: str, lane: str, warnings: list[str], *, restored: bool = False):
        self.emit(
            ArtifactGenerated,
            step=step,
            lane=lane,
            kind="k",
            schema="k/v1",
            media_type="application/json",
            sha256="a" * 64,
            size=10,
            warnings=warnings,
            restored=restored,
        )

    def events(self) -> list[RunEvent]:
        return list(self.run.collect_events())


def busy_run(journal: Journal) -> None:
    """Two steps, a forced one, warnings, a checkpoint failure and two outputs."""
    journal.emit(ConfigurationResolved, settings=[Setting("debug", SECRET_SOURCE, "flag")])
    journal.emit(
        InputsFingerprinted,
        sources=[FileFingerprint(SECRET_SOURCE, "s" * 64, 3)],
        references=[FileFingerprint("refs/r.md", "f" * 64, 9)],
    )
    journal.emit(
        ChunkPlanResolved,
        source="a.md",
        plan_key="k" * 64,
        outcomes=[PlanOutcome.COMPUTED, PlanOutcome.PUBLISHED],
        chunks=1,
    )
    journal.emit(
        ChunkPlanResolved, source="b.md", plan_key="l" * 64, outcomes=[PlanOutcome.REUSED], chunks=1
    )
    for lane in ("a.md", "b.md"):
        journal.lane("terms", lane)
        journal.decide("terms", lane, Stage.NORMALIZE, ReasonCode.PREDECESSOR_REUSED)
        journal.artifact("terms", lane, [], restored=True)
    for lane in ("a.md", "b.md"):
        journal.lane("gloss", lane, forced=True)
        for stage in (Stage.EXTRACT, Stage.MERGE, Stage.NORMALIZE):
            journal.decide("gloss", lane, stage, ReasonCode.FORCED_RECOMPUTE)
            journal.execute("gloss", lane, stage)
        journal.artifact("gloss", lane, [f"{lane} one", f"{lane} two"])
    journal.emit(
        CheckpointWriteFailed,
        step="gloss",
        lane="b.md",
        stage=Stage.MERGE,
        chunk="",
        message="could not write checkpoint: disk full",
    )
    journal.emit(WarningRecorded, step="gloss", lane="corpus", message="validator said so")
    journal.emit(OutputsValidated, checked=2, refused=[])
    journal.emit(OutputWritten, name="z.md", sha256="d" * 64, size=3)
    journal.emit(OutputWritten, name="artifacts/a.json", sha256="c" * 64, size=5)


def test_it_is_a_named_versioned_projection_the_store_finds() -> None:
    assert DebugSummaryProjection.NAME == "debug_summary"
    assert DebugSummaryProjection.VERSION == 2
    assert storage_name(DebugSummaryProjection) == "debug_summary.v2"
    specs = {s.name: s for s in available_projections()}
    assert specs["debug_summary"].cls is DebugSummaryProjection
    assert specs["debug_summary"].per_run
    assert specs["debug_summary"].storage() == ".runjournal/views/debug_summary.v2"


def test_successful_run() -> None:
    journal = Journal()
    busy_run(journal)
    journal.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
    journal.emit(TerminalPersistenceFailed, target="report", message="could not write report: x")
    view = fold(DebugSummaryProjection(), journal.events()).view()

    run = view["run"]
    assert run["run_id"] == "r1" and run["pipeline"] == "p" and run["tool_version"] == "0.1.0"
    assert run["status"] == "succeeded" and run["phase"] == "execution"
    assert run["started"] == (T0 + timedelta(seconds=1)).isoformat()
    assert run["ended"] is not None and run["ended"] > run["started"]
    assert run["decisions"] == {"forced_recompute": 6, "predecessor_reused": 2}
    assert list(run["decisions"]) == sorted(run["decisions"])
    assert run["plans"] == {"computed": 1, "published": 1, "reused": 1}
    assert run["lanes"] == 4
    assert run["artifacts"] == 4 and run["restored_artifacts"] == 2
    assert run["module_calls"] == 6  # StageExecuted events, not decisions
    assert run["forced_steps"] == ["gloss"]  # once, however many lanes were forced
    assert [o["name"] for o in run["outputs"]] == ["artifacts/a.json", "z.md"]
    assert run["outputs"][1] == {"name": "z.md", "sha256": "d" * 64, "size": 3}
    assert run["warnings"] == 5
    assert run["checkpoint_write_failures"] == [
        {
            "step": "gloss",
            "lane": "b.md",
            "stage": "merge",
            "chunk": "",
            "message": "could not write checkpoint: disk full",
        }
    ]
    assert run["persistence_failures"] == [
        {"target": "report", "message": "could not write report: x"}
    ]
    assert run["error"] is None
    assert run["projection"] == {"name": "debug_summary", "version": 2}

    assert view["warnings"] == {
        "count": 5,
        "warnings": [
            {"step": "gloss", "lane": "a.md", "message": "a.md one"},
            {"step": "gloss", "lane": "a.md", "message": "a.md two"},
            {"step": "gloss", "lane": "b.md", "message": "b.md one"},
            {"step": "gloss", "lane": "b.md", "message": "b.md two"},
            {"step": "gloss", "lane": "corpus", "message": "validator said so"},
        ],
    }
    assert view["failure"] is None


def test_identities_only() -> None:
    """Settings, source names and plan keys are not copied; the view is plain JSON data."""
    journal = Journal()
    busy_run(journal)
    journal.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
    view = fold(DebugSummaryProjection(), journal.events()).view()
    encoded = msgspec.json.encode(view)
    assert SECRET_SOURCE.encode() not in encoded
    assert b"k" * 64 not in encoded and b"refs/r.md" not in encoded
    assert msgspec.json.decode(encoded) == view


def test_failed_run_has_a_failure_document() -> None:
    journal = Journal()
    journal.lane("s", "b.md")
    journal.decide("s", "b.md", Stage.EXTRACT, ReasonCode.STAGE_FAILED)
    error = RunError(message="boom", step="s", lane="b.md", reason_code=ReasonCode.STAGE_FAILED)
    journal.emit(RunTerminated, status=RunStatus.FAILED, phase=RunPhase.EXECUTION, error=error)
    view = fold(DebugSummaryProjection(), journal.events()).view()
    expected_error = {"step": "s", "lane": "b.md", "reason_code": "stage_failed", "message": "boom"}
    assert view["run"]["error"] == expected_error
    assert view["run"]["module_calls"] == 0
    assert view["failure"] == {
        "run_id": "r1",
        "status": "failed",
        "phase": "execution",
        "error": expected_error,
        "refused": [],
    }


def test_refused_names_and_a_resolution_error() -> None:
    journal = Journal()
    journal.emit(OutputsValidated, checked=2, refused=[RefusedName("report.json", "reserved")])
    journal.emit(
        RunTerminated,
        status=RunStatus.FAILED,
        phase=RunPhase.TERMINALIZATION,
        error=RunError(message="refused output name 'report.json': reserved"),
    )
    failure = fold(DebugSummaryProjection(), journal.events()).view()["failure"]
    assert failure["refused"] == [{"name": "report.json", "refusal": "reserved"}]
    assert failure["error"]["step"] is None and failure["phase"] == "terminalization"

    journal = Journal()
    journal.emit(
        RunTerminated,
        status=RunStatus.FAILED,
        phase=RunPhase.RESOLUTION,
        error=RunError(message="p.toml: no input matches"),
    )
    view = fold(DebugSummaryProjection(), journal.events()).view()
    assert view["failure"]["phase"] == "resolution"
    assert view["failure"]["error"]["message"] == "p.toml: no input matches"
    assert view["run"]["lanes"] == 0 and view["warnings"] == {"count": 0, "warnings": []}


@pytest.mark.parametrize("status", [RunStatus.INTERRUPTED, RunStatus.ABANDONED])
def test_every_unsuccessful_end_has_a_failure_document(status: RunStatus) -> None:
    journal = Journal()
    journal.emit(RunTerminated, status=status, phase=RunPhase.RECOVERY)  # no error recorded
    failure = fold(DebugSummaryProjection(), journal.events()).view()["failure"]
    assert failure is not None
    assert failure["status"] == status.value and failure["error"] is None


def test_a_running_run_has_no_failure_yet() -> None:
    journal = Journal()
    journal.lane("s", "a.md")
    view = fold(DebugSummaryProjection(), journal.events()).view()
    assert view["run"]["status"] == "running" and view["run"]["phase"] is None
    assert view["run"]["ended"] is None and view["failure"] is None


def test_live_and_rebuilt_folds_agree_and_views_are_copies() -> None:
    """Fed event by event (live) or all at once (rebuild): the same view, never aliased."""
    journal = Journal()
    busy_run(journal)
    journal.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
    events = journal.events()
    live = DebugSummaryProjection()
    halfway = None
    for i, event in enumerate(events):
        live.apply(event)
        if i == len(events) // 2:
            halfway = live.view()
    assert halfway is not None and halfway["run"]["status"] == "running"
    first = live.view()
    first["warnings"]["warnings"].clear()
    first["run"]["outputs"].clear()
    first["run"]["forced_steps"].append("x")
    assert live.view() == fold(DebugSummaryProjection(), events).view()
    assert live.view()["warnings"]["count"] == len(live.view()["warnings"]["warnings"]) == 5
