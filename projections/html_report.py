"""The run report behind `report.html`: a pure fold of one run's events into a view.

The view holds everything the page shows (docs/operations.md "The HTML run report"):
who the run is, its roots and timings, the step graph (steps in the order the run
resolved their lanes, edges from the producers each lane consumed), one matrix cell per
step and lane with its decisions by stage, the stage executions in time, reason-code
counts, warnings, failures and outputs. `projections/html_render.py` turns the view into
the page; both are deterministic, so the same journal always gives the same bytes.

Times are offsets from `RunAllocated`, taken from event timestamps only. Tokens and
cost are summed from any event that carries them (`SpendsTokens`, `SavesTokens`); a
journal without such events shows none.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    ConfigurationResolved,
    DebugBundleAllocated,
    InputsFingerprinted,
    LaneResolved,
    LLMCallAttempted,
    OutputsValidated,
    ProfileObserved,
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
    WarningRecorded,
)
from runjournal.domain.identity import LaneIdentities, invocation_identity
from runjournal.domain.reasons import Category
from runjournal.projections.base import RunOutline
from runjournal.projections.llm_batches import LLMBatchesFold
from runjournal.projections.llm_retries import RetryFold

__all__ = ["REPORT_HTML", "SEVERITY", "HtmlReportProjection", "SavesTokens", "SpendsTokens"]

# The page's name in a run directory (a reserved logical name: docs/operations.md).
REPORT_HTML = "report.html"

# A cell's colour is its most severe decision's category (first in this order).
SEVERITY: tuple[Category, ...] = (
    Category.FAILURE,
    Category.PREDECESSOR_FAILURE,
    Category.CORRUPT,
    Category.INVALID,
    Category.FORCED,
    Category.MISS,
    Category.EXECUTION,
    Category.REUSE,
)
_RANK = {category.value: rank for rank, category in enumerate(SEVERITY)}
_STAGE_ORDER = ("extract", "merge", "normalize")


@runtime_checkable
class SpendsTokens(Protocol):
    """An event of one LLM call (attempt): what it spent."""

    prompt_tokens: int
    completion_tokens: int
    cost: float | None


@runtime_checkable
class SavesTokens(Protocol):
    """An event of reused work that records what producing it had cost."""

    saved_prompt_tokens: int
    saved_completion_tokens: int
    saved_cost: float | None


def _seconds(delta: Any) -> float:
    return round(delta.total_seconds(), 6)


class _Cell:
    """One step and lane: its decisions by stage, executions, failure, artifact."""

    def __init__(self, event: LaneResolved) -> None:
        self.step = event.step
        self.lane = event.lane
        self.chunks = event.chunks
        self.forced = event.forced
        self.stages: dict[str, dict[str, int]] = {}
        self.details: dict[str, str] = {}
        self.code_category: dict[str, str] = {}
        self.category_counts: dict[str, int] = {}
        self.differs: set[str] = set()
        self.executed = 0
        self.failure: dict[str, str] | None = None
        self.artifact: dict[str, Any] | None = None
        self.warnings = 0

    def decided(self, event: StageDecided) -> None:
        codes = self.stages.setdefault(event.stage.value, {})
        codes[event.code.value] = codes.get(event.code.value, 0) + 1
        self.details.setdefault(event.code.value, event.detail)
        self.code_category[event.code.value] = event.category.value
        category = event.category.value
        self.category_counts[category] = self.category_counts.get(category, 0) + 1
        self.differs.update(event.recorded)

    def view(self) -> dict[str, Any]:
        category, code = self._headline()
        decisions = sum(self.category_counts.values())
        return {
            "step": self.step,
            "lane": self.lane,
            "chunks": self.chunks,
            "forced": self.forced,
            "category": category,
            "code": code,
            "decisions": decisions,
            "reused": self.category_counts.get(Category.REUSE.value, 0),
            "stages": {
                stage: dict(sorted(self.stages[stage].items()))
                for stage in _STAGE_ORDER
                if stage in self.stages
            },
            "details": dict(sorted(self.details.items())),
            "differs": sorted(self.differs),
            "executed": self.executed,
            "failure": self.failure,
            "artifact": self.artifact,
            "warnings": self.warnings,
        }

    def _headline(self) -> tuple[str | None, str | None]:
        """The most severe category, and its most frequent code (ties: alphabetical)."""
        if not self.category_counts:
            return None, None
        category = min(self.category_counts, key=lambda c: _RANK.get(c, len(_RANK)))
        counts: dict[str, int] = {}
        for codes in self.stages.values():
            for code, n in codes.items():
                if self.code_category[code] == category:
                    counts[code] = counts.get(code, 0) + n
        code = min(counts, key=lambda c: (-counts[c], c)) if counts else None
        return category, code


class HtmlReportProjection(RunOutline):
    """Folds a run's events into the view `render_report_html` draws."""

    NAME: ClassVar[str] = "html_report"
    # 2: `decisions` counts only decisions that took effect (projections/base.py)
    # 3: `usage.spent.cached_tokens` and `batches` (docs/operations.md "Batch runs")
    VERSION: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        self.last_version = 0
        self.allocation: RunAllocated | None = None
        self.settings: list[dict[str, Any]] = []
        self.debug_bundle: dict[str, Any] | None = None
        self.sources: list[dict[str, Any]] = []
        self.references: list[dict[str, Any]] = []
        self.profiles: dict[str, dict[str, str]] = {}
        self.steps: dict[str, dict[str, Any]] = {}
        self.cells: dict[tuple[str, str], _Cell] = {}
        self.code_categories: dict[str, str] = {}
        self.lane_order: dict[str, None] = {}
        self.lane_identities = LaneIdentities()  # 32 bytes a lane (issue 29)
        self.executions: list[dict[str, Any]] = []
        self.warnings: list[dict[str, str]] = []
        self.failures: list[dict[str, Any]] = []
        self.checkpoint_write_failures: list[dict[str, str]] = []
        self.validation: dict[str, Any] | None = None
        self.module_calls = 0
        self.spent = {
            "calls": 0,
            "attempts": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
            "cost": None,
        }
        self.retries = RetryFold()
        self.batches = LLMBatchesFold()
        self._llm_calls: set[tuple[str, str, str, str, int]] = set()
        self.saved = {"stages": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": None}
        self.terminated_at: float | None = None
        self.executing_at: float | None = None
        self.outputs_at: float | None = None

    # --- fold ------------------------------------------------------------------------

    def apply(self, event: RunEvent) -> None:
        super().apply(event)
        self.last_version = event.originator_version
        self._usage(event)
        self.batches.apply(event)
        if isinstance(event, StageDecided):
            self.code_categories[event.code.value] = event.category.value
            cell = self.cells.get((event.step, event.lane))
            if cell is not None:
                cell.decided(event)
        elif isinstance(event, StageExecuted):
            self.module_calls += 1
            self._executed(event.step, event.lane, event.stage.value, event.chunk, event)
        elif isinstance(event, LaneResolved):
            self._lane(event)
        elif isinstance(event, StageFailed):
            self._failed(event)
        elif isinstance(event, ArtifactGenerated):
            self._artifact(event)
        elif isinstance(event, WarningRecorded):
            self._warning(event.step, event.lane, event.message)
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
            self.outputs_at = self._offset(event)
            self.validation = {
                "checked": event.checked,
                "refused": [{"name": r.name, "refusal": r.refusal} for r in event.refused],
            }
        else:
            self._run_level(event)

    def _run_level(self, event: RunEvent) -> None:
        if isinstance(event, RunAllocated):
            self.allocation = event
        elif isinstance(event, ConfigurationResolved):
            self.settings = [
                {"name": s.name, "value": s.value, "origin": s.origin} for s in event.settings
            ]
        elif isinstance(event, DebugBundleAllocated):
            self.debug_bundle = {"path": event.path, "trace": event.trace}
        elif isinstance(event, InputsFingerprinted):
            self.executing_at = self._offset(event)
            self.sources = [
                {"name": f.name, "sha256": f.sha256, "size": f.size} for f in event.sources
            ]
            self.references = [
                {"name": f.name, "sha256": f.sha256, "size": f.size} for f in event.references
            ]
        elif isinstance(event, ProfileObserved):
            self.profiles[event.step] = {
                "profile_id": event.profile_id,
                "provider": event.provider,
                "model": event.model,
            }
        elif isinstance(event, RunTerminated):
            self.terminated_at = self._offset(event)

    def _offset(self, event: RunEvent) -> float:
        if self.allocation is None:
            return 0.0
        return _seconds(event.timestamp - self.allocation.timestamp)

    def _step(self, step: str) -> dict[str, Any]:
        entry = self.steps.get(step)
        if entry is None:
            entry = {"consumes": {}, "forced": False, "first": None, "last": None}
            self.steps[step] = entry
        return entry

    def _touch(self, step: str, event: RunEvent) -> None:
        entry = self._step(step)
        offset = self._offset(event)
        if entry["first"] is None:
            entry["first"] = offset
        entry["last"] = offset

    def _lane(self, event: LaneResolved) -> None:
        entry = self._step(event.step)
        for dep in event.dependencies:
            entry["consumes"][dep.step] = None
        entry["forced"] = entry["forced"] or event.forced
        self._touch(event.step, event)
        self.lane_order[event.lane] = None
        self.lane_identities.append(event.lane_identity)
        self.cells[(event.step, event.lane)] = _Cell(event)

    def _executed(self, step: str, lane: str, stage: str, chunk: str, event: RunEvent) -> None:
        self._touch(step, event)
        cell = self.cells.get((step, lane))
        if cell is not None:
            cell.executed += 1
        self.executions.append(
            {
                "step": step,
                "lane": lane,
                "stage": stage,
                "chunk": chunk,
                "at": self._offset(event),
                "failed": isinstance(event, StageFailed),
            }
        )

    def _failed(self, event: StageFailed) -> None:
        self._executed(event.step, event.lane, event.stage.value, event.chunk, event)
        failure = {
            "step": event.step,
            "lane": event.lane,
            "stage": event.stage.value,
            "chunk": event.chunk,
            "reason_code": event.code.value,
            "message": event.message,
        }
        self.failures.append(failure)
        cell = self.cells.get((event.step, event.lane))
        if cell is not None:
            cell.failure = failure

    def _artifact(self, event: ArtifactGenerated) -> None:
        self._touch(event.step, event)
        cell = self.cells.get((event.step, event.lane))
        if cell is not None:
            cell.artifact = {
                "kind": event.kind,
                "sha256": event.sha256,
                "size": event.size,
                "restored": event.restored,
            }
        for message in event.warnings:
            self._warning(event.step, event.lane, message)

    def _warning(self, step: str, lane: str, message: str) -> None:
        self.warnings.append({"step": step, "lane": lane, "message": message})
        cell = self.cells.get((step, lane))
        if cell is not None:
            cell.warnings += 1

    def _usage(self, event: RunEvent) -> None:
        if isinstance(event, SpendsTokens):
            self.spent["attempts"] += 1
            if isinstance(event, LLMCallAttempted):  # attempts of one call are one call
                key = (event.step, event.lane, event.stage.value, event.chunk, event.call)
                self.spent["calls"] += int(key not in self._llm_calls)
                self._llm_calls.add(key)
                self.spent["cached_tokens"] += event.cached_tokens
                self.retries.apply(event)
            else:
                self.spent["calls"] += 1
            self.spent["prompt_tokens"] += event.prompt_tokens
            self.spent["completion_tokens"] += event.completion_tokens
            self.spent["cost"] = _add_cost(self.spent["cost"], event.cost)
        if isinstance(event, SavesTokens):
            self.saved["stages"] += 1
            self.saved["prompt_tokens"] += event.saved_prompt_tokens
            self.saved["completion_tokens"] += event.saved_completion_tokens
            self.saved["cost"] = _add_cost(self.saved["cost"], event.saved_cost)

    # --- view ------------------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        return {
            "projection": {"name": self.NAME, "version": self.VERSION},
            "events": self.last_version,
            "run": self._run_view(),
            "settings": list(self.settings),
            "inputs": {"sources": list(self.sources), "references": list(self.references)},
            "plans": dict(sorted(self.plans.items())),
            "steps": self._steps_view(),
            "lanes": list(self.lane_order),
            "cells": [cell.view() for cell in self.cells.values()],
            "executions": list(self.executions),
            "decisions": dict(sorted(self.decisions.items())),
            "categories": dict(sorted(self.code_categories.items())),
            "module_calls": self.module_calls,
            "usage": {
                "spent": {**self.spent, "retries": self.retries.view()}
                if self.spent["attempts"]
                else None,
                "saved": dict(self.saved) if self.saved["stages"] else None,
            },
            "batches": self.batches.view(),
            "warnings": list(self.warnings),
            "failures": list(self.failures),
            "checkpoint_write_failures": list(self.checkpoint_write_failures),
            "validation": self.validation,
            "outputs": list(self.output_dicts(by_name=True)),
            "persistence_failures": list(self.persistence_failures),
        }

    def _run_view(self) -> dict[str, Any]:
        a = self.allocation
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "pipeline_file": a.pipeline_file if a else None,
            "argv": list(a.argv) if a else [],
            "tool_version": self.tool_version,
            "host": a.host if a else None,
            "pid": a.pid if a else None,
            "status": self.status.value,
            "phase": self.phase,
            "started": self.started,
            "ended": self.ended,
            "duration": self.terminated_at,
            "phases": {
                "execution": self.executing_at,
                "outputs": self.outputs_at,
                "terminated": self.terminated_at,
            },
            "error": self.error,
            "invocation_identity": invocation_identity(self.lane_identities),
            "roots": {
                "run_dir": a.run_dir if a else None,
                "output": a.output_root if a else None,
                "cache": a.cache_root if a else None,
                "workspace": a.workspace if a else None,
            },
            "debug_bundle": self.debug_bundle,
        }

    def _steps_view(self) -> list[dict[str, Any]]:
        out = []
        for step, entry in self.steps.items():
            cells = [c for c in self.cells.values() if c.step == step]
            decisions: dict[str, int] = {}
            for cell in cells:
                for codes in cell.stages.values():
                    for code, n in codes.items():
                        decisions[code] = decisions.get(code, 0) + n
            out.append(
                {
                    "step": step,
                    "consumes": [p for p in entry["consumes"] if p in self.steps],
                    "forced": entry["forced"],
                    "lanes": len(cells),
                    "executed": sum(c.executed for c in cells),
                    "failed": sum(1 for c in cells if c.failure is not None),
                    "decisions": dict(sorted(decisions.items())),
                    "first": entry["first"],
                    "last": entry["last"],
                    "profile": self.profiles.get(step),
                }
            )
        return out


def _add_cost(total: float | None, cost: float | None) -> float | None:
    if cost is None:
        return total
    return round((total or 0.0) + cost, 9)
