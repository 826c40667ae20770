"""The journal audit: re-decide every recorded stage decision from its recorded facts.

`audit_run` replays one run's events. For each `StageDecided` it rebuilds the
`StageFacts` the runner decided from (the lane's components from its `LaneResolved`,
the stage's own digests and differences from the event) and calls the same pure
`decide_stage`; any disagreement with the recorded code is a `Difference`. It also
checks the journal's own invariants (one allocation first, at most one termination,
contiguous versions, checkpoints and executions preceded by their decision).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from uuid import UUID

import msgspec
from runjournal.domain.decisions import (
    REUSE_CODES,
    StageDigests,
    decide_stage,
)
from runjournal.domain.events import (
    CheckpointWritten,
    LaneResolved,
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    TerminalPersistenceFailed,
)
from runjournal.domain.identity import COMPONENT_ORDER, dependencies_digest
from runjournal.domain.reasons import ReasonCode, category_of
from runjournal.domain.run import run_aggregate_id

__all__ = [
    "AuditReport",
    "Difference",
    "Problem",
    "Verdict",
    "Violation",
    "audit_run",
]

# Checkpoint states for which the runner had recorded digests to compare.
_DIGEST_KEYS = frozenset((*COMPONENT_ORDER, "input", "dependencies"))


class Verdict(enum.StrEnum):
    OK = "ok"
    DIFFERENT = "different"


class Problem(enum.StrEnum):
    """What is wrong with one recorded decision."""

    CODE = "code"  # decide_stage gives another code from the recorded facts
    CATEGORY = "category"  # the recorded category is not the code's category
    RECORDED_EQUALS_CURRENT = "recorded_equals_current"  # a "difference" that is none
    UNKNOWN_DIGEST = "unknown_digest"  # a recorded key that names no compared digest
    RECORDED_WITHOUT_CHECKPOINT = "recorded_without_checkpoint"
    DEPENDENCIES = "dependencies"  # the stage's D is not the lane's D
    FORCED = "forced"  # the decision's `forced` is not its lane's


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One decision whose recorded code or facts do not hold up."""

    version: int
    step: str
    lane: str
    stage: str
    chunk: str
    recorded: ReasonCode
    redecided: ReasonCode
    problem: Problem
    detail: str


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """A broken journal invariant, at the event where it shows."""

    version: int
    event: str
    message: str


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    events: int
    decisions: int
    differences: list[Difference]
    violations: list[Violation]

    @property
    def verdict(self) -> Verdict:
        return Verdict.DIFFERENT if self.differences or self.violations else Verdict.OK

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK


_Scope = tuple[str, str, str, str]


