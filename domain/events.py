"""The run journal's typed, immutable events (frozen msgspec Structs).

Every event belongs to one `Run` aggregate. Fields are plain typed data; enums stay
enums here and become strings only when a projection renders JSON. A class that
changes shape bumps `class_version` and gains an `upcast_vN_vN+1(state: dict)`
static method, applied on read by the journal's mapper.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import msgspec
from runjournal.domain.decisions import (
    CheckpointState,
    PredecessorState,
    Stage,
    StageDigests,
    StageFacts,
    recorded_differences,
    with_differences,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.llm import AttemptStatus, FailureCause, LLMAttempt, LLMUsage
from runjournal.domain.reasons import Category, ReasonCode, category_of, detail_for

# The type of every event timestamp. The value always comes from a clock injected by the
# journal session; this is the only domain module that imports `datetime` (the purity
# contract in pyproject.toml lists it as its one exception).
Timestamp = datetime


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"


class RunPhase(enum.StrEnum):
    ALLOCATION = "allocation"
    RESOLUTION = "resolution"
    EXECUTION = "execution"
    TERMINALIZATION = "terminalization"
    RECOVERY = "recovery"


class PlanOutcome(enum.StrEnum):
    REUSED = "reused"
    COMPUTED = "computed"
    PUBLISHED = "published"
    CORRUPT = "corrupt"
    BYPASSED = "bypassed"


class LeaseWaitOutcome(enum.StrEnum):
    """How a run's wait for another run's stage lease ended (domain/leases.py)."""

    RELEASED = "released"  # the other run released it; this run took it, then looked again
    DEADLOCK = "deadlock"  # the runs waited on each other: this one went on without it


class RunEvent(msgspec.Struct, frozen=True, kw_only=True):
    """Base of all run events: the aggregate id, its version and when it happened."""

    originator_id: UUID
    originator_version: int
    timestamp: Timestamp

    class_version: ClassVar[int] = 1


# --- payload records -------------------------------------------------------------


class Setting(msgspec.Struct, frozen=True):
    name: str
    value: Any
    origin: str


class FileFingerprint(msgspec.Struct, frozen=True, array_like=True):
    name: str
    sha256: str
    size: int


class RunError(msgspec.Struct, frozen=True):
    """The primary error of a failed run: names only step, lane and reason code."""

    message: str
    step: str | None = None
    lane: str | None = None
    reason_code: ReasonCode | None = None
    cause: FailureCause | None = None  # typed failure cause of a failed stage (docs/modules.md)


class RefusedName(msgspec.Struct, frozen=True):
    name: str
    refusal: str


# --- events ----------------------------------------------------------------------


class RunAllocated(RunEvent, frozen=True, kw_only=True):
    run_id: str
    pipeline: str
    pipeline_file: str
    argv: list[str]
    tool_version: str
    run_dir: str
    output_root: str
    cache_root: str
    workspace: str | None
    debug_bundle: str | None
    host: str
    pid: int
    process_start: float
    # What the run's report needs and nothing else records; added with defaults, so
    # older rows decode as "not recorded" (docs/internals.md "Event versions").
    debug_root: str | None = None
    journal: str | None = None  # the journal's URL as shown (password hidden)
    recompute: list[str] = []  # the steps --recompute selected
    forced: list[str] = []  # the steps that selection forced


class ConfigurationResolved(RunEvent, frozen=True, kw_only=True):
    settings: list[Setting]


class DebugBundleAllocated(RunEvent, frozen=True, kw_only=True):
    path: str
    trace: bool


class InputsFingerprinted(RunEvent, frozen=True, kw_only=True):
    sources: list[FileFingerprint]
    references: list[FileFingerprint]


class ProfileObserved(RunEvent, frozen=True, kw_only=True):
    step: str
    profile_id: str
    provider: str
    model: str
    profile: str
    profile_source: str
    source_kind: str


class ModuleObserved(RunEvent, frozen=True, kw_only=True):
    """The module a step loaded at resolution, as its author declared it.

    `source_sha256` is `class:<sha256>` of the module class's own code (path plugins and
    installed modules; None for the built-ins; a bare file digest in runs recorded before
    issue 32). It is never
    part of identity: reuse trusts the declared fingerprint, and a source that changed
    under an unchanged fingerprint is only a warning (docs/modules.md "Fingerprints").
    """

    step: str
    module: str
    fingerprint: str
    source: str | None
    source_sha256: str | None


class ChunkPlanResolved(RunEvent, frozen=True, kw_only=True):
    """How a source's plan was obtained, e.g. [corrupt, computed, published]."""

    source: str
    plan_key: str
    outcomes: list[PlanOutcome]
    chunks: int


