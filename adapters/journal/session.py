"""`RunSession`: the runner's `RunRecorder`, one in-memory `Run` committed in batches.

Each recorder method goes through the `Run` aggregate's command for its event, so the
journal's invariants are checked as every event is recorded. Free-text fields are
redacted here, at the journal boundary, before any listener or the store sees them. See
docs/internals.md "Batching (`RunSession`)" and "Recording a run (`RunRecorder`)".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Protocol

import msgspec
from runjournal.adapters.journal.behind import CommitBehind
from runjournal.adapters.journal.journal_errors import JournalError
from runjournal.adapters.journal.reuse import short
from runjournal.domain.block_reuse import (
    MAX_UNITS,
    MIN_UNITS,
    BlockUnit,
    LaneUnit,
    SingleUnit,
    Stream,
)
from runjournal.domain.decisions import Stage, StageFacts
from runjournal.domain.events import (
    ArtifactGenerated,
    BatchStage,
    BlockKind,
    CheckpointWriteFailed,
    ChunkPlanResolved,
    ConfigurationResolved,
    DebugBundleAllocated,
    EventsReused,
    FileFingerprint,
    HintRecorded,
    InputsFingerprinted,
    LaneResolved,
    LaneReused,
    LeaseWaitOutcome,
    LLMCallAttempted,
    ModuleObserved,
    OutputsValidated,
    OutputWritten,
    PlanOutcome,
    ProfileObserved,
    RefusedName,
    RunAllocated,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    Setting,
    StageFailed,
    TerminalPersistenceFailed,
    WarningRecorded,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.lane_reuse import (
    Reused,
    SourceLane,
    reuse_digest,
)
from runjournal.domain.llm import FailureCause, LLMAttempt, LLMUsage
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.redaction import redact_obj, redact_text, valid_utf8
from runjournal.domain.redaction.known import known_secrets
from runjournal.domain.run import Run

__all__ = ["RunSession"]


class ReuseSources(Protocol):
    """Where an earlier run journaled a lane's decisions explicitly (the journal store's
    `reuse_sources`), for `RunSession.lane_reused`."""

    def find(self, step: str, lane: str) -> SourceLane | None: ...


class BlockSources(Protocol):
    """Where an earlier run journaled a unit (the journal store's `block_sources`), for
    block summaries: (run, position in its stream, first 16 bytes of its digest)."""

    def find(self, stream: Stream, key: str) -> tuple[str, int, bytes] | None: ...


class _HeldUnit:
    """A unit held for a block summary: its stream and key, the unit itself (its digest
    and what its events are built from, `BlockUnit`) and how it is recorded when no block
    stands for it."""

    __slots__ = ("key", "replay", "stream", "unit")

    def __init__(
        self, stream: Stream, key: str, unit: BlockUnit, replay: Callable[[], None]
    ) -> None:
        self.stream, self.key, self.unit, self.replay = stream, key, unit, replay

    @property
    def digest(self) -> str:
        return self.unit.digest


class _HeldLane:
    """A lane being held: its `LaneResolved` (draft, and how it is recorded), then its
    plain reuse decisions (`lane_reused`), until its artifact makes it a unit."""

    __slots__ = ("lane", "record", "resolved", "stages", "step")

    def __init__(
        self, step: str, lane: str, resolved: RunEvent, record: Callable[[], None]
    ) -> None:
        self.step, self.lane, self.resolved, self.record = step, lane, resolved, record
        self.stages: list[Reused] | None = None


Commit = Callable[[Sequence[RunEvent]], None]
"""Stores events in one transaction, or raises `JournalError` (the store's writer)."""


def _redact_str(value: Any) -> Any:
    """Redacted, and valid UTF-8: a module's lone surrogate must not stop the journal."""
    return valid_utf8(redact_text(value)) if isinstance(value, str) else value


def _redact_strs(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_redact_str(v) for v in value]
    return _redact_str(value)


def _redact_settings(value: Any) -> Any:
    """Settings stay `Setting` Structs (a plain dict would not be what the event says)."""
    if not isinstance(value, list | tuple):
        return redact_obj(value)
    return [
        msgspec.structs.replace(s, value=redact_obj(s.value), origin=_redact_str(s.origin))
        if isinstance(s, Setting)
        else redact_obj(s)
        for s in value
    ]


def _redact_refused(value: Any) -> Any:
    """Refused output names are the module's strings and may be invalid text: escaped only."""
    if not isinstance(value, list | tuple):
        return value
    return [
        msgspec.structs.replace(r, name=valid_utf8(r.name)) if isinstance(r, RefusedName) else r
        for r in value
    ]


def _redact_run_error(value: Any) -> Any:
    if isinstance(value, RunError):
        return msgspec.structs.replace(value, message=_redact_str(value.message))
    return value


_Redactor = Callable[[Any], Any]

_FREE_TEXT: Final[Mapping[type[RunEvent], tuple[tuple[str, _Redactor], ...]]] = {
    RunAllocated: (
        ("argv", _redact_strs),
        ("pipeline_file", _redact_str),
        ("journal", _redact_str),
    ),
    ConfigurationResolved: (("settings", _redact_settings),),
    DebugBundleAllocated: (("path", _redact_str),),
    ModuleObserved: (  # the user's module spec, its declared fingerprint, its source path
        ("module", _redact_str),
        ("fingerprint", _redact_str),
        ("source", _redact_str),
    ),
    ProfileObserved: (
        ("profile_id", _redact_str),
        ("provider", _redact_str),
        ("model", _redact_str),
    ),
    StageFailed: (("message", _redact_str),),
    LLMCallAttempted: (  # LLM runtime (docs/internals.md): user-named profile and model
        ("profile_id", _redact_str),
        ("provider", _redact_str),
        ("model", _redact_str),
    ),
    CheckpointWriteFailed: (("message", _redact_str),),
    ArtifactGenerated: (("warnings", _redact_strs),),
    WarningRecorded: (("message", _redact_str),),
    HintRecorded: (("message", _redact_str),),
    OutputsValidated: (("refused", _redact_refused),),
    RunTerminated: (("error", _redact_run_error),),
    TerminalPersistenceFailed: (("message", _redact_str),),
}
"""The event fields that carry free text (errors, paths, plugin or user strings).

`emit` redacts by this table; the `RunRecorder` methods redact the same fields of their
own events by name (`stage_failed`, `llm_attempt`, `checkpoint_write_failed`,
`artifact`). Every other field holds ids, digests, enums, numbers or code-owned text, and the hot
path (StageDecided, StageExecuted, CheckpointWritten) pays one dict lookup. Redaction is
idempotent, so fields already redacted upstream come through unchanged. Document names
(InputsFingerprinted, OutputWritten) are the user's data and are never redacted; refused
output names (OutputsValidated) only get their lone surrogates escaped.
"""


# --- session ---------------------------------------------------------------------


Applied = Sequence[RunEvent] | Sequence[BlockUnit]
"""What the session applied for a summary: a `LaneReused`'s events, an `EventsReused`'s
units (docs/internals.md "A summary applied as a count")."""

Committed = Callable[[Sequence[RunEvent], Mapping[int, Applied]], None]
"""Gets a batch the journal committed and, by version, what the batch's reuse summaries
stand for as the session applied them (app/manifest_check.py `CommittedFold`)."""

_SUMMARIES: Final = (LaneReused, EventsReused)
EXPANSIONS_HELD: Final = 8_192
"""A batch commits once the reuse summaries recorded since the last one stand for this many
events: the session holds their events until the batch commits (for `committed`), so a
no-op resume whose stored events fit one batch does not hold every decision of the run
(8,192 of them, about 2.5 MB; 32,768 held about 10 MB, which a run of a few thousand
documents reached: issue 29, peak RSS)."""


def _then(commit: Commit, committed: Committed, expansions: dict[int, Applied]) -> Commit:
    """`commit`, then `committed` with the same batch and its summaries' expansions (only
    when the commit succeeded); the expansions leave `expansions` then."""

    def both(events: Sequence[RunEvent]) -> None:
        commit(events)
        expanded: dict[int, Applied] = {}
        for event in events:
            if type(event) in _SUMMARIES:
                held = expansions.pop(event.originator_version, None)
                if held is not None:
                    expanded[event.originator_version] = held
        committed(events, expanded)

    return both


class RunSession:
    """The runner's `RunRecorder`: one in-memory `Run`, events committed in batches.

    Recording does no I/O until `batch_size` events are pending; a failed commit keeps
    its events for the next `flush`, so the journal never gets a gap. `before_commit`
    runs before every commit: the checkpoint recorder's group sync, so a batch that
    records checkpoints commits only after they are durable (docs/internals.md
    "Group durability"). With `behind`, a full batch is committed on a thread of its own
    while the run goes on (`CommitBehind`); `flush` is always synchronous. `committed`
    gets each batch once the journal holds it, in the journal's order (on the committer's
    thread with `behind`), with the events each reuse summary in it stands for as recorded
    here: `run`'s manifest self-check folds them (app/manifest_check.py).
    """

    def __init__(
        self,
        commit: Commit,
        run: Run,
        *,
        batch_size: int = 256,
        listeners: Sequence[Callable[[RunEvent], None]] = (),
        before_commit: Callable[[], None] | None = None,
        behind: bool = False,
        reuse_sources: ReuseSources | None = None,
        committed: Committed | None = None,
        block_sources: BlockSources | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # the events of each reuse summary not yet committed, by its version (`committed`)
        self._expansions: dict[int, Applied] | None = None
        self._expanded = 0  # events they stand for, since the last batch was collected
        if committed is None:
            self._commit = commit
        else:
            self._expansions = {}
            self._commit = _then(commit, committed, self._expansions)
        self._before_commit = before_commit
        self._behind = behind
        self._inflight: CommitBehind | None = None
        self._run = run
        self._batch_size = batch_size
        self._listeners = tuple(listeners)
        self._unsaved: list[RunEvent] = []
        self._reuse_sources = reuse_sources
        self._blocks = block_sources
        self._held: list[_HeldUnit] = []  # units held for a block summary, in order
        self._lane: _HeldLane | None = None  # a lane whose units are being held
        # (profile, provider, model) -> (the known secrets then, their redacted forms)
        self._names: dict[tuple[str, str, str], tuple[object, tuple[str, ...]]] = {}
        if block_sources is not None:
            run.before_record = self._settle
        self.flush()  # the run is visible to `runs list` and `recover` from its start

    @property
    def run(self) -> Run:
        return self._run

    @property
    def pending(self) -> int:
        inflight = len(self._inflight.events) if self._inflight is not None else 0
        return self._run.pending_count + len(self._unsaved) + inflight

    # --- the RunRecorder port (domain/ports.py): each through a `Run` command ---------

    def inputs_fingerprinted(
        self, *, sources: list[FileFingerprint], references: list[FileFingerprint]
    ) -> None:
        def record() -> None:
            self._recorded(self._run.record_inputs(sources=sources, references=references))

        if self._blocks is None:
            return record()
        draft = self._run.draft(InputsFingerprinted, sources=sources, references=references)
        self._hold_single(BlockKind.INPUTS, "", draft, record)

    def plan_resolved(
        self, *, source: str, plan_key: str, outcomes: list[PlanOutcome], chunks: int
    ) -> None:
        def record() -> None:
            self._recorded(
                self._run.record_plan(
                    source=source, plan_key=plan_key, outcomes=outcomes, chunks=chunks
                )
            )

        if self._blocks is None:
            return record()
        draft = self._run.draft(
            ChunkPlanResolved, source=source, plan_key=plan_key, outcomes=outcomes, chunks=chunks
        )
        self._hold_single(BlockKind.PLANS, source, draft, record)

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
        fields = {
            "step": step,
            "lane": lane,
            "components": components,
            "lane_identity": lane_identity,
            "dependencies": dependencies,
            "chunks": chunks,
            "forced": forced,
            "reads": reads,
        }

        def record() -> None:
            self._recorded(self._run.resolve_lane(**fields))

        if self._blocks is None or forced:
            return record()
        if self._lane is not None:
            self._settle()
        self._lane = _HeldLane(step, lane, self._run.draft(LaneResolved, **fields), record)

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
        self._recorded(
            self._run.record_lease_wait(
                step=step, lane=lane, stage=stage, chunk=chunk, holder=holder, outcome=outcome
            )
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
        self._recorded(
            self._run.decide(step=step, lane=lane, chunk=chunk, facts=facts, code=code, cause=cause)
        )

    def lane_reused(self, *, step: str, lane: str, stages: list[Reused]) -> None:
        """A fully reused lane: one `LaneReused` naming the earlier run that journaled
        the same decisions (`reuse_sources`), or, with none to name, each decision as its
        own `StageDecided` (docs/internals.md "Reuse summaries"). The listeners get the
        summary and then the decisions it stands for, as the projections read them back.
        A lane whose units are held (`lane_resolved`) holds its decisions too."""
        held = self._lane
        if held is not None and held.stages is None and (held.step, held.lane) == (step, lane):
            held.stages = stages
            return
        self._lane_reused(step, lane, stages)

    def _lane_reused(self, step: str, lane: str, stages: list[Reused]) -> None:
        source = self._reuse_sources.find(step, lane) if self._reuse_sources else None
        if source is not None and source.count == len(stages):
            digest = reuse_digest(stages)
            if digest == source.digest:
                summary, decisions = self._run.record_lane_reuse(
                    step=step, lane=lane, stages=stages, digest=digest, source_run=source.run_id
                )
                for listener in self._listeners:
                    listener(summary)
                    for decision in decisions:
                        listener(decision)
                self._hand_over(summary, decisions, len(decisions))
                self._recorded_quietly()
                return
        for item in stages:
            self._recorded(self._run.record_reused(step=step, lane=lane, item=item))

    def executed(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> None:
        self._recorded(
            self._run.record_execution(
                step=step, lane=lane, stage=stage, chunk=chunk, sha256=sha256, size=size
            )
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
        self._recorded(
            self._run.record_stage_failure(
                step=step,
                lane=lane,
                stage=stage,
                chunk=chunk,
                code=code,
                message=_redact_str(message),
                cause=cause,
            )
        )

    def llm_attempt(
        self, *, step: str, lane: str, stage: Stage, chunk: str, attempt: LLMAttempt
    ) -> None:
        names = (attempt.profile_id, attempt.provider, attempt.model)
        redacted = self._names.get(names)
        if redacted is None or redacted[0] is not known_secrets():
            # user-named profile and model (docs/internals.md), the same for a profile's
            # every attempt: redacted once while the registered secrets stay the same
            redacted = (known_secrets(), tuple(_redact_str(n) for n in names))
            if len(self._names) < 64:
                self._names[names] = redacted
        profile_id, provider, model = redacted[1]
        named = msgspec.structs.replace(
            attempt, profile_id=profile_id, provider=provider, model=model
        )
        self._recorded(
            self._run.record_llm_attempt(
                step=step, lane=lane, stage=stage, chunk=chunk, attempt=named
            )
        )

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
        self._recorded(
            self._run.record_llm_reuse(
                step=step,
                lane=lane,
                stage=stage,
                chunk=chunk,
                usage=usage,
                request_sha256=request_sha256,
            )
        )

    # --- LLM batches (docs/operations.md "Batch runs"; `LLMBatchRecorder`) --------------

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
    ) -> None:
        self._recorded(
            self._run.record_llm_batch_submitted(
                batch_id=_redact_str(batch_id),
                request_set=request_set,
                profile_id=_redact_str(profile_id),
                model=_redact_str(model),
                round=round,
                requests=requests,
                resumed=resumed,
                stages=[BatchStage(*stage) for stage in stages],
            )
        )

    def llm_batch_polled(
        self, *, batch_id: str, status: str, total: int, completed: int, failed: int
    ) -> None:
        self._recorded(
            self._run.record_llm_batch_polled(
                batch_id=_redact_str(batch_id),
                status=_redact_str(status),
                total=total,
                completed=completed,
                failed=failed,
            )
        )

    def llm_batch_completed(
        self, *, batch_id: str, status: str, completed: int, errored: int, expired: int
    ) -> None:
        self._recorded(
            self._run.record_llm_batch_completed(
                batch_id=_redact_str(batch_id),
                status=_redact_str(status),
                completed=completed,
                errored=errored,
                expired=expired,
            )
        )

    def checkpoint_written(
        self, *, step: str, lane: str, stage: Stage, chunk: str, sha256: str, size: int
    ) -> None:
        self._recorded(
            self._run.record_checkpoint(
                step=step, lane=lane, stage=stage, chunk=chunk, sha256=sha256, size=size
            )
        )

    def checkpoint_write_failed(
        self, *, step: str, lane: str, stage: Stage, chunk: str, message: str
    ) -> None:
        self._recorded(
            self._run.record_checkpoint_failure(
                step=step, lane=lane, stage=stage, chunk=chunk, message=_redact_str(message)
            )
        )

    def artifact(
        self, *, artifact: ArtifactRef, warnings: list[str], restored: bool = False
    ) -> None:
        warnings = _redact_strs(warnings)

        def record() -> None:
            self._recorded(
                self._run.record_artifact(artifact=artifact, warnings=warnings, restored=restored)
            )

        held = self._lane
        if (
            held is None
            or held.stages is None
            or (held.step, held.lane) != (artifact.step, artifact.lane)
        ):
            return record()
        self._lane = None
        draft = self._run.draft(
            ArtifactGenerated,
            **ArtifactGenerated.fields_of(artifact),
            warnings=warnings,
            restored=restored,
        )
        stages = held.stages
        unit = LaneUnit(held.resolved, stages, draft)  # type: ignore[arg-type]
        step, lane = held.step, held.lane

        def replay() -> None:
            held.record()
            self._lane_reused(step, lane, stages)
            record()

        self._hold(_HeldUnit((BlockKind.LANES, step), lane, unit, replay))

    # --- the run's own events --------------------------------------------------------

    # --- what the run's application layer records around the runner (app/run_pipeline.py,
    # app/terminal.py): typed, through the same redaction and `Run.trigger` rules

    def allocated(
        self,
        *,
        run_id: str,
        pipeline: str,
        pipeline_file: str,
        argv: list[str],
        tool_version: str,
        run_dir: str,
        output_root: str,
        cache_root: str,
        workspace: str | None,
        debug_bundle: str | None,
        host: str,
        pid: int,
        process_start: float,
        debug_root: str | None = None,
        journal: str | None = None,
        recompute: list[str] | None = None,
        forced: list[str] | None = None,
    ) -> None:
        """The run's first event (`RunAllocated`): what `recover` and the report need."""
        self._trigger(
            RunAllocated,
            run_id=run_id,
            pipeline=pipeline,
            pipeline_file=pipeline_file,
            argv=argv,
            tool_version=tool_version,
            run_dir=run_dir,
            output_root=output_root,
            cache_root=cache_root,
            workspace=workspace,
            debug_bundle=debug_bundle,
            host=host,
            pid=pid,
            process_start=process_start,
            debug_root=debug_root,
            journal=journal,
            recompute=list(recompute or []),
            forced=list(forced or []),
        )

    def configuration_resolved(self, settings: list[Setting]) -> None:
        self._trigger(ConfigurationResolved, settings=settings)

    def debug_bundle_allocated(self, path: str, *, trace: bool) -> None:
        self._trigger(DebugBundleAllocated, path=path, trace=trace)

    def module_observed(
        self,
        *,
        step: str,
        module: str,
        fingerprint: str,
        source: str | None,
        source_sha256: str | None,
    ) -> None:
        self._trigger(
            ModuleObserved,
            step=step,
            module=module,
            fingerprint=fingerprint,
            source=source,
            source_sha256=source_sha256,
        )

    def profile_observed(
        self,
        *,
        step: str,
        profile_id: str,
        provider: str,
        model: str,
        profile: str,
        profile_source: str,
        source_kind: str,
    ) -> None:
        self._trigger(
            ProfileObserved,
            step=step,
            profile_id=profile_id,
            provider=provider,
            model=model,
            profile=profile,
            profile_source=profile_source,
            source_kind=source_kind,
        )

    def warning(self, *, step: str, lane: str, message: str) -> None:
        self._trigger(WarningRecorded, step=step, lane=lane, message=message)

    def hint(self, message: str) -> None:
        self._trigger(HintRecorded, message=message)

    def outputs_validated(self, *, checked: int, refused: list[RefusedName]) -> None:
        self._trigger(OutputsValidated, checked=checked, refused=refused)

    def output_written(
        self, *, name: str, sha256: str, size: int, step: str | None, lane: str | None
    ) -> None:
        fields = {"name": name, "sha256": sha256, "size": size, "step": step, "lane": lane}

        def record() -> None:
            self._trigger(OutputWritten, **fields)

        if self._blocks is None:
            return record()
        self._hold_single(BlockKind.OUTPUTS, name, self._run.draft(OutputWritten, **fields), record)

    # --- block summaries (docs/internals.md "Block summaries") -----------------------

    def _hold_single(
        self, kind: BlockKind, key: str, draft: RunEvent, record: Callable[[], None]
    ) -> None:
        self._hold(_HeldUnit((kind, ""), key, SingleUnit(draft), record))

    def _hold(self, unit: _HeldUnit) -> None:
        held = self._held
        if held and (held[-1].stream != unit.stream or len(held) >= MAX_UNITS):
            self._settle()
        self._held.append(unit)

    def settle(self) -> None:
        """Record what is held back for block summaries now (the stages are done)."""
        self._settle()

    def _settle(self) -> None:
        """Record the held units: each run of units that are consecutive units of one
        earlier run (`block_sources`) as one `EventsReused`, the others as they are; then
        what a held lane has so far. Called before any other event is built
        (`Run.before_record`), so the journal keeps their order."""
        held, lane = self._held, self._lane
        if not held and lane is None:
            return
        self._held, self._lane = [], None
        run = self._run
        hook, run.before_record = run.before_record, None
        try:
            blocks = self._blocks
            assert blocks is not None
            i = 0
            # `held` is of one stream: repeated as the earlier run's next block of it when
            # their digests are that block's (no source run read; "Block summaries")
            if held and len(held) >= MIN_UNITS[held[0].stream[0]]:
                same = blocks.same_block(held[0].stream, [u.digest for u in held])
                if same is not None:
                    self._record_block(held, *same)
                    i = len(held)
            while i < len(held):
                unit = held[i]
                found = blocks.find(unit.stream, unit.key)
                if found is None or found[2] != short(unit.digest):
                    unit.replay()
                    i += 1
                    continue
                source, first, _ = found
                j = i + 1
                while j < len(held) and held[j].stream == unit.stream:
                    nxt = blocks.find(held[j].stream, held[j].key)
                    if nxt != (source, first + j - i, short(held[j].digest)):
                        break
                    j += 1
                if j - i < MIN_UNITS[unit.stream[0]]:
                    for each in held[i:j]:
                        each.replay()
                else:
                    self._record_block(held[i:j], source, first)
                i = j
            if lane is not None:
                lane.record()
                if lane.stages is not None:
                    self._lane_reused(lane.step, lane.lane, lane.stages)
        finally:
            run.before_record = hook

    def _record_block(self, held: list[_HeldUnit], source: str, first: int) -> None:
        kind, step = held[0].stream
        units = [each.unit for each in held]
        summary, expanded = self._run.record_block_reuse(
            kind=kind, step=step, first=first, source_run=source, units=units
        )
        for listener in self._listeners:
            listener(summary)
            for event in expanded:
                listener(event)
        # the committed fold gets the units, not the list handed to the listeners: it
        # checks their digests against the summary's and folds the events they built
        # (docs/internals.md "A summary applied as a count")
        self._hand_over(summary, units, len(expanded))
        self._recorded_quietly()

    def _hand_over(self, summary: RunEvent, applied: Applied, count: int) -> None:
        """Hold what a summary stands for (a `LaneReused`'s events, an `EventsReused`'s
        units) for `committed`, until its batch commits."""
        if self._expansions is not None:
            self._expansions[summary.originator_version] = applied
            self._expanded += count

    def _trigger(self, event_type: type[RunEvent], **fields: Any) -> None:
        """One event through `Run.trigger` under the same rules as the commands; its
        free-text fields are redacted first (`_FREE_TEXT`)."""
        redactors = _FREE_TEXT.get(event_type)
        if redactors is not None:
            for name, redact in redactors:
                if name in fields:
                    fields[name] = redact(fields[name])
        self._recorded(self._run.trigger(event_type, **fields))

    def terminate(self, status: RunStatus, phase: RunPhase, error: RunError | None = None) -> None:
        """The run's terminal event, through `Run.terminate` (only app/terminal.py calls it)."""
        self._recorded(self._run.terminate(status, phase, _redact_run_error(error)))

    def persistence_failed(self, target: str, message: str) -> None:
        """A terminal write that failed, through `Run.record_persistence_failure`."""
        self._recorded(self._run.record_persistence_failure(target, _redact_str(message)))

    def _recorded(self, event: RunEvent) -> None:
        for listener in self._listeners:
            listener(event)
        self._recorded_quietly()

    def _recorded_quietly(self) -> None:
        """Commit when a batch is full (the listeners already have the event), or when
        the summaries in it stand for `EXPANSIONS_HELD` events."""
        if (
            self._run.pending_count + len(self._unsaved) >= self._batch_size
            or self._expanded >= EXPANSIONS_HELD
        ):
            if self._behind:
                self._commit_behind()
            else:
                self.flush()

    def _commit_behind(self) -> None:
        """Hand the batch to a committer thread, once the one before it is in."""
        self._wait_behind()
        events = self._unsaved + self._run.collect_events()
        self._unsaved, self._expanded = [], 0
        self._inflight = CommitBehind(events, self._commit, self._before_commit)

    def _wait_behind(self) -> None:
        """Wait for the batch in flight; a failed one's events go back first, no gap."""
        inflight = self._inflight
        if inflight is None:
            return
        try:
            inflight.wait()
        except BaseException:
            if inflight.done:  # the commit failed (not our wait interrupted): retry later
                self._inflight = None
                self._unsaved = inflight.events + self._unsaved
            raise
        self._inflight = None

    def flush(self) -> None:
        """Commit pending events in one transaction; a no-op when nothing is pending."""
        self._wait_behind()
        if not self._run.pending_count and not self._unsaved:
            return
        events = self._unsaved + self._run.collect_events()
        self._expanded = 0
        if self._before_commit is not None:
            self._before_commit()
        try:
            self._commit(events)
        except JournalError:
            self._unsaved = events
            raise
        self._unsaved = []

    def close(self) -> None:
        self._settle()
        self.flush()

    def __enter__(self) -> RunSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self._settle()
            self.flush()
            return
        try:
            self._settle()
            self.flush()
        except JournalError as flush_error:
            exc.add_note(f"also: {flush_error}")
