"""`RunLedger`: what the runner journals and tallies while it runs.

Decisions, checkpoint writes, generated artifacts and plan outcomes go to the event sink
through here, and the persistence errors the runner meets are kept in one place that every
part of the runner is handed. Counts are not kept: the projections fold them from the
events (projections/report.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from runjournal.domain.decisions import StageFacts, decide_stage
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    CheckpointWritten,
    RunEvent,
    StageDecided,
    StageLeaseWaited,
)
from runjournal.domain.leases import LeaseWait
from runjournal.domain.llm import FailureCause
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointRecord,
    CheckpointRecorder,
    CheckpointWriteError,
    EventSink,
)
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.redaction import safe_error_text
from runjournal.domain.runner.artifacts import Artifact


class CheckpointWrites(Protocol):
    """Checkpoint writes off the calling thread (`--jobs N`): `submit` starts one write and
    returns what waits for it, giving (sha256, size) or raising `CheckpointWriteError`."""

    def submit(
        self,
        key: CheckpointKey,
        record: CheckpointRecord,
        then: Callable[[], None] | None = None,
    ) -> Callable[[], tuple[str, int]]:
        """`then` runs once the write is done, whatever its outcome (a lease's release)."""
        ...


# A held-back event, or a checkpoint write to settle into the ledger that replays it.
_Held = tuple[type[RunEvent], dict[str, Any]] | Callable[["RunLedger"], None]


class BufferedSink:
    """Holds one lane's events until the scheduler replays them in plan order."""

    def __init__(self) -> None:
        self.events: list[_Held] = []

    def emit(self, event_type: type[RunEvent], **fields: Any) -> None:
        self.events.append((event_type, fields))

    def defer(self, settle: Callable[[RunLedger], None]) -> None:
        self.events.append(settle)


class RunLedger:
    """The run's event sink and checkpoint recorder, with the tallies of one run."""

    def __init__(
        self,
        sink: EventSink,
        recorder: CheckpointRecorder | None,
        writes: CheckpointWrites | None = None,
    ) -> None:
        self.sink = sink
        self._recorder = recorder
        self._writes = writes
        self.persistence_errors: list[str] = []

    def child(self) -> RunLedger:
        """A ledger for one lane: same recorder, its events and errors held back."""
        return RunLedger(BufferedSink(), self._recorder, self._writes)

    def absorb(self, child: RunLedger) -> None:
        """Replay a lane's held-back events into this ledger's sink, then its errors."""
        if isinstance(child.sink, BufferedSink):
            for held in child.sink.events:
                if isinstance(held, tuple):
                    event_type, fields = held
                    self.sink.emit(event_type, **fields)
                else:
                    held(self)  # a checkpoint write: waited for, journaled here
            child.sink.events.clear()
        self.persistence_errors.extend(child.persistence_errors)
        child.persistence_errors.clear()

    @property
    def recording(self) -> bool:
        """Whether checkpoints are written at all (no recorder with --no-checkpoints)."""
        return self._recorder is not None

    def persistence_error(self, message: str) -> None:
        self.persistence_errors.append(message)

    def decide(
        self,
        step: str,
        lane: str,
        chunk: str,
        facts: StageFacts,
        cause: FailureCause | None = None,
    ) -> ReasonCode:
        """Decide a stage from its facts and journal the decision with them."""
        code = decide_stage(facts)
        fields = StageDecided.fields(step, lane, chunk, facts, code)
        if cause is not None:
            fields["cause"] = cause
        self.sink.emit(StageDecided, **fields)
        return code

    def lease_waited(self, key: CheckpointKey, wait: LeaseWait) -> None:
        """Journal a wait for another run's lease on `key`, before its decision."""
        self.sink.emit(
            StageLeaseWaited,
            step=key.step,
            lane=key.lane,
            stage=key.stage,
            chunk=key.chunk,
            holder=wait.holder,
            outcome=wait.outcome,
        )

    def write_checkpoint(
        self,
        key: CheckpointKey,
        record: CheckpointRecord,
        *,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Persist a checkpoint; a failed write is journaled and the run goes on.

        A lane's ledger with `writes` hands the write to them and journals it when the
        lane is replayed (the file is always written before its event). `then` runs as
        soon as the write is done or failed (the stage's lease is released there).
        """
        recorder = self._recorder
        if recorder is None:
            if then is not None:
                then()
            return
        if self._writes is not None and isinstance(self.sink, BufferedSink):
            writes = self._writes
            wait = writes.submit(key, record) if then is None else writes.submit(key, record, then)
            self.sink.defer(lambda ledger: ledger._settle_write(key, wait))
            return
        try:
            self._settle_write(key, lambda: recorder.write(key, record))
        finally:
            if then is not None:
                then()

    def _settle_write(self, key: CheckpointKey, write: Callable[[], tuple[str, int]]) -> None:
        try:
            sha, size = write()
        except CheckpointWriteError as exc:
            message = safe_error_text(str(exc))
            self.persistence_errors.append(message)
            self.sink.emit(
                CheckpointWriteFailed,
                step=key.step,
                lane=key.lane,
                stage=key.stage,
                chunk=key.chunk,
                message=message,
            )
            return
        self.sink.emit(
            CheckpointWritten,
            step=key.step,
            lane=key.lane,
            stage=key.stage,
            chunk=key.chunk,
            sha256=sha,
            size=size,
        )

    def emit_artifact(self, artifact: Artifact, *, restored: bool = False) -> None:
        self.sink.emit(
            ArtifactGenerated,
            **ArtifactGenerated.fields_of(artifact.ref),
            warnings=artifact.warnings,
            restored=restored,
        )
