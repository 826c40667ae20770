"""`RunLedger`: what the runner journals and tallies while it runs.

Everything the runner records goes to its `RunRecorder` (domain/ports.py) as `journal`:
decisions, checkpoint writes and artifacts through the methods here, the rest by the
part of the runner that meets it. The persistence errors the runner meets are kept in
one place that every part of the runner is handed. Counts are not kept: the projections
fold them from the events (projections/report.py).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import methodcaller
from typing import Any, Protocol

from runjournal.domain.decisions import Stage, StageFacts, decide_stage
from runjournal.domain.events import FileFingerprint, LeaseWaitOutcome, PlanOutcome
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.lane_reuse import (
    MIN_SUMMARIZED,
    Reused,
    ReusedStage,
    ReusedUsage,
    plain_reuse,
)
from runjournal.domain.leases import LeaseWait
from runjournal.domain.llm import FailureCause, LLMAttempt, LLMUsage
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointRecord,
    CheckpointRecorderPort,
    CheckpointWriteError,
    RunRecorder,
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


Held = Callable[["RunLedger"], None]
"""A lane's held-back record, or a checkpoint write to settle, replayed into a ledger."""


class BufferedRecorder:
    """A `RunRecorder` that holds one lane's records until the scheduler replays them in
    plan order (`RunLedger.absorb`): each method keeps the call, made later on the
    ledger's own recorder, so a held record goes through the same typed method."""

    def __init__(self) -> None:
        self.held: list[Held] = []
        # the method of each held record ("" for a deferred write), and the lane's plain
        # reuse decisions and their reused LLM usage: what `summary` needs to see a fully
        # reused lane
        self.kinds: list[str] = []
        self.reused: list[Reused] = []
        self._decisions = 0
        self._lane: tuple[str, str] | None = None

    def defer(self, settle: Held) -> None:
        self.held.append(settle)
        self.kinds.append("")

    def _hold(self, method: str, /, **fields: Any) -> None:
        call = methodcaller(method, **fields)
        self.held.append(lambda ledger: call(ledger.journal))
        self.kinds.append(method)

    def summary(self) -> tuple[str, str] | None:
        """(step, lane) when the held records are one fully reused lane: its
        `LaneResolved`, then only plain reuse decisions (at least `MIN_SUMMARIZED`), each
        with the LLM usage its checkpoint recorded, then its artifact. Anything else (an
        execution, a failure, a lease wait, a stored reply reused, a checkpoint rewrite)
        keeps every decision its own event."""
        kinds, n = self.kinds, len(self.reused)
        if self._decisions < MIN_SUMMARIZED or len(kinds) != n + 2:
            return None
        if kinds[0] != "lane_resolved" or kinds[-1] != "artifact":
            return None
        if any(kind not in ("decided", "llm_reused") for kind in kinds[1:-1]):
            return None
        return self._lane

    def replay_summarized(self, ledger: RunLedger) -> None:
        """Replay a fully reused lane (`summary`): its decisions as one `lane_reused`."""
        assert self._lane is not None
        self.held[0](ledger)
        step, lane = self._lane
        ledger.journal.lane_reused(step=step, lane=lane, stages=self.reused)
        self.held[-1](ledger)
        self.held.clear()
        self.kinds.clear()
        self.reused = []
        self._decisions = 0

    def inputs_fingerprinted(
        self, *, sources: list[FileFingerprint], references: list[FileFingerprint]
    ) -> None:
        self._hold("inputs_fingerprinted", sources=sources, references=references)

    def plan_resolved(
        self, *, source: str, plan_key: str, outcomes: list[PlanOutcome], chunks: int
    ) -> None:
        self._hold(
            "plan_resolved", source=source, plan_key=plan_key, outcomes=outcomes, chunks=chunks
        )

    def lane_resolved(
        self,
        *,
        step: str,
        lane: str,
        components: LaneComponents,
        lane_identity: str,
        dependencies: list[ArtifactRef],
        chunks: int,
        forced: bool,
        reads: dict[Stage, list[ArtifactRef]],
    ) -> None:
        self._lane = (step, lane)
        self._hold(
            "lane_resolved",
            step=step,
            lane=lane,
            components=components,
            lane_identity=lane_identity,
            dependencies=dependencies,
            chunks=chunks,
            forced=forced,
            reads=reads,
        )

    def lease_waited(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        holder: str,
        outcome: LeaseWaitOutcome,
    ) -> None:
        self._hold(
            "lease_waited",
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            holder=holder,
            outcome=outcome,
        )

    def decided(
        self,
        *,
        step: str,
        lane: str,
        chunk: str,
        facts: StageFacts,
        code: ReasonCode,
        cause: FailureCause | None = None,
    ) -> None:
        if plain_reuse(facts, code, cause):
            self.reused.append(ReusedStage.of_facts(chunk, facts))
            self._decisions += 1
        self._hold(
            "decided", step=step, lane=lane, chunk=chunk, facts=facts, code=code, cause=cause
        )

    def lane_reused(self, *, step: str, lane: str, stages: list[Reused]) -> None:
        self._hold("lane_reused", step=step, lane=lane, stages=stages)

    def executed(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> None:
        self._hold(
            "executed", step=step, lane=lane, stage=stage, chunk=chunk, sha256=sha256, size=size
        )

    def stage_failed(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        code: ReasonCode,
        message: str,
        cause: FailureCause | None = None,
    ) -> None:
        self._hold(
            "stage_failed",
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            code=code,
            message=message,
            cause=cause,
        )

    def llm_attempt(
        self, *, step: str, lane: str, stage: Stage, chunk: str, attempt: LLMAttempt
    ) -> None:
        self._hold("llm_attempt", step=step, lane=lane, stage=stage, chunk=chunk, attempt=attempt)

    def llm_reused(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        usage: LLMUsage,
        request_sha256: str | None = None,
    ) -> None:
        if request_sha256 is None:  # a reused checkpoint's cost, not a stored reply
            self.reused.append(ReusedUsage(stage, chunk, usage))
        self._hold(
            "llm_reused",
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            usage=usage,
            request_sha256=request_sha256,
        )

    def checkpoint_written(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> None:
        self._hold(
            "checkpoint_written",
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            sha256=sha256,
            size=size,
        )

    def checkpoint_write_failed(
        self, *, step: str, lane: str, stage: Stage, chunk: str, message: str
    ) -> None:
        self._hold(
            "checkpoint_write_failed",
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            message=message,
        )

    def artifact(
        self, *, artifact: ArtifactRef, warnings: list[str], restored: bool = False
    ) -> None:
        self._hold("artifact", artifact=artifact, warnings=warnings, restored=restored)

    def warning(self, *, step: str, lane: str, message: str) -> None:
        self._hold("warning", step=step, lane=lane, message=message)


class RunLedger:
    """The run's recorder and checkpoint recorder, with the persistence errors of one run."""

    def __init__(
        self,
        journal: RunRecorder,
        recorder: CheckpointRecorderPort | None,
        writes: CheckpointWrites | None = None,
    ) -> None:
        self.journal = journal
        self._recorder = recorder
        self._writes = writes
        self.persistence_errors: list[str] = []
        # a lane's writes handed to `writes` and not yet seen done, oldest first
        self._unsettled: list[Callable[[], Any]] = []

    def child(self) -> RunLedger:
        """A ledger for one lane: same checkpoint recorder, its records and errors held back."""
        return RunLedger(BufferedRecorder(), self._recorder, self._writes)

    def absorb(self, child: RunLedger) -> None:
        """Replay a lane's held-back records into this ledger's recorder, then its errors."""
        buffered = child.journal
        if isinstance(buffered, BufferedRecorder):
            if buffered.summary() is not None:  # docs/internals.md "Reuse summaries"
                buffered.replay_summarized(self)
            for held in buffered.held:
                held(self)  # a record, or a checkpoint write: waited for, journaled here
            buffered.held.clear()
            buffered.kinds.clear()
        self.persistence_errors.extend(child.persistence_errors)
        child.persistence_errors.clear()

    def writes_done(self) -> bool:
        """Whether every checkpoint write this lane handed off is in, without waiting:
        a pool that writes in windows (cli/parallel.py) would otherwise be waited for
        when the lane is journaled; one that cannot tell counts as done (its writes are
        waited for then)."""
        if self._unsettled:
            self._unsettled = [w for w in self._unsettled if not w.done()]  # type: ignore[attr-defined]
        return not self._unsettled

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
        self.journal.decided(step=step, lane=lane, chunk=chunk, facts=facts, code=code, cause=cause)
        return code

    def lease_waited(self, key: CheckpointKey, wait: LeaseWait) -> None:
        """Journal a wait for another run's lease on `key`, before its decision."""
        self.journal.lease_waited(
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
    ) -> bool:
        """Persist a checkpoint; a failed write is journaled and the run goes on.

        A lane's ledger with `writes` hands the write to them and journals it when the
        lane is replayed (the file is always written before its event). `then` runs as
        soon as the write is done or failed (the stage's lease is released there). True
        when the checkpoint is in the store once this returns (a streaming merge may read
        it back instead of holding it: docs/modules.md "Streaming merge").
        """
        recorder = self._recorder
        if recorder is None:
            if then is not None:
                then()
            return False
        if self._writes is not None and isinstance(self.journal, BufferedRecorder):
            writes = self._writes
            wait = writes.submit(key, record) if then is None else writes.submit(key, record, then)
            if hasattr(wait, "done"):
                self._unsettled.append(wait)
            self.journal.defer(lambda ledger: ledger._settle_write(key, wait))
            return False
        try:
            return self._settle_write(key, lambda: recorder.write(key, record))
        finally:
            if then is not None:
                then()

    def stored_checkpoint(
        self, key: CheckpointKey, stored: Any, *, then: Callable[[], None] | None = None
    ) -> None:
        """Journal a checkpoint a worker wrote to the bucket itself (a `StoredCheckpoint`,
        verified by the executor: docs/internals.md "Object-storage cache"), in the lane's
        order as `write_checkpoint` journals one it writes; a write the worker or the
        check refused is journaled as failed and the run goes on."""

        def written() -> tuple[str, int]:
            if stored.error is not None:
                raise CheckpointWriteError(stored.error)
            return stored.sha256, stored.size

        try:
            if self._recorder is not None:
                self._settle_write(key, written)
        finally:
            if then is not None:
                then()

    def _settle_write(self, key: CheckpointKey, write: Callable[[], tuple[str, int]]) -> bool:
        try:
            sha, size = write()
        except CheckpointWriteError as exc:
            message = safe_error_text(str(exc))
            self.persistence_errors.append(message)
            self.journal.checkpoint_write_failed(
                step=key.step,
                lane=key.lane,
                stage=key.stage,
                chunk=key.chunk,
                message=message,
            )
            return False
        self.journal.checkpoint_written(
            step=key.step,
            lane=key.lane,
            stage=key.stage,
            chunk=key.chunk,
            sha256=sha,
            size=size,
        )
        return True

    def artifact(self, artifact: Artifact, *, restored: bool = False) -> None:
        self.journal.artifact(artifact=artifact.ref, warnings=artifact.warnings, restored=restored)