class LaneResolved(RunEvent, frozen=True, kw_only=True):
    """A lane's current components (S), identity and dependencies (D).

    v2: `forced` is required. In v1 it was optional and an absent value meant "not
    forced"; the audit compares it with every decision of the lane, so a v2 writer
    that forgets it is refused on read instead of being taken as not forced.
    """

    step: str
    lane: str
    components: LaneComponents
    lane_identity: str
    dependencies: list[ArtifactRef]
    chunks: int
    forced: bool
    # Stage -> the refs of the parts of `dependencies` it reads, for the stages whose
    # module declares a part (`Module.reads`); a stage not here reads them all. Empty
    # in rows written before it existed (docs/internals.md "Event versions").
    reads: dict[Stage, list[ArtifactRef]] = msgspec.field(default_factory=dict)

    class_version: ClassVar[int] = 2

    def stage_dependencies(self, stage: Stage) -> list[ArtifactRef]:
        """What a stage of this lane depends on: the parts it reads, else every artifact."""
        return self.reads.get(stage, self.dependencies)

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state.setdefault("forced", False)


class StageDecided(RunEvent, frozen=True, kw_only=True):
    """One stage decision and the facts it was decided from.

    The lane's current components are in its `LaneResolved`; here are the stage's own
    current digests and only the recorded digests that differ from them.
    """

    step: str
    lane: str
    stage: Stage
    chunk: str
    code: ReasonCode
    category: Category
    detail: str
    forced: bool
    resumed: bool
    failed: bool = False
    checkpoint: CheckpointState
    predecessor: PredecessorState | None = None
    input: str
    dependencies: str
    recorded: dict[str, str]
    cause: FailureCause | None = None  # only on a failed stage: why (not a decision fact)

    @staticmethod
    def fields(step: str, lane: str, chunk: str, facts: StageFacts, code: ReasonCode) -> dict:
        """The event's fields for a decision: the facts, stored compactly."""
        return {
            "step": step,
            "lane": lane,
            "stage": facts.stage,
            "chunk": chunk,
            "code": code,
            "category": category_of(code),
            "detail": detail_for(code),
            "forced": facts.forced,
            "resumed": facts.resumed,
            "failed": facts.failed,
            "checkpoint": facts.checkpoint,
            "predecessor": facts.predecessor,
            "input": facts.current.input,
            "dependencies": facts.current.dependencies,
            "recorded": recorded_differences(facts),
        }

    def facts(self, components: LaneComponents) -> StageFacts:
        """The facts again, given the lane's current components (from its LaneResolved)."""
        current = StageDigests(components, self.input, self.dependencies)
        has_record = self.checkpoint in (CheckpointState.PRESENT, CheckpointState.LANE_ONLY)
        return StageFacts(
            stage=self.stage,
            forced=self.forced,
            resumed=self.resumed,
            failed=self.failed,
            predecessor=self.predecessor,
            checkpoint=self.checkpoint,
            current=current,
            recorded=with_differences(current, self.recorded) if has_record else None,
        )


class StageExecuted(RunEvent, frozen=True, kw_only=True):
    step: str
    lane: str
    stage: Stage
    chunk: str
    sha256: str
    size: int


class StageFailed(RunEvent, frozen=True, kw_only=True):
    step: str
    lane: str
    stage: Stage
    chunk: str
    code: ReasonCode
    message: str
    cause: FailureCause | None = None


class StageLeaseWaited(RunEvent, frozen=True, kw_only=True):
    """The run waited for a stage's lease held by another run, before deciding the stage
    (docs/operations.md "Concurrent runs"): its decision follows, from what it found then."""

    step: str
    lane: str
    stage: Stage
    chunk: str
    holder: str  # the run that held it ("pid N" when it could not be named)
    outcome: LeaseWaitOutcome


class LLMCallAttempted(RunEvent, frozen=True, kw_only=True):
    """One request to an LLM endpoint (retries and re-asks included), in the stage's order.

    Tokens, latency, status and cost; the request and the reply only as sha256 digests,
    never their text (docs/internals.md "The LLM runtime").
    """

    step: str
    lane: str
    stage: Stage
    chunk: str
    call: int
    attempt: int
    profile_id: str
    provider: str
    model: str
    status: AttemptStatus
    http_status: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    cost: float = 0.0
    request_sha256: str
    reply_sha256: str | None = None
    wait_ms: float = 0.0
    replayed: bool = False
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache

    @staticmethod
    def fields_of(attempt: LLMAttempt) -> dict[str, Any]:
        return {
            name: getattr(attempt, name)
            for name in LLMAttempt.__struct_fields__
            if name != "reused"
        }


