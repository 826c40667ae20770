"""The run report (`report.json`, and the counts of `run --json`): a fold of the run's events.

Written live at terminalization from the session's listener (like `manifest.json`) and
rebuilt by `projections rebuild report` from the journal, byte-equal: the same fold over
the same events, rendered by the same `json_bytes` (docs/internals.md "Projections").
Decisions, plan outcomes and module calls are counted here once; the runner returns only
what it produced (docs/operations.md "JSON documents").

Only what the report shows is folded, and nothing recorded after the report is written
changes it: a `TerminalPersistenceFailed` counts only for the run directory and the
manifest, which are written before the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from runjournal.domain.events import (
    ArtifactGenerated,
    DebugBundleAllocated,
    HintRecorded,
    RunAllocated,
    RunEvent,
    RunStatus,
    StageDecided,
    StageExecuted,
    TerminalPersistenceFailed,
    WarningRecorded,
)
from runjournal.projections.base import RunOutline
from runjournal.projections.streamed import Streamed

MANIFEST_NAME = "manifest.json"
# Terminal writes that come before the report's own: their failure shows in it.
_BEFORE_REPORT = frozenset({"run_dir", "manifest"})


class ReportProjection(RunOutline):
    NAME: ClassVar[str] = "report"
    # 2: `decisions` counts only decisions that took effect; `not_started` the others
    VERSION: ClassVar[int] = 2

    def __init__(self) -> None:
        super().__init__()
        self.run_dir: str | None = None
        self.roots: dict[str, str | None] = {"output": None, "cache": None, "debug": None}
        self.journal: str | None = None
        self.recompute: dict[str, list[str]] = {"selected": [], "forced": []}
        self.debug_bundle: str | None = None
        self.hints: list[str] = []
        self.warnings: list[dict[str, Any]] = []
        self.module_calls = 0
        self.manifest_missing = False

    def apply(self, event: RunEvent) -> None:
        if type(event) is StageDecided:  # the outline's alone (base.py)
            self.decided(event)
            return
        super().apply(event)
        if isinstance(event, StageExecuted):
            self.module_calls += 1
        elif isinstance(event, ArtifactGenerated):
            self.warnings += [
                {"step": event.step, "lane": event.lane, "message": w} for w in event.warnings
            ]
        elif isinstance(event, WarningRecorded):  # run-level: about a step, not one lane
            self.warnings.append(
                {"step": event.step, "lane": event.lane or None, "message": event.message}
            )
        elif isinstance(event, HintRecorded):
            self.hints.append(event.message)
        elif isinstance(event, RunAllocated):
            self.run_dir = event.run_dir
            self.roots = {
                "output": event.output_root,
                "cache": event.cache_root,
                "debug": event.debug_root,
            }
            self.journal = event.journal
            self.recompute = {"selected": list(event.recompute), "forced": list(event.forced)}
        elif isinstance(event, DebugBundleAllocated):
            self.debug_bundle = event.path
        elif isinstance(event, TerminalPersistenceFailed) and event.target in _BEFORE_REPORT:
            self.manifest_missing = True

    def _path(self, name: str) -> str:
        return f"{self.run_dir}/{name}"

    def view(self) -> dict[str, Any]:
        view = self.head()
        view["outputs"] = list(self.output_paths())
        return view

    def streamed_view(self) -> Streamed:
        """`view()` with its outputs made one at a time as it is written (`report.json` of
        a run of many outputs; issue 29: peak RSS)."""
        return Streamed(self.head(), "outputs", self.output_paths())

    def output_paths(self) -> Iterator[dict[str, Any]]:
        """Each output as `view()` lists it (with its path), in journal order."""
        for o in self.output_dicts():
            o["path"] = self._path(o["name"])
            yield o

    def head(self) -> dict[str, Any]:
        """`view()` without its `outputs`."""
        terminated = self.status is not RunStatus.RUNNING
        has_manifest = terminated and self.run_dir is not None and not self.manifest_missing
        return {
            "run_id": self.run_id,
            "status": self.status.value,
            "run_dir": self.run_dir,
            "manifest": self._path(MANIFEST_NAME) if has_manifest else None,
            "decisions": dict(sorted(self.decisions.items())),
            "not_started": self.not_started,
            "plans": dict(sorted(self.plans.items())),
            "module_calls": self.module_calls,
            "warnings": list(self.warnings),
            "hints": list(self.hints),
            "recompute": self.recompute,
            "debug_bundle": self.debug_bundle,
            "roots": self.roots,
            "journal": self.journal,
            "projection": {"name": self.NAME, "version": self.VERSION},
        }
