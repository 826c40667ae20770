"""The run manifest (`manifest.json`): a fold of the run's journal events.

It carries identities, counts and output digests only: never the accepted chunk map,
generated reference bytes or secrets.

`validation.status` is `passed` or `failed` once the run has terminated (SEMANTICS §9):
`passed` only when `OutputsValidated` checked the outputs and refused none; a run that
terminated before its outputs were checked (failed, interrupted or abandoned earlier)
shows `failed`. `pending` exists only in the in-memory view of a run still running;
`manifest.json` is written at terminalization and never carries it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import (
    ArtifactGenerated,
    ChunkPlanResolved,
    LaneResolved,
    OutputsValidated,
    OutputWritten,
    RunAllocated,
    RunEvent,
    RunStatus,
    RunTerminated,
    StageDecided,
    TerminalPersistenceFailed,
)
from runjournal.domain.identity import invocation_identity
from runjournal.projections.base import error_view

WORKSPACE_SCHEMA_VERSION = 3


class ManifestProjection:
    NAME: ClassVar[str] = "manifest"
    VERSION: ClassVar[int] = 1

    def __init__(self) -> None:
        self.run_id = ""
        self.pipeline = ""
        self.tool_version = ""
        self.status = RunStatus.RUNNING
        self.phase: str | None = None
        self.started: str | None = None
        self.ended: str | None = None
        self.lane_identities: list[str] = []
        self.decisions: dict[str, int] = {}
        self.plans: dict[str, int] = {}
        self.outputs: list[dict[str, Any]] = []
        self.artifacts = 0
        self.warnings = 0
        self.validation: dict[str, Any] = {"status": "pending", "outputs_checked": 0, "refused": []}
        self.validated = False
        self.error: dict[str, Any] | None = None
        self.persistence_failures: list[dict[str, str]] = []

    def apply(self, event: RunEvent) -> None:
        if isinstance(event, StageDecided):
            code = event.code.value
            self.decisions[code] = self.decisions.get(code, 0) + 1
        elif isinstance(event, LaneResolved):
            self.lane_identities.append(event.lane_identity)
        elif isinstance(event, ArtifactGenerated):
            self.artifacts += 1
            self.warnings += len(event.warnings)
        elif isinstance(event, ChunkPlanResolved):
            for outcome in event.outcomes:
                self.plans[outcome.value] = self.plans.get(outcome.value, 0) + 1
        elif isinstance(event, OutputWritten):
            self.outputs.append({"name": event.name, "sha256": event.sha256, "size": event.size})
        elif isinstance(event, OutputsValidated):
            self.validated = True
            self.validation = {
                "status": "failed" if event.refused else "passed",
                "outputs_checked": event.checked,
                "refused": [{"name": r.name, "refusal": r.refusal} for r in event.refused],
            }
        elif isinstance(event, RunAllocated):
            self.run_id = event.run_id
            self.pipeline = event.pipeline
            self.tool_version = event.tool_version
            self.started = event.timestamp.isoformat()
        elif isinstance(event, RunTerminated):
            self.status = event.status
            self.phase = event.phase.value
            self.ended = event.timestamp.isoformat()
            if not self.validated:  # terminated before its outputs were checked
                self.validation = {**self.validation, "status": "failed"}
            self.error = error_view(event.error)
        elif isinstance(event, TerminalPersistenceFailed):
            self.persistence_failures.append({"target": event.target, "message": event.message})

    def view(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "status": self.status.value,
            "phase": self.phase,
            "started": self.started,
            "ended": self.ended,
            "workspace_schema_version": WORKSPACE_SCHEMA_VERSION,
            "tool_version": self.tool_version,
            "invocation_identity": invocation_identity(self.lane_identities),
            "lanes": len(self.lane_identities),
            "artifacts": self.artifacts,
            "warnings": self.warnings,
            "outputs": sorted(self.outputs, key=lambda o: o["name"]),
            "decisions": dict(sorted(self.decisions.items())),
            "plans": dict(sorted(self.plans.items())),
            "validation": self.validation,
            "error": self.error,
            "persistence_failures": self.persistence_failures,
            "projection": {"name": self.NAME, "version": self.VERSION},
        }
