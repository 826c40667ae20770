"""Ports: what the runner needs from the world, as small protocols.

Adapters implement them; the CLI's composition root decides which exist (no loader
without --resume/--recompute, no checkpoint recorder with --no-checkpoints, no plan store
in bypass mode). The runner never sees a root or a path; what it records about the run
goes through `RunRecorder`, typed methods named after what happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from runjournal.domain.chunking import Span
from runjournal.domain.decisions import (
    CheckpointState,
    PredecessorState,
    Stage,
    StageDigests,
    StageFacts,
)
from runjournal.domain.events import FileFingerprint, LeaseWaitOutcome, PlanOutcome
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.lane_reuse import Reused
from runjournal.domain.llm import FailureCause, LLMAttempt, LLMUsage
from runjournal.domain.plan_keys import PlanFacts
from runjournal.domain.reasons import ReasonCode

if TYPE_CHECKING:
    from runjournal.domain.modules import Chunk
    from runjournal.domain.pipeline import Source


class RunRecorder(Protocol):
    """What the runner records about its run: one method per thing that happened.

    The journal session implements it (adapters/journal/session.py), each method through
    the `Run` aggregate's command of the same event (domain/run.py), so an event that
    would break the journal's invariants is refused as it is recorded; a lane's records
    are held back and replayed in plan order by `BufferedRecorder`
    (domain/runner/ledger.py). Free text (messages, warnings, profile names) is redacted
    by the implementation, at the journal boundary.
    """

    def inputs_fingerprinted(
        self, *, sources: list[FileFingerprint], references: list[FileFingerprint]
    ) -> None: ...

    def plan_resolved(
        self, *, source: str, plan_key: str, outcomes: list[PlanOutcome], chunks: int
    ) -> None: ...

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
    ) -> None: ...

    def lease_waited(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        holder: str,
        outcome: LeaseWaitOutcome,
    ) -> None: ...

    def decided(
        self,
        *,
        step: str,
        lane: str,
        chunk: str,
        facts: StageFacts,
        code: ReasonCode,
        cause: FailureCause | None = None,
    ) -> None: ...

    def lane_reused(self, *, step: str, lane: str, stages: list[Reused]) -> None:
        """Every decision of a lane was a plain reuse (`domain/lane_reuse.py`): the
        `StageDecided` of each `ReusedStage` and the `LLMUsageReused` of each
        `ReusedUsage` of `stages`, in order, which an implementation may journal as one
        `LaneReused` summary (docs/internals.md "Reuse summaries")."""
        ...

    def executed(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> None: ...

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
    ) -> None: ...

    def llm_attempt(
        self, *, step: str, lane: str, stage: Stage, chunk: str, attempt: LLMAttempt
    ) -> None: ...

    def llm_reused(
        self,
        *,
        step: str,
        lane: str,
        stage: Stage,
        chunk: str,
        usage: LLMUsage,
        request_sha256: str | None = None,
    ) -> None: ...

    def checkpoint_written(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> None: ...

    def checkpoint_write_failed(
        self, *, step: str, lane: str, stage: Stage, chunk: str, message: str
    ) -> None: ...

    def artifact(
        self, *, artifact: ArtifactRef, warnings: list[str], restored: bool = False
    ) -> None: ...

    def warning(self, *, step: str, lane: str, message: str) -> None:
        """A warning about a step's lane that no artifact carries (a partial step's lane
        that ran without some of its producer lanes)."""


class StoreScope(msgspec.Struct, frozen=True):
    """What a stage's checkpoint is, beyond its step, lane and stage: where it is stored.

    `step_identity` is `identity.step_identity(S)`, `dependencies` the stage's D (empty
    when it consumes nothing) and `lane_identity` the lane identity (docs/internals.md
    "Checkpoint store").
    """

    step_identity: str
    dependencies: str
    lane_identity: str


class CheckpointKey(msgspec.Struct, frozen=True):
    """A stage's position (step, lane, stage, chunk) and, for lookups, its `scope`.

    Without a scope a lookup finds the lane's most recently written checkpoint at that
    position (the layout before the scope existed behaves so too).
    """

    step: str
    lane: str
    stage: Stage
    chunk: str = ""
    scope: StoreScope | None = None

    @property
    def position(self) -> CheckpointKey:
        """The same key without its scope."""
        return CheckpointKey(self.step, self.lane, self.stage, self.chunk)


class Provenance(msgspec.Struct, frozen=True):
    """Who produced a normalize artifact: checked before a restored artifact is trusted.

    The artifact's `ArtifactRef` fields and the producer's module fingerprint, kept flat
    because checkpoint envelopes on disk store them so (docs/internals.md "Identity per
    stage"); `of` builds one from a ref and `artifact` gives the ref back.
    """

    step: str
    lane: str
    module_fingerprint: str
    kind: str
    schema: str
    media_type: str
    sha256: str
    size: int

    @classmethod
    def of(cls, artifact: ArtifactRef, module_fingerprint: str) -> Provenance:
        return cls(module_fingerprint=module_fingerprint, **msgspec.structs.asdict(artifact))

    @property
    def artifact(self) -> ArtifactRef:
        return ArtifactRef.of_flat(self)


class CheckpointRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a checkpoint stores: the envelope facts and the canonical payload bytes."""

    codec_id: str
    lane_identity: str
    digests: StageDigests
    output_sha256: str
    payload: bytes
    warnings: list[str] = msgspec.field(default_factory=list)
    provenance: Provenance | None = None
    usage: LLMUsage | None = None  # what producing it cost (LLM calls); None when nothing


class LoadedCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """The loader's typed verdict on one scope; `record` only when state is PRESENT."""

    state: CheckpointState
    record: CheckpointRecord | None = None


class RestoredArtifact(msgspec.Struct, frozen=True, kw_only=True):
    """A required producer's accepted normalize artifact, or the typed reason it failed."""

    state: PredecessorState
    record: CheckpointRecord | None = None


class CheckpointLoaderPort(Protocol):
    def load(self, key: CheckpointKey, codec_id: str) -> LoadedCheckpoint: ...

    def load_accepted_artifact(
        self, step: str, lane: str, lane_identity: str, codec_id: str
    ) -> RestoredArtifact: ...


class ScopeIndex(Protocol):
    """What `plan` asks the cache beyond lookups: the D values a lane has checkpoints under."""

    def stored_dependencies(self, step: str, lane: str, identity: str) -> list[str]: ...


class CheckpointWriteError(Exception):
    """A checkpoint could not be persisted (the run goes on; exit 3 at the end)."""


class CheckpointRecorderPort(Protocol):
    def write(self, key: CheckpointKey, record: CheckpointRecord) -> tuple[str, int]:
        """Persist atomically; returns (sha256, size) of the file written."""
        ...


class KnownChunks(Protocol):
    """The chunks of an input not read (docs/internals.md "Inputs a resume does not
    read"): each chunk's (id, start, end, sha256) recorded under its plan key when the
    input was last chunked, and the input's bytes when they are needed after all."""

    def chunks(self, source: str, plan_key: str) -> list[tuple[str, int, int, str]] | None:
        """The recorded chunks of `source` under `plan_key`; None when not recorded."""
        ...

    def remember(self, source: str, plan_key: str, chunks: list[Chunk]) -> None: ...

    def read(self, source: Source) -> bytes:
        """`source`'s bytes, checked against its digest (`SourceChanged` otherwise)."""
        ...


class Spool(Protocol):
    """Bytes a run sets aside until it writes its outputs: the artifacts no other step
    consumes and the output files, so what the run holds per document is a handle, not
    the bytes (docs/internals.md "Run outputs as links"; adapters/spool.py)."""

    def put(self, data: bytes) -> Any:
        """Set `data` aside; returns the handle `get` takes."""
        ...

    def get(self, handle: Any) -> bytes: ...


class SourceChanged(Exception):
    """An input trusted by its stat facts holds other bytes when it is read after all."""


class PlanLookup(msgspec.Struct, frozen=True):
    outcome: PlanOutcome  # REUSED, CORRUPT, or COMPUTED (nothing stored)
    spans: list[Span] | None = None


class PlanPublishError(Exception):
    """An accepted plan could not be published (the plan is still used)."""


class ChunkPlanStore(Protocol):
    def get(self, key: str) -> PlanLookup: ...

    def publish(
        self,
        key: str,
        spans: list[Span],
        facts: PlanFacts | None = None,
        *,
        durable: bool = True,
    ) -> bool:
        """Publish an accepted plan; False when the mode does not write (read-only).

        `durable=False`: atomic for readers, durable only after the next `sync()`."""
        ...

    def sync(self) -> None:
        """Make every plan published with `durable=False` durable (one barrier); raises
        PlanPublishError when it cannot (docs/internals.md "Group durability")."""
        ...


class TraceRecorder(Protocol):
    """Spans for steps, lanes and stages, and module trace material (redacted by the adapter)."""

    def record(self, kind: str, name: str, data: dict[str, Any]) -> None: ...


class LLMBatchRecorder(Protocol):
    """What the LLM runtime records of the provider batches of a run in batch mode
    (docs/operations.md "Batch runs"), on the scheduler's thread: the journal session
    implements it through the `Run` aggregate's commands."""

    def llm_batch_submitted(
        self,
        *,
        batch_id: str,
        request_set: str,
        profile_id: str,
        model: str,
        round: int,
        requests: int,
        resumed: bool,
        stages: list[tuple[str, str, Stage, str]],
    ) -> None: ...

    def llm_batch_polled(
        self, *, batch_id: str, status: str, total: int, completed: int, failed: int
    ) -> None: ...

    def llm_batch_completed(
        self, *, batch_id: str, status: str, completed: int, errored: int, expired: int
    ) -> None: ...