class LLMUsageReused(RunEvent, frozen=True, kw_only=True):
    """A reused checkpoint's recorded cost, or one stored reply reused instead of asking
    again (`request_sha256` set): what this run did not spend again."""

    step: str
    lane: str
    stage: Stage
    chunk: str
    usage: LLMUsage
    request_sha256: str | None = None


class CheckpointWritten(RunEvent, frozen=True, kw_only=True):
    step: str
    lane: str
    stage: Stage
    chunk: str
    sha256: str
    size: int


class CheckpointWriteFailed(RunEvent, frozen=True, kw_only=True):
    step: str
    lane: str
    stage: Stage
    chunk: str
    message: str


class ArtifactGenerated(RunEvent, frozen=True, kw_only=True):
    """A lane's artifact: its `ArtifactRef` fields (flat, as journals store them), warnings."""

    step: str
    lane: str
    kind: str
    schema: str
    media_type: str
    sha256: str
    size: int
    warnings: list[str]
    restored: bool = False

    @staticmethod
    def fields_of(artifact: ArtifactRef) -> dict[str, Any]:
        """The event's identity fields for an artifact ref."""
        return msgspec.structs.asdict(artifact)

    @property
    def artifact(self) -> ArtifactRef:
        return ArtifactRef.of_flat(self)


class WarningRecorded(RunEvent, frozen=True, kw_only=True):
    step: str
    lane: str
    message: str


class HintRecorded(RunEvent, frozen=True, kw_only=True):
    """A hint the run gave before executing (the plain-run hint of app/resume_hint.py)."""

    message: str


class OutputsValidated(RunEvent, frozen=True, kw_only=True):
    checked: int
    refused: list[RefusedName]


class OutputWritten(RunEvent, frozen=True, kw_only=True):
    """A file written into the run directory.

    `step` and `lane` name the lane whose artifact the file holds or renders (`runs
    show` lists them as its provenance); both are None for runjournal's own files
    (`chunk-map.json`) and in journals written before they were recorded.
    """

    name: str
    sha256: str
    size: int
    step: str | None = None
    lane: str | None = None


class RunTerminated(RunEvent, frozen=True, kw_only=True):
    status: RunStatus
    phase: RunPhase
    error: RunError | None = None


class TerminalPersistenceFailed(RunEvent, frozen=True, kw_only=True):
    target: str
    message: str


class CacheEntryKind(enum.StrEnum):
    CHECKPOINT = "checkpoint"
    CHUNK_PLAN = "chunk_plan"


class RemovalReason(enum.StrEnum):
    """Why `gc` removed a cache entry (docs/operations.md "Retention and cleanup")."""

    UNREFERENCED = "unreferenced"  # no kept run's events reference it
    OVER_SIZE = "over_size"  # referenced, but least recently used beyond --max-cache-size


class CacheRemoval(msgspec.Struct, frozen=True):
    kind: CacheEntryKind
    name: str  # relative to the cache root
    size: int
    reason: RemovalReason


class CacheCollected(RunEvent, frozen=True, kw_only=True):
    """What one `gc` removed from the cache root, recorded after removing it.

    Not a run's event: each collection is its own one-event aggregate
    (`domain/cache_refs.py` `collection_id`), so `runs list` never shows it.
    """

    collection: str
    cache_root: str
    removed: list[CacheRemoval]
    freed: int  # bytes removed
    size_before: int
    size_after: int
    kept_runs: int
    max_size: int | None = None


class SealReason(enum.StrEnum):
    """When a run's checkpoint was made (docs/operations.md "Signed checkpoints")."""

    TERMINATED = "terminated"  # its terminal event (or a later terminal write) committed
    EXPORTED = "exported"  # `journal export` sealed what it exported


class RunSealed(RunEvent, frozen=True, kw_only=True):
    """A checkpoint of one run's Merkle tree (tree size + root over its events), as a C2SP
    signed note when the writer had a key.

    Not a run's event: each run's seals are their own aggregate (`domain/seal.py`
    `seal_aggregate_id`), so a seal never changes the run it seals.
    """

    run_id: str
    size: int  # events covered
    root: str  # hex
    note: str  # the checkpoint text, then its signature lines when signed
    key: str | None = None  # the signer's verifier key, None when unsigned
    reason: SealReason = SealReason.TERMINATED


# Events recorded outside any run (registered with the journal's codec like EVENT_TYPES).
MAINTENANCE_EVENT_TYPES: tuple[type[RunEvent], ...] = (CacheCollected, RunSealed)


