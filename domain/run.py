"""The `Run` aggregate: one per run, held in memory for the whole invocation.

A small state machine over the run's events that holds the journal's invariants in one
place (docs/internals.md "The journal"):

- structural: versions contiguous from 1, one aggregate, `RunAllocated` first and once
  (under the aggregate id of its run id), at most one `RunTerminated`, and after it only
  `TerminalPersistenceFailed`;
- ordering: a `StageDecided` follows its lane's `LaneResolved`, a `CheckpointWritten` or
  `StageExecuted` follows a decision of its scope, and no execution follows a reuse.

Live, every new event is checked against both kinds of rule, and one that breaks either
is refused with `JournalInvariantError` before it is recorded: the runner records through
the typed command methods (one per thing that happened: `resolve_lane`, `decide`,
`record_execution`, `record_checkpoint`, ... `terminate`), which the journal session
calls for each method of the `RunRecorder` port (domain/ports.py; docs/internals.md
"Recording a run (`RunRecorder`)"); `trigger` is the
generic form the same rules guard. `apply` takes an already recorded event (a stored
run read back) under the structural rules only. `Run.replay` feeds recorded events
through every rule and collects each break as a `Violation` instead: `journal audit`
reports those (domain/audit.py). Timestamps come from an injected clock, so the domain
never reads the time itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar
from uuid import UUID, uuid5

import msgspec
from runjournal.domain.block_reuse import (
    EXPANDED,
    BlockUnit,
    block_digest,
    origin_of,
    units_events,
    units_fit,
)
from runjournal.domain.decisions import REUSE_CODES, Stage, StageFacts
from runjournal.domain.events import (
    ArtifactGenerated,
    BlockKind,
    CheckpointWriteFailed,
    CheckpointWritten,
    ChunkPlanResolved,
    EventsReused,
    FileFingerprint,
    InputsFingerprinted,
    LaneResolved,
    LaneReused,
    LeaseWaitOutcome,
    LLMBatchCompleted,
    LLMBatchPolled,
    LLMBatchSubmitted,
    LLMCallAttempted,
    LLMUsageReused,
    PlanOutcome,
    RunAllocated,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
    StageLeaseWaited,
    TerminalPersistenceFailed,
    Timestamp,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.lane_reuse import Reused, ReusedStage, expand, reused_fields
from runjournal.domain.llm import FailureCause, LLMAttempt, LLMUsage
from runjournal.domain.reasons import ReasonCode

E = TypeVar("E", bound=RunEvent)

RUN_NAMESPACE = UUID("5d8c0c8e-6f43-5b8e-9a51-7b3f1f3f6a10")


_LANE_EXPANSION: tuple[type, ...] = (StageDecided, LLMUsageReused)


def run_aggregate_id(run_id: str) -> UUID:
    """Aggregate id = uuid5(fixed namespace, run id) (docs/internals.md "The journal")."""
    return uuid5(RUN_NAMESPACE, run_id)


class JournalInvariantError(Exception):
    """An event would break the journal's own invariants."""


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """A broken journal invariant, at the event where it shows."""

    version: int
    event: str
    message: str


# Events that may still follow a terminal event (reporting what could not be persisted).
_AFTER_TERMINAL = (TerminalPersistenceFailed, RunTerminated)


