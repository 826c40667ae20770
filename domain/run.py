"""The `Run` aggregate: one per run, held in memory for the whole invocation.

A small state machine over the run's events that holds the journal's invariants in one
place (docs/internals.md "The journal"):

- structural: versions contiguous from 1, one aggregate, `RunAllocated` first and once
  (under the aggregate id of its run id), at most one `RunTerminated`, and after it only
  `TerminalPersistenceFailed`;
- ordering: a `StageDecided` follows its lane's `LaneResolved`, a `CheckpointWritten` or
  `StageExecuted` follows a decision of its scope, and no execution follows a reuse.

Live, `trigger` refuses an event that breaks a structural invariant (and, for a run made
with `strict_order=True`, an ordering one) by raising `JournalInvariantError`; the
command methods (`decide`, `record_checkpoint`, `record_execution`, `terminate`,
`abandon`, `record_persistence_failure`) always check both. `Run.replay` feeds recorded
events through the same rules and collects every break as a `Violation` instead:
`journal audit` reports those (domain/audit.py). Timestamps come from an injected clock,
so the domain never reads the time itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID, uuid5

import msgspec
from runjournal.domain.decisions import REUSE_CODES
from runjournal.domain.events import (
    CheckpointWritten,
    LaneResolved,
    RunAllocated,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
    TerminalPersistenceFailed,
    Timestamp,
)
from runjournal.domain.reasons import ReasonCode

RUN_NAMESPACE = UUID("5d8c0c8e-6f43-5b8e-9a51-7b3f1f3f6a10")


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

_Scope = tuple[str, str, str, str]


class Run:
    def __init__(
        self,
        aggregate_id: UUID,
        clock: Callable[[], Timestamp] | None = None,
        *,
        strict_order: bool = False,
    ) -> None:
        self.id = aggregate_id
        self.version = 0
        self.run_id = ""
        self.status = RunStatus.RUNNING
        self.terminated_at: int | None = None
        self.events_seen = 0
        self.violations: list[Violation] = []
        self._clock = clock
        self._strict_order = strict_order
        self._replaying = False
        self._allocated = False
        self._lanes: set[tuple[str, str]] = set()
        self._last_decision: dict[_Scope, ReasonCode] = {}
        self._pending: list[RunEvent] = []

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
        return self._last_decision.get((step, lane, stage, chunk))

    # --- commands: validate, then trigger --------------------------------------------

    def decide(self, **fields: Any) -> StageDecided:
        """Record one stage decision; its lane must be resolved first."""
        return self._command(StageDecided, fields)  # type: ignore[return-value]

    def record_checkpoint(self, **fields: Any) -> CheckpointWritten:
        """Record a written checkpoint; a decision of its scope must precede it."""
        return self._command(CheckpointWritten, fields)  # type: ignore[return-value]

    def record_execution(self, **fields: Any) -> StageExecuted:
        """Record a stage execution; it must follow a decision that did not reuse."""
        return self._command(StageExecuted, fields)  # type: ignore[return-value]

    def terminate(
        self, status: RunStatus, phase: RunPhase, error: RunError | None = None
    ) -> RunTerminated:
        """End the run once, with a final status (never `running`)."""
        if status is RunStatus.RUNNING:
            raise JournalInvariantError("a run cannot terminate as running")
        if (status is RunStatus.SUCCEEDED) != (error is None):
            raise JournalInvariantError("a run terminates with an error exactly when it fails")
        fields = {"status": status, "phase": phase, "error": error}
        return self._command(RunTerminated, fields)  # type: ignore[return-value]

    def abandon(self, message: str) -> RunTerminated:
        """`recover`: a run whose process is gone ends as abandoned, at recovery."""
        return self.terminate(RunStatus.ABANDONED, RunPhase.RECOVERY, RunError(message=message))

    def record_persistence_failure(self, target: str, message: str) -> TerminalPersistenceFailed:
        """A terminal file or debug write that failed (allowed after the terminal event)."""
        fields = {"target": target, "message": message}
        return self._command(TerminalPersistenceFailed, fields)  # type: ignore[return-value]

    def _command(self, event_type: type[RunEvent], fields: dict[str, Any]) -> RunEvent:
        return self._trigger(event_type, fields, order=True)

    # --- events ------------------------------------------------------------------------

    def trigger(self, event_type: type[RunEvent], **fields: Any) -> RunEvent:
        """Build the next event and apply it (structural rules; ordering if strict_order)."""
        return self._trigger(event_type, fields, order=self._strict_order)

    def _trigger(self, event_type: type[RunEvent], fields: dict[str, Any], *, order: bool) -> Any:
        if self._clock is None:
            raise JournalInvariantError("a replayed run cannot record new events without a clock")
        event = event_type(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=self._clock(),
            **fields,
        )
        self._apply(event, order=order)
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

    def _ordering(self, event: RunEvent) -> list[str]:
        if isinstance(event, StageDecided):
            if (event.step, event.lane) not in self._lanes:
                return [
                    f"decision for step {event.step!r} lane {event.lane!r} has no LaneResolved "
                    "before it"
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
        self.version = event.originator_version
        if type(event) is StageDecided:  # one per stage; `str` of the StrEnum is its value
            self._last_decision[(event.step, event.lane, str(event.stage), event.chunk)] = (
                event.code
            )
        elif isinstance(event, RunAllocated):
            self._allocated = True
            self.run_id = self.run_id or event.run_id
        elif isinstance(event, LaneResolved):
            self._lanes.add((event.step, event.lane))
        elif isinstance(event, StageDecided):
            scope = (event.step, event.lane, event.stage.value, event.chunk)
            self._last_decision[scope] = event.code
        elif isinstance(event, RunTerminated) and self.terminated_at is None:
            self.status = event.status
            self.terminated_at = event.originator_version

    def collect_events(self) -> list[RunEvent]:
        pending, self._pending = self._pending, []
        return pending

    @property
    def pending_count(self) -> int:
        return len(self._pending)