EVENT_TYPES: tuple[type[RunEvent], ...] = (
    RunAllocated,
    ConfigurationResolved,
    DebugBundleAllocated,
    InputsFingerprinted,
    ProfileObserved,
    ModuleObserved,
    ChunkPlanResolved,
    LaneResolved,
    StageLeaseWaited,
    StageDecided,
    StageExecuted,
    StageFailed,
    LLMCallAttempted,
    LLMUsageReused,
    CheckpointWritten,
    CheckpointWriteFailed,
    ArtifactGenerated,
    WarningRecorded,
    HintRecorded,
    OutputsValidated,
    OutputWritten,
    RunTerminated,
    TerminalPersistenceFailed,
)


# --- reuse summaries (docs/internals.md "Reuse summaries") ---------------------------


class LaneReused(RunEvent, frozen=True, kw_only=True):
    """Every stage decision of a lane in this run was a plain reuse: one event for them all.

    Stands for `count` events: `StageDecided` (code `reused`, checkpoint present, nothing
    differing), each followed by its checkpoint's `LLMUsageReused` when it cost LLM calls,
    whose stage, chunk, input, D and usage are those `source_run` journaled for the same
    step and lane, in its order; `digest` is `domain/lane_reuse.py` `reuse_digest` of them,
    so an expansion from other events is refused. Readers get it followed by those events
    (`JournalStore.projected_events`); the projections ignore it.
    """

    step: str
    lane: str
    count: int
    digest: str
    source_run: str


EVENT_TYPES = (*EVENT_TYPES, LaneReused)


# --- LLM batches (docs/operations.md "Batch runs") --------------------------------------
# Kept in their own block at the end of the file (appended to EVENT_TYPES below).


class BatchStage(msgspec.Struct, frozen=True, array_like=True):
    """A stage execution one of a batch's requests belongs to."""

    step: str
    lane: str
    stage: Stage
    chunk: str


class LLMBatchSubmitted(RunEvent, frozen=True, kw_only=True):
    """A provider batch holds some of this run's requests: created by this run, or
    (`resumed`) found in the cache's batch records and followed, not submitted again."""

    batch_id: str
    request_set: str  # the digest of the batch's request keys (its batch record)
    profile_id: str
    model: str
    round: int  # 1, or the follow-up round of errored and expired requests
    requests: int
    resumed: bool = False
    stages: list[BatchStage] = msgspec.field(default_factory=list)


class LLMBatchPolled(RunEvent, frozen=True, kw_only=True):
    """A batch's state as the provider reported it (journaled when it changed)."""

    batch_id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0


class LLMBatchCompleted(RunEvent, frozen=True, kw_only=True):
    """A batch ended and its results were collected into the reply store."""

    batch_id: str
    status: str
    completed: int = 0
    errored: int = 0
    expired: int = 0


BATCH_EVENT_TYPES: tuple[type[RunEvent], ...] = (
    LLMBatchSubmitted,
    LLMBatchPolled,
    LLMBatchCompleted,
)
# before the terminal events: a run records them while its stages run
_END = EVENT_TYPES.index(RunTerminated)
EVENT_TYPES = EVENT_TYPES[:_END] + BATCH_EVENT_TYPES + EVENT_TYPES[_END:]


# --- block reuse summaries (docs/internals.md "Reuse summaries", "Block summaries") ------
# Kept in their own block at the end of the file (appended to EVENT_TYPES below).


class BlockKind(enum.StrEnum):
    """Which of a run's repeated events a block summary stands for."""

    INPUTS = "inputs"  # the run's `InputsFingerprinted`
    PLANS = "plans"  # `ChunkPlanResolved`, one unit per source
    LANES = "lanes"  # one step's lanes: `LaneResolved`, its decisions, `ArtifactGenerated`
    OUTPUTS = "outputs"  # `OutputWritten`, one unit per file


class EventsReused(RunEvent, frozen=True, kw_only=True):
    """A run of consecutive units of this run equal to units `first` .. `first + units - 1`
    of `source_run`'s stream of the same kind (and step): one event for them all.

    A unit is one `InputsFingerprinted`, `ChunkPlanResolved` or `OutputWritten`, or one
    fully reused lane of `step` (its `LaneResolved`, its plain reuse decisions with their
    reused LLM usage, its `ArtifactGenerated`). Stands for `count` events; `digest` is
    `domain/block_reuse.py` `block_digest` of the units, so an expansion from other events
    is refused. Readers get it followed by those events (`JournalStore.projected_events`);
    the projections ignore it.
    """

    kind: BlockKind
    step: str
    first: int
    units: int
    count: int
    digest: str
    source_run: str


BLOCK_EVENT_TYPES: tuple[type[RunEvent], ...] = (EventsReused,)
_END = EVENT_TYPES.index(RunTerminated)
EVENT_TYPES = EVENT_TYPES[:_END] + BLOCK_EVENT_TYPES + EVENT_TYPES[_END:]
