"""The debug summary: the content of a debug bundle's `run.json`, `warnings.json`, `failure.json`.

A pure fold of one run's events. The CLI feeds it live (a journal session listener) and
writes its view's parts into `<debug root>/<run id>/summary/`; `projections rebuild
debug_summary` folds the same events read back from the journal, so a rebuilt view equals
the live one. It carries identities, counts and messages only: never reference, source or
artifact bytes.

One difference is inherent: a debug write that fails is journaled (as
`TerminalPersistenceFailed`) after the documents were written, so only the rebuilt view
can list it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    LaneResolved,
    OutputsValidated,
    RunEvent,
    RunStatus,
    StageExecuted,
    WarningRecorded,
)
from runjournal.projections.base import RunOutline
from runjournal.projections.llm_usage import LLMUsageFold

__all__ = ["DebugSummaryProjection"]


class DebugSummaryProjection(RunOutline):
    """Folds a run's events into `{"run": …, "warnings": …, "failure": … | None}`."""

    NAME: ClassVar[str] = "debug_summary"
    # 2: `decisions` counts only decisions that took effect (projections/base.py)
    VERSION: ClassVar[int] = 2

    def __init__(self) -> None:
        super().__init__()
        self.lanes = 0
        self.artifacts = 0
        self.restored_artifacts = 0
        self.module_calls = 0
        self.forced_steps: list[str] = []
        self.refused: list[dict[str, str]] = []
        self.warnings: list[dict[str, str]] = []
        self.checkpoint_write_failures: list[dict[str, str]] = []
        self.llm = LLMUsageFold()

    def apply(self, event: RunEvent) -> None:
        super().apply(event)
        self.llm.apply(event)
        if isinstance(event, StageExecuted):
            self.module_calls += 1
        elif isinstance(event, LaneResolved):
            self.lanes += 1
            if event.forced and event.step not in self.forced_steps:
                self.forced_steps.append(event.step)
        elif isinstance(event, ArtifactGenerated):
            self.artifacts += 1
            self.restored_artifacts += int(event.restored)
            self.warnings.extend(
                {"step": event.step, "lane": event.lane, "message": message}
                for message in event.warnings
            )
        elif isinstance(event, WarningRecorded):
            self.warnings.append({"step": event.step, "lane": event.lane, "message": event.message})
        elif isinstance(event, CheckpointWriteFailed):
            self.checkpoint_write_failures.append(
                {
                    "step": event.step,
                    "lane": event.lane,
                    "stage": event.stage.value,
                    "chunk": event.chunk,
                    "message": event.message,
                }
            )
        elif isinstance(event, OutputsValidated):
            self.refused = [{"name": r.name, "refusal": r.refusal} for r in event.refused]

    def view(self) -> dict[str, Any]:
        return {"run": self._run(), "warnings": self._warnings(), "failure": self._failure()}

    def _run(self) -> dict[str, Any]:
        """`run.json`: the outcome of the run in counts and identities (and LLM usage)."""
        run = self._outline()
        if self.llm.used:
            run["llm"] = self.llm.view()
        return run

    def _outline(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "tool_version": self.tool_version,
            "status": self.status.value,
            "phase": self.phase,
            "started": self.started,
            "ended": self.ended,
            "decisions": dict(sorted(self.decisions.items())),
            "plans": dict(sorted(self.plans.items())),
            "lanes": self.lanes,
            "artifacts": self.artifacts,
            "restored_artifacts": self.restored_artifacts,
            "module_calls": self.module_calls,
            "forced_steps": list(self.forced_steps),
            "outputs": list(self.output_dicts(by_name=True)),
            "warnings": len(self.warnings),
            "checkpoint_write_failures": list(self.checkpoint_write_failures),
            "persistence_failures": list(self.persistence_failures),
            "error": self.error,
            "projection": {"name": self.NAME, "version": self.VERSION},
        }

    def _warnings(self) -> dict[str, Any]:
        """`warnings.json`: every module and validator warning, in journal order."""
        return {"count": len(self.warnings), "warnings": [dict(w) for w in self.warnings]}

    def _failure(self) -> dict[str, Any] | None:
        """`failure.json`: only for a run that terminated without succeeding."""
        if self.status in (RunStatus.RUNNING, RunStatus.SUCCEEDED):
            return None
        return {
            "run_id": self.run_id,
            "status": self.status.value,
            "phase": self.phase,
            "error": self.error,
            "refused": [dict(r) for r in self.refused],
        }
