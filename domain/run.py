"""The `Run` aggregate: one per run, held in memory for the whole invocation.

It is a small state machine over the run's events (status, decision counts) that
enforces the journal's invariants as events are triggered. Timestamps come from an
injected clock, so the domain never reads the time itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID, uuid5

from runjournal.domain.events import (
    RunAllocated,
    RunEvent,
    RunStatus,
    RunTerminated,
    StageDecided,
    TerminalPersistenceFailed,
    Timestamp,
)

RUN_NAMESPACE = UUID("5d8c0c8e-6f43-5b8e-9a51-7b3f1f3f6a10")


def run_aggregate_id(run_id: str) -> UUID:
    """Aggregate id = uuid5(fixed namespace, run id) (docs/internals.md "The journal")."""
    return uuid5(RUN_NAMESPACE, run_id)


class JournalInvariantError(Exception):
    """An event would break the journal's own invariants."""


# Events that may still follow a terminal event (reporting what could not be persisted).
_AFTER_TERMINAL = (TerminalPersistenceFailed,)


class Run:
    def __init__(self, aggregate_id: UUID, clock: Callable[[], Timestamp] | None = None) -> None:
        self.id = aggregate_id
        self.version = 0
        self.run_id = ""
        self.status = RunStatus.RUNNING
        self.decisions: dict[str, int] = {}
        self._clock = clock
        self._pending: list[RunEvent] = []

    @classmethod
    def allocate(cls, clock: Callable[[], Timestamp], **fields: Any) -> Run:
        run = cls(run_aggregate_id(fields["run_id"]), clock)
        run.trigger(RunAllocated, **fields)
        return run

    @property
    def terminated(self) -> bool:
        return self.status is not RunStatus.RUNNING

    def trigger(self, event_type: type[RunEvent], **fields: Any) -> RunEvent:
        if self._clock is None:
            raise JournalInvariantError("a replayed run cannot record new events without a clock")
        event = event_type(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=self._clock(),
            **fields,
        )
        self.apply(event)
        self._pending.append(event)
        return event

    def apply(self, event: RunEvent) -> None:
        if event.originator_version != self.version + 1:
            raise JournalInvariantError(
                f"event version {event.originator_version} does not follow {self.version}"
            )
        if self.version == 0 and not isinstance(event, RunAllocated):
            raise JournalInvariantError("the first event of a run must be RunAllocated")
        if self.version > 0 and isinstance(event, RunAllocated):
            raise JournalInvariantError("a run is allocated once")
        if self.terminated and not isinstance(event, _AFTER_TERMINAL):
            raise JournalInvariantError(f"{type(event).__name__} after the run was terminated")
        if isinstance(event, RunAllocated):
            self.run_id = event.run_id
        elif isinstance(event, StageDecided):
            key = event.code.value
            self.decisions[key] = self.decisions.get(key, 0) + 1
        elif isinstance(event, RunTerminated):
            self.status = event.status
        self.version = event.originator_version

    def collect_events(self) -> list[RunEvent]:
        pending, self._pending = self._pending, []
        return pending

    @property
    def pending_count(self) -> int:
        return len(self._pending)
