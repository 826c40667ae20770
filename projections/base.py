"""What every projection is: a named, versioned, pure fold of a run's events into a view.

The same fold runs live (fed each event as the runner emits it) and on rebuild (fed
the events read back from the journal), so the two views are equal by construction.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Protocol, TypeVar

from runjournal.domain.events import (
    ChunkPlanResolved,
    OutputWritten,
    RunAllocated,
    RunError,
    RunEvent,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
    TerminalPersistenceFailed,
)
from runjournal.projections.stage_outcomes import PendingStages, immediate


class Projection(Protocol):
    NAME: ClassVar[str]
    VERSION: ClassVar[int]

    def apply(self, event: RunEvent) -> None: ...

    def view(self) -> dict[str, Any]: ...


P = TypeVar("P", bound=Projection)


def fold(projection: P, events: Iterable[RunEvent]) -> P:
    for event in events:
        projection.apply(event)
    return projection


class Folds(Protocol):
    def apply(self, event: RunEvent) -> None: ...


def fold_together(events: Iterable[RunEvent], *folds: Folds) -> None:
    """Feed each event to every fold in one pass: the events are read once and never
    held (docs/performance.md "Reading commands on a large run")."""
    for event in events:
        for f in folds:
            f.apply(event)


def storage_name(projection: type[Projection] | Projection) -> str:
    """The version is part of the view's storage name, so v2 can be built beside v1."""
    return f"{projection.NAME}.v{projection.VERSION}"


def error_view(error: RunError | None) -> dict[str, Any] | None:
    """A run's primary error as JSON data: step, lane, reason code, cause and message only."""
    if error is None:
        return None
    view: dict[str, Any] = {
        "step": error.step,
        "lane": error.lane,
        "reason_code": error.reason_code.value if error.reason_code else None,
        "message": error.message,
    }
    if error.cause is not None:  # a failed stage's typed cause (docs/operations.md)
        view["cause"] = error.cause.value
    return view


class RunOutline:
    """What every per-run view folds the same way: who the run is, how it ended, and its
    decision, plan and output counts. Views subclass it and add their own events.

    `decisions` counts the decisions that took effect: reused or refused, or whose stage
    ran (executed or failed); a decision whose stage never started (the run stopped
    first) is counted in `not_started` instead (projections/stage_outcomes.py).
    """

    def __init__(self) -> None:
        self.run_id = ""
        self.pipeline = ""
        self.tool_version = ""
        self.started: str | None = None
        self.ended: str | None = None
        self.status = RunStatus.RUNNING
        self.phase: str | None = None
        self.error: dict[str, Any] | None = None
        self.decisions: dict[str, int] = {}
        self._pending = PendingStages()
        self.plans: dict[str, int] = {}
        # (name, sha256, size) of each OutputWritten, in journal order: a tuple, not a dict
        # of three keys, in each of a run's folds (issue 29: peak RSS); `output_dicts`
        self.outputs: list[tuple[str, str, int]] = []
        self.persistence_failures: list[dict[str, str]] = []

    def apply(self, event: RunEvent) -> None:
        if type(event) is StageDecided:  # one per stage: the hot path of a big run
            self.decided(event)
        elif isinstance(event, StageDecided | StageExecuted | StageFailed):
            if isinstance(event, StageDecided) and immediate(event) is not None:
                self._count(event.code.value)
            settled = self._pending.apply(event, getattr(event, "code", None))
            if settled is not None:
                self._count(str(settled[0]))
        elif isinstance(event, ChunkPlanResolved):
            for outcome in event.outcomes:
                self.plans[outcome.value] = self.plans.get(outcome.value, 0) + 1
        elif isinstance(event, OutputWritten):
            self.outputs.append((event.name, event.sha256, event.size))
        elif isinstance(event, RunAllocated):
            self.run_id = event.run_id
            self.pipeline = event.pipeline
            self.tool_version = event.tool_version
            self.started = event.timestamp.isoformat()
        elif isinstance(event, RunTerminated):
            self.status = event.status
            self.phase = event.phase.value
            self.ended = event.timestamp.isoformat()
            self.error = error_view(event.error)
        elif isinstance(event, TerminalPersistenceFailed):
            self.persistence_failures.append({"target": event.target, "message": event.message})

    def decided(self, event: StageDecided) -> None:
        """Fold one decision: counted when it takes effect at once, else held until its
        stage is seen running. Subclasses that fold nothing else of a decision send it
        here directly (docs/performance.md "Fully cached `run --resume`")."""
        if immediate(event) is not None:
            self._count(str(event.code))
        else:
            self._pending.apply(event, event.code)

    def _count(self, code: str) -> None:
        self.decisions[code] = self.decisions.get(code, 0) + 1

    def output_dicts(self, *, by_name: bool = False) -> Iterator[dict[str, Any]]:
        """Each output as its views show it ({name, sha256, size}), made one at a time:
        in journal order, or sorted by name (`by_name`)."""
        rows: Iterable[tuple[str, str, int]] = self.outputs
        if by_name:
            rows = sorted(rows, key=operator.itemgetter(0))
        for name, sha256, size in rows:
            yield {"name": name, "sha256": sha256, "size": size}

    @property
    def not_started(self) -> dict[str, int]:
        """Decisions whose stage never ran, by reason code (empty for a finished run)."""
        counts: dict[str, int] = {}
        for code in self._pending.never_started():
            counts[str(code)] = counts.get(str(code), 0) + 1
        return dict(sorted(counts.items()))
