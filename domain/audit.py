"""The journal audit: re-decide every recorded stage decision from its recorded facts.

`audit_run` replays one run's events. For each `StageDecided` it rebuilds the
`StageFacts` the runner decided from (the lane's components from its `LaneResolved`,
the stage's own digests and differences from the event) and calls the same pure
`decide_stage`; any disagreement with the recorded code is a `Difference`. The journal's
own invariants (one allocation first, at most one termination, contiguous versions,
decisions after their lane, checkpoints and executions preceded by their decision) are
not repeated here: the events are replayed through the `Run` aggregate
(`Run.replay`, domain/run.py), and what it collects are the report's violations.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

import msgspec
from runjournal.domain.decisions import Stage, StageDigests, decide_stage
from runjournal.domain.events import ArtifactGenerated, LaneResolved, RunEvent, StageDecided
from runjournal.domain.identity import (
    COMPONENT_ORDER,
    ArtifactRef,
    LaneComponents,
    dependencies_digest,
)
from runjournal.domain.reasons import ReasonCode, category_of
from runjournal.domain.run import Run, Violation

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
    DEPENDENCIES = "dependencies"  # the stage's D is not its lane's (whole, or the parts it reads)
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


class _Lane:
    """What the audit keeps of a lane's `LaneResolved`: its components (one object for
    every lane with equal ones), `forced`, and each stage's D with a read naming no
    consumed artifact, computed when the lane is resolved, and let go with the lane's
    `ArtifactGenerated`. The whole event was kept for every lane of the run (its
    dependencies and reads, about a kilobyte a lane: docs/performance.md "gc, audit and
    explain at scale")."""

    __slots__ = ("components", "forced", "stage_d")

    def __init__(
        self, components: LaneComponents, forced: bool, stage_d: tuple[_StageD, ...]
    ) -> None:
        self.components = components
        self.forced = forced
        self.stage_d = stage_d


_StageD = tuple[str, str | None]  # a stage's D, and a read naming no consumed artifact
_STAGE_AT = {stage: at for at, stage in enumerate(Stage)}  # a stage's place in `stage_d`


class _Auditor:
    """Re-decides each decision; the invariants are the `Run` aggregate's (domain/run.py)."""

    def __init__(self) -> None:
        self.decisions = 0
        self.lanes: dict[tuple[str, str], _Lane] = {}
        self.differences: list[Difference] = []
        # equal components (a step's lanes mostly share them) as one object
        self._components: dict[LaneComponents, LaneComponents] = {}

    def feed(self, event: RunEvent) -> None:
        if isinstance(event, StageDecided):
            self._decision(event)
        elif isinstance(event, LaneResolved):
            every = _stage_d(event, None)  # a stage without reads of its own
            stage_d = tuple(_stage_d(event, s) if s in event.reads else every for s in Stage)
            components = self._components.setdefault(event.components, event.components)
            self.lanes[(event.step, event.lane)] = _Lane(components, event.forced, stage_d)
        elif type(event) is ArtifactGenerated:
            # the lane's last event, as `Run` lets it go (domain/run.py): a decision of the
            # lane after it is the run's violation, not re-decided here
            self.lanes.pop((event.step, event.lane), None)

    def _decision(self, event: StageDecided) -> None:
        self.decisions += 1
        lane = self.lanes.get((event.step, event.lane))
        if lane is None:  # a violation of the run's ordering (Run reports it)
            return
        facts = event.facts(lane.components)
        current = facts.current
        has_record = facts.recorded is not None
        redecided = decide_stage(facts)

        if redecided is not event.code:
            self._differ(
                event,
                redecided,
                Problem.CODE,
                f"recorded {event.code.value}, the facts decide {redecided.value}",
            )
        expected_category = category_of(event.code)
        if event.category is not expected_category:
            self._differ(
                event,
                redecided,
                Problem.CATEGORY,
                f"category {event.category.value} is not {expected_category.value}",
            )
        if event.recorded and not has_record:
            self._differ(
                event,
                redecided,
                Problem.RECORDED_WITHOUT_CHECKPOINT,
                f"recorded digests with checkpoint state {event.checkpoint.value}",
            )
        for key in sorted(event.recorded):
            if key not in _DIGEST_KEYS:
                self._differ(
                    event,
                    redecided,
                    Problem.UNKNOWN_DIGEST,
                    f"recorded digest {key!r} is not a compared one",
                )
            elif event.recorded[key] == _current_value(current, key):
                self._differ(
                    event,
                    redecided,
                    Problem.RECORDED_EQUALS_CURRENT,
                    f"recorded {key} equals the current one, so it is no difference",
                )
        if event.predecessor is None:
            lane_d, stray = lane.stage_d[_STAGE_AT[event.stage]]
            if event.dependencies != lane_d:
                self._differ(
                    event,
                    redecided,
                    Problem.DEPENDENCIES,
                    "the stage's dependencies are not the lane's",
                )
            if stray is not None:
                self._differ(
                    event,
                    redecided,
                    Problem.DEPENDENCIES,
                    f"the stage reads {stray}, which its lane does not consume",
                )
            if event.forced != lane.forced:
                self._differ(
                    event,
                    redecided,
                    Problem.FORCED,
                    f"forced={event.forced} in a lane with forced={lane.forced}",
                )

    def _differ(
        self, event: StageDecided, redecided: ReasonCode, problem: Problem, detail: str
    ) -> None:
        # a method, not a closure made per decision: those lived on as garbage until a
        # collection, one a lane (issue 29: peak RSS)
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


def _stage_d(lane: LaneResolved, stage: Stage | None) -> _StageD:
    """A stage's D from its lane's recorded reads (None, or a stage without reads: every
    dependency), and the first read naming no artifact the lane consumes."""
    if stage is None or stage not in lane.reads:
        return dependencies_digest(lane.dependencies), None
    deps = lane.reads[stage]
    consumed = {_named(d) for d in lane.dependencies}
    stray = next((d for d in deps if _named(d) not in consumed), None)
    stray_text = f"{stray.step}/{stray.lane}" if stray is not None else None
    return dependencies_digest(deps), stray_text


def _named(ref: ArtifactRef) -> tuple[str, str, str, str, str]:
    """What a part's ref shares with its artifact's: everything but the digest and size."""
    return (ref.step, ref.lane, ref.kind, ref.schema, ref.media_type)


def _current_value(current: StageDigests, key: str) -> str:
    if key == "input":
        return current.input
    if key == "dependencies":
        return current.dependencies
    return str(getattr(current.components, key))


def audit_run(events: Iterable[RunEvent]) -> AuditReport:
    """Replay one run's events (in journal order) through `Run` and re-decide each decision."""
    auditor = _Auditor()

    def fed() -> Iterator[RunEvent]:
        for event in events:
            auditor.feed(event)
            yield event

    run = Run.replay(fed())
    return AuditReport(
        run_id=run.run_id,
        events=run.events_seen,
        decisions=auditor.decisions,
        differences=auditor.differences,
        violations=list(run.violations),
    )
