"""`JournalSpans`: step, lane and stage trace spans derived from the run's journal events."""

from __future__ import annotations

import contextlib

from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    CheckpointWritten,
    ChunkPlanResolved,
    LaneResolved,
    OutputsValidated,
    OutputWritten,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.ports import TraceRecorder


class JournalSpans:
    """A journal listener that turns run events into trace spans (no runner change).

    Steps and lanes get `begin`/`end` records, stages their decisions, executions and
    failures. Unattached (no trace requested) it does nothing and keeps no state. A
    recorder that fails (`RECORDER_ERRORS`) never reaches `emit`: the failure is noted in
    the trace instead. Any other exception is a bug in the translation and propagates.
    """

    # What a TraceRecorder may raise when it cannot record: I/O, encoding, its own state.
    RECORDER_ERRORS = (OSError, ValueError, RuntimeError)

    def __init__(self) -> None:
        self._trace: TraceRecorder | None = None
        self._step: str | None = None
        self._step_lanes = 0

    def attach(self, trace: TraceRecorder | None) -> None:
        self._trace = trace

    def __call__(self, event: RunEvent) -> None:
        trace = self._trace
        if trace is None:
            return
        try:
            self._translate(trace, event)
        except self.RECORDER_ERRORS as exc:  # the trace is lost, not the run: leave a note
            with contextlib.suppress(*self.RECORDER_ERRORS):
                trace.record("trace", "error", {"error": f"{type(exc).__name__}: {exc}"})

    def _end_step(self, trace: TraceRecorder, status: str) -> None:
        if self._step is not None:
            trace.record(
                "step", self._step, {"event": "end", "lanes": self._step_lanes, "status": status}
            )
            self._step = None

    def _translate(self, trace: TraceRecorder, e: RunEvent) -> None:
        if isinstance(e, ChunkPlanResolved):
            trace.record(
                "plan",
                e.source,
                {"plan_key": e.plan_key, "outcomes": e.outcomes, "chunks": e.chunks},
            )
        elif isinstance(e, LaneResolved):
            if e.step != self._step:
                self._end_step(trace, "done")
                self._step, self._step_lanes = e.step, 0
                trace.record("step", e.step, {"event": "begin"})
            self._step_lanes += 1
            trace.record(
                "lane",
                f"{e.step}/{e.lane}",
                {
                    "event": "begin",
                    "step": e.step,
                    "lane": e.lane,
                    "lane_identity": e.lane_identity,
                    "chunks": e.chunks,
                    "forced": e.forced,
                    "dependencies": len(e.dependencies),
                },
            )
        elif isinstance(e, StageDecided):
            trace.record(
                "stage",
                e.stage.value,
                {
                    "event": "decided",
                    "step": e.step,
                    "lane": e.lane,
                    "chunk": e.chunk,
                    "code": e.code,
                    "category": e.category,
                    "checkpoint": e.checkpoint,
                    "forced": e.forced,
                    "resumed": e.resumed,
                },
            )
        elif isinstance(e, StageExecuted):
            trace.record(
                "stage",
                e.stage.value,
                {
                    "event": "executed",
                    "step": e.step,
                    "lane": e.lane,
                    "chunk": e.chunk,
                    "sha256": e.sha256,
                    "size": e.size,
                },
            )
        elif isinstance(e, StageFailed):
            where = {"step": e.step, "lane": e.lane, "chunk": e.chunk, "code": e.code}
            trace.record("stage", e.stage.value, {"event": "failed", **where, "message": e.message})
            trace.record("lane", f"{e.step}/{e.lane}", {"event": "end", "status": "failed"})
        elif isinstance(e, CheckpointWritten | CheckpointWriteFailed):
            ok = isinstance(e, CheckpointWritten)
            trace.record(
                "checkpoint",
                e.stage.value,
                {"step": e.step, "lane": e.lane, "chunk": e.chunk, "written": ok},
            )
        elif isinstance(e, ArtifactGenerated):
            trace.record(
                "lane",
                f"{e.step}/{e.lane}",
                {
                    "event": "end",
                    "status": "restored" if e.restored else "done",
                    "kind": e.kind,
                    "sha256": e.sha256,
                    "size": e.size,
                    "warnings": len(e.warnings),
                },
            )
        elif isinstance(e, OutputsValidated):
            trace.record("outputs", "validated", {"checked": e.checked, "refused": e.refused})
        elif isinstance(e, OutputWritten):
            trace.record("output", e.name, {"sha256": e.sha256, "size": e.size})
        elif isinstance(e, RunTerminated):
            self._end_step(trace, e.status.value)
            trace.record("run", "terminated", {"status": e.status, "phase": e.phase})