class Run:
    def __init__(
        self,
        aggregate_id: UUID,
        clock: Callable[[], Timestamp] | None = None,
        *,
        strict_order: bool = True,
    ) -> None:
        """`strict_order` is accepted for callers written when ordering was optional; the
        ordering rules now guard every live event whatever it says."""
        self.id = aggregate_id
        self.version = 0
        self.run_id = ""
        self.status = RunStatus.RUNNING
        self.terminated_at: int | None = None
        self.events_seen = 0
        # events summaries stand for that were applied as a count, not one by one
        self.summarized_events = 0
        self.violations: list[Violation] = []
        self._clock = clock
        self._replaying = False
        self._allocated = False
        # (step, lane) of each lane resolved, let go with its `ArtifactGenerated`
        self._lanes: set[tuple[str, str]] = set()
        # the last decision of each stage scope, by lane: (step, lane) -> (stage, chunk)
        # -> code. A lane's are let go with its `ArtifactGenerated`, its last event
        # (nothing of the lane is recorded after it), live and replayed: a run, and the
        # audit's replay, held every decision until the end (issue 29: peak RSS)
        self._last_decision: dict[tuple[str, str], dict[tuple[str, str], ReasonCode]] = {}
        self._pending: list[RunEvent] = []
        # (event types, step, lane, events still to come) after a `LaneReused` or an
        # `EventsReused`: the events it stands for share its version (docs/internals.md
        # "Reuse summaries"; lane None: any lane of the step; step None: any step)
        self._expanding: tuple[tuple[type, ...], str | None, str | None, int] | None = None
        self._draft_time: Timestamp | None = None
        # called before any event is built: a recorder that holds drafts back records
        # them first, so the journal keeps their order (docs/internals.md "Block summaries")
        self.before_record: Callable[[], None] | None = None

    @classmethod
    def allocate(cls, clock: Callable[[], Timestamp], **fields: Any) -> Run:
        run = cls(run_aggregate_id(fields["run_id"]), clock)
        run.trigger(RunAllocated, **fields)
        return run

    @classmethod
    def replay(cls, events: Iterable[RunEvent]) -> Run:
        """Every recorded event through the rules; breaks are collected, never raised."""
        run: Run | None = None
        for event in events:
            if run is None:
                run = cls(event.originator_id)
                run._replaying = True
            run.apply(event)
        if run is None:
            run = cls(UUID(int=0))
            run.violations.append(Violation(version=0, event="", message="the run has no events"))
        return run

    @property
    def terminated(self) -> bool:
        return self.status is not RunStatus.RUNNING

    def decision_of(self, step: str, lane: str, stage: str, chunk: str = "") -> ReasonCode | None:
        """The last decision recorded for one stage scope (None: not decided yet)."""
        decisions = self._last_decision.get((step, lane))
        return None if decisions is None else decisions.get((stage, chunk))

    # --- commands: one per thing that happened, each checked by every rule -------------

    def record_inputs(
        self, *, sources: list[FileFingerprint], references: list[FileFingerprint]
    ) -> InputsFingerprinted:
        """The run's sources and references, as it read them."""
        return self._command(InputsFingerprinted, sources=sources, references=references)

    def record_plan(
        self, *, source: str, plan_key: str, outcomes: list[PlanOutcome], chunks: int
    ) -> ChunkPlanResolved:
        """How a source's chunk plan was obtained."""
        return self._command(
            ChunkPlanResolved, source=source, plan_key=plan_key, outcomes=outcomes, chunks=chunks
        )

    def resolve_lane(
        self,
        *,
        step: str,
        lane: str,
        components: LaneComponents,
        lane_identity: str,
        dependencies: list[ArtifactRef],
        chunks: int,
        forced: bool,
        reads: dict[Stage, list[ArtifactRef]] | None = None,
    ) -> LaneResolved:
        """A lane's components, identity and dependencies: before any decision of it."""
        return self._command(
            LaneResolved,
            step=step,
            lane=lane,
            components=components,
            lane_identity=lane_identity,
            dependencies=dependencies,
            chunks=chunks,
            forced=forced,
            reads=reads if reads is not None else {},
        )

    def record_lease_wait(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        holder: str,
        outcome: LeaseWaitOutcome,
    ) -> StageLeaseWaited:
        """A wait for another run's lease on a stage, before its decision."""
        return self._command(
            StageLeaseWaited,
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            holder=holder,
            outcome=outcome,
        )

    def decide(
        self,
        *,
        step: str,
        lane: str,
        chunk: str,
        facts: StageFacts,
        code: ReasonCode,
        cause: FailureCause | None = None,
    ) -> StageDecided:
        """Record one stage decision with its facts; its lane must be resolved first."""
        fields = StageDecided.fields(step, lane, chunk, facts, code)
        return self._command(StageDecided, **fields, cause=cause)

    def record_reused(self, *, step: str, lane: str, item: Reused) -> RunEvent:
        """Record one item of a fully reused lane on its own: a plain reuse decision (as
        `decide` records it from its facts), or its reused LLM usage."""
        if isinstance(item, ReusedStage):
            return self._command(StageDecided, **reused_fields(step, lane, item), cause=None)
        return self.record_llm_reuse(
            step=step, lane=lane, stage=item.stage, chunk=item.chunk, usage=item.usage
        )

    def record_lane_reuse(
        self, *, step: str, lane: str, stages: list[Reused], digest: str, source_run: str
    ) -> tuple[LaneReused, list[RunEvent]]:
        """Record a fully reused lane as one `LaneReused`; the `StageDecided` it stands
        for (`stages`, in decision order) are applied too, under its
        version, and returned for the listeners, but not recorded."""
        if (step, lane) not in self._lanes:
            raise JournalInvariantError(
                f"reuse summary for step {step!r} lane {lane!r} has no LaneResolved before it"
            )
        summary = self._command(
            LaneReused,
            step=step,
            lane=lane,
            count=len(stages),
            digest=digest,
            source_run=source_run,
        )
        # applied as a count: the lane is resolved (checked above), so each decision the
        # summary stands for follows its `LaneResolved`; it is kept as the stage's last
        # decision, as `_mutate` keeps one (docs/internals.md "A summary applied as a count")
        self._expanding = None
        decisions = expand(summary, stages)
        self.events_seen += len(decisions)
        self.summarized_events += len(decisions)
        last = self._decisions_of(step, lane)
        reused = ReasonCode.REUSED
        for item in stages:
            if type(item) is ReusedStage:
                last[(item.stage.value, item.chunk)] = reused
        return summary, decisions

    def draft(self, event_type: type[E], **fields: Any) -> E:
        """An event as a command would build it, neither checked nor recorded: what a
        recorder holds back until it knows whether a block summary stands for it
        (`record_block_reuse`) or the command records it."""
        if self._draft_time is None:
            if self._clock is None:
                raise JournalInvariantError(
                    "a replayed run cannot record new events without a clock"
                )
            self._draft_time = self._clock()
        return event_type(
            originator_id=self.id, originator_version=0, timestamp=self._draft_time, **fields
        )

    def record_block_reuse(
        self,
        *,
        kind: BlockKind,
        step: str,
        first: int,
        source_run: str,
        units: Sequence[BlockUnit],
    ) -> tuple[EventsReused, list[RunEvent]]:
        """Record consecutive units equal to `source_run`'s as one `EventsReused`, applied
        as a count: the units are checked as a whole (`units_fit`: each a whole lane of
        the step, or one event of the kind), and the state the events they stand for
        would leave is set at once (a whole lane leaves nothing open: no decision of it
        is kept, and it is no longer resolved). The events are built (`units_events`,
        with the summary's origin) and returned for the listeners, neither applied one
        by one nor recorded (docs/internals.md "Block summaries", "A summary applied as
        a count")."""
        unfit = units_fit(kind, step, units)
        if unfit is not None:
            raise JournalInvariantError(f"block summary of {kind} {step!r}: {unfit}")
        count = sum(unit.count for unit in units)
        summary = self._command(
            EventsReused,
            kind=kind,
            step=step,
            first=first,
            units=len(units),
            count=count,
            digest=block_digest(unit.digest for unit in units),
            source_run=source_run,
        )
        self._expanding = None  # nothing more at its version: its events are counted here
        self.events_seen += count
        self.summarized_events += count
        if kind is BlockKind.LANES:
            for unit in units:
                lane = (unit.step, unit.lane)  # type: ignore[union-attr]
                self._last_decision.pop(lane, None)
                self._lanes.discard(lane)
        return summary, units_events(units, origin_of(summary))

    def record_execution(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> StageExecuted:
        """Record a stage execution; it must follow a decision that did not reuse."""
        return self._command(
            StageExecuted, step=step, lane=lane, stage=stage, chunk=chunk, sha256=sha256, size=size
        )

    def record_stage_failure(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        code: ReasonCode,
        message: str,
        cause: FailureCause | None = None,
    ) -> StageFailed:
        """A stage (or a module's `outputs()`) that failed, with its typed cause."""
        return self._command(
            StageFailed,
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            code=code,
            message=message,
            cause=cause,
        )

    def record_llm_attempt(
        self, *, step: str, lane: str, stage: Stage, chunk: str, attempt: LLMAttempt
    ) -> LLMCallAttempted:
        """One request to an LLM endpoint, spent by this run."""
        return self._command(
            LLMCallAttempted,
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            **LLMCallAttempted.fields_of(attempt),
        )

    def record_llm_reuse(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        usage: LLMUsage,
        request_sha256: str | None = None,
    ) -> LLMUsageReused:
        """LLM usage this run did not spend again (a reused checkpoint or stored reply)."""
        return self._command(
            LLMUsageReused,
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            usage=usage,
            request_sha256=request_sha256,
        )

    # --- LLM batches (docs/operations.md "Batch runs") ----------------------------------

    def record_llm_batch_submitted(self, **fields: Any) -> LLMBatchSubmitted:
        """A provider batch holds some of this run's requests (created or followed)."""
        return self._command(LLMBatchSubmitted, **fields)

    def record_llm_batch_polled(self, **fields: Any) -> LLMBatchPolled:
        """A batch's new state, as the provider reported it."""
        return self._command(LLMBatchPolled, **fields)

    def record_llm_batch_completed(self, **fields: Any) -> LLMBatchCompleted:
        """A batch ended and its results were collected."""
        return self._command(LLMBatchCompleted, **fields)

    def record_checkpoint(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> CheckpointWritten:
        """Record a written checkpoint; a decision of its scope must precede it."""
        return self._command(
            CheckpointWritten,
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            sha256=sha256,
            size=size,
        )

    def record_checkpoint_failure(
        self, *, step: str, lane: str, stage: Stage, chunk: str, message: str
    ) -> CheckpointWriteFailed:
        """A checkpoint that could not be written (the run goes on)."""
        return self._command(
            CheckpointWriteFailed, step=step, lane=lane, stage=stage, chunk=chunk, message=message
        )

    def record_artifact(
        self, *, artifact: ArtifactRef, warnings: list[str], restored: bool = False
    ) -> ArtifactGenerated:
        """A lane's artifact (restored: taken from a checkpoint by --recompute)."""
        return self._command(
            ArtifactGenerated,
            **ArtifactGenerated.fields_of(artifact),
            warnings=warnings,
            restored=restored,
        )

    def terminate(
        self, status: RunStatus, phase: RunPhase, error: RunError | None = None
    ) -> RunTerminated:
        """End the run once, with a final status (never `running`)."""
        if status is RunStatus.RUNNING:
            raise JournalInvariantError("a run cannot terminate as running")
        if (status is RunStatus.SUCCEEDED) != (error is None):
            raise JournalInvariantError("a run terminates with an error exactly when it fails")
        return self._command(RunTerminated, status=status, phase=phase, error=error)

    def abandon(self, message: str) -> RunTerminated:
        """`recover`: a run whose process is gone ends as abandoned, at recovery."""
        return self.terminate(RunStatus.ABANDONED, RunPhase.RECOVERY, RunError(message=message))

    def record_persistence_failure(self, target: str, message: str) -> TerminalPersistenceFailed:
        """A terminal file or debug write that failed (allowed after the terminal event)."""
        return self._command(TerminalPersistenceFailed, target=target, message=message)

    def _command(self, event_type: type[E], **fields: Any) -> E:
        return self.trigger(event_type, **fields)

    # --- events ------------------------------------------------------------------------

    def trigger(self, event_type: type[E], **fields: Any) -> E:
        """Build the next event and apply it under every rule (refused: nothing recorded).

        The generic form of the commands, for the few events recorded outside the runner
        that have no command of their own yet (the CLI's allocation, settings and outputs).
        """
        if self.before_record is not None:
            self.before_record()
        if self._clock is None:
            raise JournalInvariantError("a replayed run cannot record new events without a clock")
        event = event_type(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=self._clock(),
            **fields,
        )
        self._apply(event, order=True)
        self._pending.append(event)
        return event

    def apply(self, event: RunEvent) -> None:
        """Apply a recorded event (structural rules; every rule when replaying)."""
        self._apply(event, order=self._replaying)

    def _apply(self, event: RunEvent, *, order: bool) -> None:
        broken = self._structural(event)
        if order:
            broken += self._ordering(event)
        if broken:
            if not self._replaying:
                raise JournalInvariantError(broken[0])
            name = type(event).__name__
            self.violations += [
                Violation(version=event.originator_version, event=name, message=message)
                for message in broken
            ]
        self._mutate(event)

    def _structural(self, event: RunEvent) -> list[str]:
        if (
            self._allocated  # so this is not the first event
            and self.terminated_at is None
            and event.originator_version == self.version + 1
            and (event.originator_id is self.id or event.originator_id == self.id)
            and not isinstance(event, RunAllocated)
        ):
            return []  # every rule below holds: the common case, checked at a glance
        if self._expansion(event):
            return []  # a decision a summary stands for, under the summary's version
        out: list[str] = []
        position = self.events_seen + 1
        expected = self.version + 1
        if event.originator_version != expected:
            out.append(
                f"version {event.originator_version} where {expected} was expected "
                "(versions must be contiguous from 1)"
            )
        if event.originator_id != self.id:
            out.append(f"belongs to another aggregate ({event.originator_id})")
        if isinstance(event, RunAllocated):
            if position != 1:
                out.append("RunAllocated is not the first event")
            if self._allocated:
                out.append("the run is allocated more than once")
            if run_aggregate_id(event.run_id) != event.originator_id:
                out.append(f"aggregate id is not the one of run {event.run_id!r}")
        elif position == 1:
            out.append("the first event is not RunAllocated")
        if self.terminated_at is not None:
            if not isinstance(event, _AFTER_TERMINAL):
                out.append(f"recorded after the run terminated at {self.terminated_at}")
            elif isinstance(event, RunTerminated):
                out.append(f"the run already terminated at {self.terminated_at}")
        return out

    def _expansion(self, event: RunEvent) -> bool:
        """Whether `event` is one of the events the last `LaneReused` or `EventsReused`
        stands for."""
        expanding = self._expanding
        if (
            expanding is None
            or expanding[3] <= 0
            or event.originator_version != self.version
            or type(event) not in expanding[0]
        ):
            return False
        step, lane = expanding[1], expanding[2]
        return (
            (step is None or getattr(event, "step", None) == step)
            and (lane is None or getattr(event, "lane", None) == lane)
            and (event.originator_id is self.id or event.originator_id == self.id)
        )

    def _ordering(self, event: RunEvent) -> list[str]:
        if isinstance(event, StageDecided):
            if (event.step, event.lane) not in self._lanes:
                return [
                    f"decision for step {event.step!r} lane {event.lane!r} has no LaneResolved "
                    "before it"
                ]
        elif isinstance(event, LaneReused):
            if (event.step, event.lane) not in self._lanes:
                return [
                    f"reuse summary for step {event.step!r} lane {event.lane!r} has no "
                    "LaneResolved before it"
                ]
        elif isinstance(event, CheckpointWritten | StageExecuted):
            code = self.decision_of(event.step, event.lane, event.stage.value, event.chunk)
            what = "checkpoint write" if isinstance(event, CheckpointWritten) else "execution"
            where = f"step {event.step!r} lane {event.lane!r} {event.stage.value}" + (
                f" chunk {event.chunk[:12]}" if event.chunk else ""
            )
            if code is None:
                return [f"{what} of {where} has no decision before it"]
            if isinstance(event, StageExecuted) and code in REUSE_CODES:
                return [f"{what} of {where} follows a {code.value} decision"]
        return []

    def _mutate(self, event: RunEvent) -> None:
        self.events_seen += 1
        expanding = self._expanding
        if expanding is not None:
            if self._expansion(event):
                self._expanding = (*expanding[:3], expanding[3] - 1)
            else:
                self._expanding = None
        self.version = event.originator_version
        if type(event) is LaneReused:
            self._expanding = (_LANE_EXPANSION, event.step, event.lane, event.count)
        elif type(event) is EventsReused:
            assert isinstance(event, EventsReused)
            step = event.step if event.kind is BlockKind.LANES else None
            self._expanding = (EXPANDED[event.kind], step, None, event.count)
        if type(event) is StageDecided:  # one per stage, by the stage's value
            stage = event.stage
            # the member's own value: `str()` of a StrEnum is a new string per decision,
            # held as long as the run (issue 29: peak RSS)
            value = stage.value if type(stage) is Stage else str(stage)
            self._decisions_of(event.step, event.lane)[(value, event.chunk)] = event.code
        elif isinstance(event, RunAllocated):
            self._allocated = True
            self.run_id = self.run_id or event.run_id
        elif isinstance(event, LaneResolved):
            self._lanes.add((event.step, event.lane))
        elif isinstance(event, StageDecided):
            scope = (event.stage.value, event.chunk)
            self._decisions_of(event.step, event.lane)[scope] = event.code
        elif type(event) is ArtifactGenerated:
            # the lane's last event: its decisions and its place among the resolved lanes
            # go, live and replayed alike (docs/internals.md "The journal": nothing of a
            # lane is recorded after its artifact until it is resolved again). Live, a
            # lane held about 100 B to the run's end; a replay (`journal audit`) held every
            # decision of the run, about 2 KB a lane (issue 29: peak RSS)
            self._last_decision.pop((event.step, event.lane), None)
            self._lanes.discard((event.step, event.lane))
        elif isinstance(event, RunTerminated) and self.terminated_at is None:
            self.status = event.status
            self.terminated_at = event.originator_version

    def _decisions_of(self, step: str, lane: str) -> dict[tuple[str, str], ReasonCode]:
        decisions = self._last_decision.get((step, lane))
        if decisions is None:
            decisions = self._last_decision[(step, lane)] = {}
        return decisions

    def collect_events(self) -> list[RunEvent]:
        pending, self._pending = self._pending, []
        return pending

    @property
    def pending_count(self) -> int:
        return len(self._pending)
