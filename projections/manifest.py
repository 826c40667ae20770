"""The run manifest (`manifest.json`): a fold of the run's journal events.

It carries identities, counts and output digests only: never the accepted chunk map,
generated reference bytes or secrets.

`validation.status` is `passed` or `failed` once the run has terminated
(docs/internals.md "One run, phase by phase"):
`passed` only when `OutputsValidated` checked the outputs and refused none; a run that
terminated before its outputs were checked (failed, interrupted or abandoned earlier)
shows `failed`. `pending` exists only in the in-memory view of a run still running;
`manifest.json` is written at terminalization and never carries it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import (
    ArtifactGenerated,
    LaneResolved,
    OutputsValidated,
    RunEvent,
    RunTerminated,
    StageDecided,
    WarningRecorded,
)
from runjournal.domain.identity import LaneIdentities, invocation_identity
from runjournal.domain.runner.stage_failures import PARTIAL_OUTPUT
from runjournal.projections.base import RunOutline
from runjournal.projections.llm_usage import LLMUsageFold
from runjournal.projections.streamed import Streamed

WORKSPACE_SCHEMA_VERSION = 3


class ManifestProjection(RunOutline):
    NAME: ClassVar[str] = "manifest"
    # 2: `decisions` counts only decisions that took effect; `not_started` the others
    # 3: `partial`, the lanes of `partial = true` steps that ran without some documents
    VERSION: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        self.lane_identities = LaneIdentities()  # 32 bytes a lane (issue 29)
        self.artifacts = 0
        self.warnings = 0
        self.validation: dict[str, Any] = {"status": "pending", "outputs_checked": 0, "refused": []}
        self.validated = False
        self.llm = LLMUsageFold()
        self.partial: list[dict[str, str]] = []

    def apply(self, event: RunEvent) -> None:
        if type(event) is StageDecided:  # the outline's alone (base.py)
            self.decided(event)
            return
        super().apply(event)
        self.llm.apply(event)
        if isinstance(event, LaneResolved):
            self.lane_identities.append(event.lane_identity)
        elif isinstance(event, ArtifactGenerated):
            self.artifacts += 1
            self.warnings += len(event.warnings)
        elif isinstance(event, OutputsValidated):
            self.validated = True
            self.validation = {
                "status": "failed" if event.refused else "passed",
                "outputs_checked": event.checked,
                "refused": [{"name": r.name, "refusal": r.refusal} for r in event.refused],
            }
        elif isinstance(event, WarningRecorded) and event.message.startswith(PARTIAL_OUTPUT):
            self.partial.append({"step": event.step, "lane": event.lane})
        elif isinstance(event, RunTerminated) and not self.validated:
            # terminated before its outputs were checked
            self.validation = {**self.validation, "status": "failed"}

    def view(self) -> dict[str, Any]:
        view = self.head()
        view["outputs"] = list(self.output_dicts(by_name=True))
        return view

    def streamed_view(self) -> Streamed:
        """`view()` with its outputs made one at a time as it is written (`manifest.json`
        of a run of many outputs; issue 29: peak RSS)."""
        return Streamed(self.head(), "outputs", self.output_dicts(by_name=True))

    def head(self) -> dict[str, Any]:
        """`view()` without its `outputs`."""
        view = self._view()
        if self.llm.used:  # runs that made or reused LLM calls (docs/operations.md)
            view["llm"] = self.llm.view()
        if self.partial:  # a --keep-going run's partial outputs (docs/pipeline.md "`partial`")
            view["partial"] = self.partial
        return view

    def _view(self) -> dict[str, Any]:
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
            "decisions": dict(sorted(self.decisions.items())),
            "not_started": self.not_started,
            "plans": dict(sorted(self.plans.items())),
            "validation": self.validation,
            "error": self.error,
            "persistence_failures": self.persistence_failures,
            "projection": {"name": self.NAME, "version": self.VERSION},
        }