class _Auditor:
    def __init__(self) -> None:
        self.run_id = ""
        self.aggregate: UUID | None = None
        self.count = 0
        self.last_version = 0
        self.decisions = 0
        self.allocated = False
        self.terminated_at: int | None = None
        self.lanes: dict[tuple[str, str], LaneResolved] = {}
        self.last_decision: dict[_Scope, ReasonCode] = {}
        self.differences: list[Difference] = []
        self.violations: list[Violation] = []

    def violation(self, event: RunEvent, message: str) -> None:
        self.violations.append(
            Violation(version=event.originator_version, event=type(event).__name__, message=message)
        )

    def feed(self, event: RunEvent) -> None:
        self.count += 1
        self._envelope(event)
        if isinstance(event, StageDecided):
            self._decision(event)
        elif isinstance(event, LaneResolved):
            self.lanes[(event.step, event.lane)] = event
        elif isinstance(event, CheckpointWritten | StageExecuted):
            self._after_decision(event)

    def _envelope(self, event: RunEvent) -> None:
        expected = self.last_version + 1
        if event.originator_version != expected:
            self.violation(
                event,
                f"version {event.originator_version} where {expected} was expected "
                "(versions must be contiguous from 1)",
            )
        self.last_version = event.originator_version
        if self.aggregate is None:
            self.aggregate = event.originator_id
        elif event.originator_id != self.aggregate:
            self.violation(event, f"belongs to another aggregate ({event.originator_id})")
        if isinstance(event, RunAllocated):
            if self.count != 1:
                self.violation(event, "RunAllocated is not the first event")
            if self.allocated:
                self.violation(event, "the run is allocated more than once")
            self.allocated = True
            self.run_id = self.run_id or event.run_id
            if run_aggregate_id(event.run_id) != event.originator_id:
                self.violation(event, f"aggregate id is not the one of run {event.run_id!r}")
        elif self.count == 1:
            self.violation(event, "the first event is not RunAllocated")
        after = not isinstance(event, TerminalPersistenceFailed | RunTerminated)
        if self.terminated_at is not None and after:
            self.violation(event, f"recorded after the run terminated at {self.terminated_at}")
        if isinstance(event, RunTerminated):
            if self.terminated_at is not None:
                self.violation(event, f"the run already terminated at {self.terminated_at}")
            else:
                self.terminated_at = event.originator_version

    def _decision(self, event: StageDecided) -> None:
        self.decisions += 1
        scope = (event.step, event.lane, event.stage.value, event.chunk)
        self.last_decision[scope] = event.code
        lane = self.lanes.get((event.step, event.lane))
        if lane is None:
            self.violation(
                event,
                f"decision for step {event.step!r} lane {event.lane!r} has no LaneResolved "
                "before it",
            )
            return
        facts = event.facts(lane.components)
        current = facts.current
        has_record = facts.recorded is not None
        redecided = decide_stage(facts)

        def differ(problem: Problem, detail: str) -> None:
            self.differences.append(
                Difference(
                    version=event.originator_version,
                    step=event.step,
                    lane=event.lane,
                    stage=event.stage.value,
                    chunk=event.chunk,
                    recorded=event.code,
                    redecided=redecided,
                    problem=problem,
                    detail=detail,
                )
            )

        if redecided is not event.code:
            differ(
                Problem.CODE,
                f"recorded {event.code.value}, the facts decide {redecided.value}",
            )
        expected_category = category_of(event.code)
        if event.category is not expected_category:
            differ(
                Problem.CATEGORY,
                f"category {event.category.value} is not {expected_category.value}",
            )
        if event.recorded and not has_record:
            differ(
                Problem.RECORDED_WITHOUT_CHECKPOINT,
                f"recorded digests with checkpoint state {event.checkpoint.value}",
            )
        for key in sorted(event.recorded):
            if key not in _DIGEST_KEYS:
                differ(Problem.UNKNOWN_DIGEST, f"recorded digest {key!r} is not a compared one")
            elif event.recorded[key] == _current_value(current, key):
                differ(
                    Problem.RECORDED_EQUALS_CURRENT,
                    f"recorded {key} equals the current one, so it is no difference",
                )
        if event.predecessor is None:
            lane_d = dependencies_digest(lane.dependencies)
            if event.dependencies != lane_d:
                differ(Problem.DEPENDENCIES, "the stage's dependencies are not the lane's")
            if event.forced != lane.forced:
                differ(Problem.FORCED, f"forced={event.forced} in a lane with forced={lane.forced}")

    def _after_decision(self, event: CheckpointWritten | StageExecuted) -> None:
        scope = (event.step, event.lane, event.stage.value, event.chunk)
        code = self.last_decision.get(scope)
        what = "checkpoint write" if isinstance(event, CheckpointWritten) else "execution"
        where = f"step {event.step!r} lane {event.lane!r} {event.stage.value}" + (
            f" chunk {event.chunk[:12]}" if event.chunk else ""
        )
        if code is None:
            self.violation(event, f"{what} of {where} has no decision before it")
        elif isinstance(event, StageExecuted) and code in REUSE_CODES:
            self.violation(event, f"{what} of {where} follows a {code.value} decision")

    def report(self) -> AuditReport:
        violations = list(self.violations)
        if self.count == 0:
            violations.append(Violation(version=0, event="", message="the run has no events"))
        return AuditReport(
            run_id=self.run_id,
            events=self.count,
            decisions=self.decisions,
            differences=self.differences,
            violations=violations,
        )


def _current_value(current: StageDigests, key: str) -> str:
    if key == "input":
        return current.input
    if key == "dependencies":
        return current.dependencies
    return str(getattr(current.components, key))


def audit_run(events: Iterable[RunEvent]) -> AuditReport:
    """Replay one run's events (in journal order) and report every difference found."""
    auditor = _Auditor()
    for event in events:
        auditor.feed(event)
    return auditor.report()
