"""`RunLedger`: what the runner journals and tallies while it runs.

Decisions, checkpoint writes, generated artifacts and plan outcomes go to the event sink
through here, and the persistence errors the runner meets are kept in one place that every
part of the runner is handed. Counts are not kept: the projections fold them from the
events (projections/report.py).
"""

from __future__ import annotations

from runjournal.domain.decisions import StageFacts, decide_stage
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    CheckpointWritten,
    StageDecided,
)
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


class RunLedger:
    """The run's event sink and checkpoint recorder, with the tallies of one run."""

    def __init__(self, sink: EventSink, recorder: CheckpointRecorder | None) -> None:
        self.sink = sink
        self._recorder = recorder
        self.persistence_errors: list[str] = []

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

    def write_checkpoint(self, key: CheckpointKey, record: CheckpointRecord) -> None:
        """Persist a checkpoint; a failed write is journaled and the run goes on."""
        if self._recorder is None:
            return
        try:
            sha, size = self._recorder.write(key, record)
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
