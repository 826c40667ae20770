"""The pipeline runner: chunk plans, lanes, stage decisions, executions, artifacts.

It works only through ports (event sink, checkpoint loader and recorder, plan store,
trace) and returns logical output files; it never sees a root or a path. Every stage
is decided by `decide_stage` from facts that go into the `StageDecided` event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from runjournal.domain.chunking import PlanInvalid, Span, plan_chunks, validate_plan
from runjournal.domain.decisions import (
    CheckpointState,
    PredecessorState,
    Stage,
    StageDigests,
    StageFacts,
    decide_stage,
)
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    CheckpointWritten,
    ChunkPlanResolved,
    FileFingerprint,
    InputsFingerprinted,
    LaneResolved,
    LLMCallAttempted,
    LLMUsageReused,
    PlanOutcome,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.identity import (
    DependencyFingerprint,
    canonical_bytes,
    chunk_id,
    dependencies_digest,
    lane_identity,
    sequence_digest,
    sha256_hex,
)
from runjournal.domain.llm import (
    CallScope,
    FailureCause,
    LLMAttempt,
    LLMUsage,
    bind_call,
    failure_cause,
)
from runjournal.domain.modules import Chunk, Module, Normalized, OutputFile, StageContext
from runjournal.domain.names import CORPUS_LANE, safe_lane_id
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.plan_keys import ChunkMapEntry, PlanFacts
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointLoader,
    CheckpointRecord,
    CheckpointRecorder,
    CheckpointWriteError,
    ChunkPlanStore,
    EventSink,
    PlanPublishError,
    Provenance,
    TraceRecorder,
)
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.recompute import RecomputePolicy
from runjournal.domain.redaction import redact_text, safe_error_text

ERROR_MESSAGE_LIMIT = 500


class StageFailure(Exception):
    """The run failed at a stage: names only the step, the lane and the reason code."""

    def __init__(
        self,
        step: str,
        lane: str,
        code: ReasonCode,
        message: str,
        cause: FailureCause | None = None,
        *,
        exception: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.lane = lane
        self.code = code
        self.message = message
        self.cause = cause
        self.exception = exception  # the module's own exception, for `-v` and `--debug trace`


@dataclass
class Artifact:
    """A lane's generated artifact: identity, canonical bytes and decoded value."""

    step: str
    lane: str
    kind: str
    schema: str
    media_type: str
    data: bytes
    sha256: str
    value: Any
    warnings: list[str]

    @property
    def size(self) -> int:
        return len(self.data)

    @classmethod
    def of(
        cls, module: Module, step: str, lane: str, data: bytes, value: Any, warnings: list[str]
    ) -> Artifact:
        return cls(
            step=step,
            lane=lane,
            kind=module.artifact_kind,
            schema=module.schema,
            media_type=module.media_type,
            data=data,
            sha256=sha256_hex(data),
            value=value,
            warnings=warnings,
        )

    def provenance(self, module_fingerprint: str) -> Provenance:
        """What a normalize checkpoint records of its producer, checked on restore."""
        return Provenance(
            step=self.step,
            lane=self.lane,
            module_fingerprint=module_fingerprint,
            kind=self.kind,
            schema=self.schema,
            media_type=self.media_type,
            sha256=self.sha256,
            size=self.size,
        )

    def fingerprint(self) -> DependencyFingerprint:
        return DependencyFingerprint(
            step=self.step,
            lane=self.lane,
            kind=self.kind,
            schema=self.schema,
            media_type=self.media_type,
            sha256=self.sha256,
            size=self.size,
        )


@dataclass
class RunOutcome:
    outputs: list[OutputFile]
    decisions: dict[str, int]
    plans: dict[str, int]
    lane_identities: list[str]
    chunk_map: list[ChunkMapEntry]
    persistence_errors: list[str] = field(default_factory=list)
    warnings: list[tuple[str, str, str]] = field(default_factory=list)
    module_calls: int = 0
    # output name -> (step, lane) of the artifact it holds or renders (`runs show`)
    attribution: dict[str, tuple[str, str]] = field(default_factory=dict)


Progress = Callable[[str, str, int, int], None]
# Yields results lazily in input order, so each is stored as soon as it is ready.
ParallelMap = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]


def _serial_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    return (fn(item) for item in items)


_CODEC_IDS: dict[tuple[type, Stage], str] = {}


def codec_id(module: Module, stage: Stage) -> str:
    """Identity of the codec type a stage's payload is encoded with."""
    key = (type(module), stage)
    cached = _CODEC_IDS.get(key)
    if cached is None:
        tp = {
            Stage.EXTRACT: module.chunk_type,
            Stage.MERGE: module.merged_type,
            Stage.NORMALIZE: module.artifact_type,
        }[stage]
        try:
            schema: Any = msgspec.json.schema(tp)
        except Exception:  # a type msgspec cannot describe: fall back to its name
            schema = repr(tp)
        cached = sha256_hex(canonical_bytes({"stage": stage.value, "type": schema}))[:32]
        _CODEC_IDS[key] = cached
    return cached


class _StageError(Exception):
    def __init__(
        self, stage: Stage, chunk: str, exc: BaseException, attempts: list[LLMAttempt] | None = None
    ) -> None:
        super().__init__(str(exc))
        self.stage = stage
        self.chunk = chunk
        self.exc = exc
        self.attempts = attempts or []  # LLM attempts not yet journaled


@dataclass
class _PlannedSource:
    """One source's chunk plan, resolved but not yet published or recorded."""

    source: Source
    key: str
    facts: PlanFacts
    spans: list[Span]
    outcomes: list[PlanOutcome]
    chunks: list[Chunk]
    publish: bool


@dataclass
class _Result:
    """One stage result: digest always; bytes and/or decoded value as far as needed."""

    digest: str
    data: bytes
    value: Any = None
    decoded: bool = False
    attempts: list[LLMAttempt] = field(default_factory=list)  # LLM attempts that produced it


class PipelineRunner:
    def __init__(
        self,
        *,
        sink: EventSink,
        loader: CheckpointLoader | None = None,
        recorder: CheckpointRecorder | None = None,
        plan_store: ChunkPlanStore | None = None,
        trace: TraceRecorder | None = None,
        recompute: RecomputePolicy | None = None,
        progress: Progress | None = None,
        parallel_map: ParallelMap | None = None,
    ) -> None:
        self._sink = sink
        self._loader = loader
        self._recorder = recorder
        self._plan_store = plan_store
        self._trace = trace
        self._policy = recompute or RecomputePolicy(selected=(), forced=(), required=())
        self._progress = progress
        self._map = parallel_map or _serial_map
        self._decisions: dict[str, int] = {}
        self._plans: dict[str, int] = {}
        self._persistence_errors: list[str] = []
        self._warnings: list[tuple[str, str, str]] = []
        self._module_calls = 0
        self._attribution: dict[str, tuple[str, str]] = {}

    # --- public ------------------------------------------------------------------

    def run(self, pipeline: ResolvedPipeline) -> RunOutcome:
        self._emit_inputs(pipeline)
        planned = self._resolve_plans(pipeline)
        chunks_by_source = {p.source.name: p.chunks for p in planned}
        artifacts: dict[str, dict[str, Artifact]] = {}
        lane_ids: list[str] = []
        # Selective recomputation restores every required step before anything executes
        # or is written (plans included): a required step never consumes a forced one,
        # and a failed predecessor must leave the cache root untouched (docs/internals.md
        # "Checkpoint store").
        required = [s for s in pipeline.steps if s.id in self._policy.required]
        for step in required:
            self._run_step(step, pipeline, chunks_by_source, artifacts, lane_ids)
        self._settle_plans(planned)
        for step in pipeline.steps:
            if step.id not in self._policy.required:
                self._run_step(step, pipeline, chunks_by_source, artifacts, lane_ids)
        outputs = self._outputs(pipeline, artifacts)
        chunk_map = [
            ChunkMapEntry(chunk_id=c.id, source=c.source, start=c.start, end=c.end, sha256=c.sha256)
            for chunks in chunks_by_source.values()
            for c in chunks
        ]
        return RunOutcome(
            outputs=outputs,
            decisions=dict(self._decisions),
            plans=dict(self._plans),
            lane_identities=lane_ids,
            chunk_map=chunk_map,
            persistence_errors=list(self._persistence_errors),
            warnings=list(self._warnings),
            module_calls=self._module_calls,
            attribution=dict(self._attribution),
        )

    def _run_step(
        self,
        step: ResolvedStep,
        pipeline: ResolvedPipeline,
        chunks_by_source: dict[str, list[Chunk]],
        artifacts: dict[str, dict[str, Artifact]],
        lane_ids: list[str],
    ) -> None:
        artifacts[step.id] = {}
        for lane, chunks, source_digests in self._lanes(step, pipeline, chunks_by_source):
            artifact, lid = self._run_lane(step, lane, chunks, source_digests, pipeline, artifacts)
            artifacts[step.id][lane] = artifact
            lane_ids.append(lid)

    # --- inputs and plans -------------------------------------------------------

    def _emit_inputs(self, pipeline: ResolvedPipeline) -> None:
        self._sink.emit(
            InputsFingerprinted,
            sources=[FileFingerprint(s.name, s.sha256, len(s.data)) for s in pipeline.sources],
            references=[
                FileFingerprint(name, digest, len(pipeline.references[name].encode("utf-8")))
                for name, digest in sorted(pipeline.reference_digests.items())
            ],
        )

    def _resolve_plans(self, pipeline: ResolvedPipeline) -> list[_PlannedSource]:
        """Look up or compute every source's plan; publishing waits for `_settle_plans`."""
        out: list[_PlannedSource] = []
        settings = pipeline.chunking
        for source in pipeline.sources:
            facts = PlanFacts(
                source_sha256=source.sha256, source_size=len(source.data), settings=settings
            )
            key = facts.key()
            outcomes: list[PlanOutcome] = []
            spans: list[Span] | None = None
            if self._plan_store is None:
                outcomes.append(PlanOutcome.BYPASSED)
            else:
                lookup = self._plan_store.get(key)
                if lookup.outcome is PlanOutcome.REUSED and lookup.spans is not None:
                    try:
                        validate_plan(source.data, lookup.spans, settings.max_chars)
                        spans = list(lookup.spans)
                        outcomes.append(PlanOutcome.REUSED)
                    except PlanInvalid:  # a stored plan that does not fit this source
                        outcomes.append(PlanOutcome.CORRUPT)
                elif lookup.outcome is PlanOutcome.CORRUPT:
                    outcomes.append(PlanOutcome.CORRUPT)
            publish = spans is None and self._plan_store is not None
            if spans is None:
                spans = plan_chunks(source.data, settings)
                validate_plan(source.data, spans, settings.max_chars)
                outcomes.append(PlanOutcome.COMPUTED)
            chunks = [_make_chunk(source, span) for span in spans]
            out.append(_PlannedSource(source, key, facts, spans, outcomes, chunks, publish))
        return out

    def _settle_plans(self, planned: list[_PlannedSource]) -> None:
        """Publish the computed plans, then record each source's plan outcomes."""
        for p in planned:
            if p.publish and self._plan_store is not None:
                try:
                    if self._plan_store.publish(p.key, p.spans, p.facts):
                        p.outcomes.append(PlanOutcome.PUBLISHED)
                except PlanPublishError as exc:
                    self._persistence_errors.append(safe_error_text(str(exc)))
            for outcome in p.outcomes:
                self._plans[outcome.value] = self._plans.get(outcome.value, 0) + 1
            self._sink.emit(
                ChunkPlanResolved,
                source=p.source.name,
                plan_key=p.key,
                outcomes=p.outcomes,
                chunks=len(p.spans),
            )

    def _lanes(
        self,
        step: ResolvedStep,
        pipeline: ResolvedPipeline,
        chunks_by_source: dict[str, list[Chunk]],
    ) -> list[tuple[str, list[Chunk], list[str]]]:
        if step.scope is Scope.CORPUS:
            chunks = [c for s in pipeline.sources for c in chunks_by_source[s.name]]
            return [(CORPUS_LANE, chunks, [s.sha256 for s in pipeline.sources])]
        return [(s.name, chunks_by_source[s.name], [s.sha256]) for s in pipeline.sources]

    # --- lanes ------------------------------------------------------------------

    def _consumed(
        self, step: ResolvedStep, lane: str, artifacts: dict[str, dict[str, Artifact]]
    ) -> dict[str, dict[str, Artifact]]:
        out: dict[str, dict[str, Artifact]] = {}
        for producer in step.consumes:
            lanes = artifacts[producer]
            if step.scope is Scope.CORPUS:
                out[producer] = dict(lanes)
            elif CORPUS_LANE in lanes and len(lanes) == 1 and lane not in lanes:
                out[producer] = {CORPUS_LANE: lanes[CORPUS_LANE]}
            else:
                out[producer] = {lane: lanes[lane]} if lane in lanes else {}
        return out

    def _run_lane(
        self,
        step: ResolvedStep,
        lane: str,
        chunks: list[Chunk],
        source_digests: list[str],
        pipeline: ResolvedPipeline,
        artifacts: dict[str, dict[str, Artifact]],
    ) -> tuple[Artifact, str]:
        consumed = self._consumed(step, lane, artifacts)
        deps = [a.fingerprint() for lanes in consumed.values() for a in lanes.values()]
        lid = lane_identity(step.components, source_digests)
        forced = step.id in self._policy.forced
        self._sink.emit(
            LaneResolved,
            step=step.id,
            lane=lane,
            components=step.components,
            lane_identity=lid,
            dependencies=sorted(deps, key=lambda d: (d.step, d.lane)),
            chunks=len(chunks),
            forced=forced,
        )
        ctx = StageContext(
            step=step.id,
            lane=lane,
            params=dict(step.params),
            references=dict(pipeline.references),
            consumed={p: {ln: a.value for ln, a in lanes.items()} for p, lanes in consumed.items()},
            overrides=step.overrides_seen(pipeline.overrides),
            **({"llm": step.llm} if step.llm is not None else {}),
            **({"trace": _ModuleTrace(self._trace, step.id, lane)} if self._trace else {}),
        )
        if step.id in self._policy.required:
            return self._restore_lane(step, lane, lid, ctx), lid
        lane_run = _LaneRun(self, step, lane, lid, dependencies_digest(deps), forced, ctx)
        try:
            return lane_run.run(chunks), lid
        except _StageError as err:
            message = safe_error_text(f"{type(err.exc).__name__}: {err.exc}", ERROR_MESSAGE_LIMIT)
            cause = failure_cause(err.exc)
            lane_run.emit_attempts(err.stage, err.chunk, err.attempts)
            lane_run.record_failure(err.stage, err.chunk, cause)
            self._sink.emit(
                StageFailed,
                step=step.id,
                lane=lane,
                stage=err.stage,
                chunk=err.chunk,
                code=ReasonCode.STAGE_FAILED,
                message=message,
                cause=cause,
            )
            raise StageFailure(
                step.id, lane, ReasonCode.STAGE_FAILED, message, cause, exception=err.exc
            ) from None

    def _restore_lane(self, step: ResolvedStep, lane: str, lid: str, ctx: StageContext) -> Artifact:
        """Selective recomputation: restore an unforced step's accepted normalize artifact."""
        module = step.module
        codec = codec_id(module, Stage.NORMALIZE)
        state = PredecessorState.MISSING
        record = None
        value: Any = None
        if self._loader is not None:
            restored = self._loader.load_accepted_artifact(step.id, lane, lid, codec)
            state, record = restored.state, restored.record
        if state is PredecessorState.RESTORED and record is not None:
            try:
                value = msgspec.json.decode(record.payload, type=module.artifact_type)
            except (msgspec.DecodeError, msgspec.ValidationError):
                state = PredecessorState.CORRUPT
        artifact: Artifact | None = None
        if state is PredecessorState.RESTORED and record is not None:
            artifact = Artifact.of(
                module, step.id, lane, record.payload, value, list(record.warnings)
            )
            if record.provenance != artifact.provenance(module.fingerprint):
                state = PredecessorState.PROVENANCE_INVALID
        facts = StageFacts(
            stage=Stage.NORMALIZE,
            resumed=self._loader is not None,
            predecessor=state,
            checkpoint=CheckpointState.PRESENT
            if state is PredecessorState.RESTORED
            else CheckpointState.NOT_LOOKED_UP,
            current=StageDigests(step.components, "", ""),
        )
        code = self._decide(step.id, lane, "", facts)
        if state is not PredecessorState.RESTORED or artifact is None:
            raise StageFailure(
                step.id,
                lane,
                code,
                f"required predecessor step '{step.id}' lane '{lane}' cannot be restored: "
                f"{code.value}",
            )
        self._emit_artifact(artifact, restored=True)
        return artifact

    # --- shared helpers ---------------------------------------------------------

    def _decide(
        self,
        step: str,
        lane: str,
        chunk: str,
        facts: StageFacts,
        cause: FailureCause | None = None,
    ) -> ReasonCode:
        code = decide_stage(facts)
        self._decisions[code.value] = self._decisions.get(code.value, 0) + 1
        fields = StageDecided.fields(step, lane, chunk, facts, code)
        if cause is not None:
            fields["cause"] = cause
        self._sink.emit(StageDecided, **fields)
        return code

    def _write_checkpoint(self, key: CheckpointKey, record: CheckpointRecord) -> None:
        if self._recorder is None:
            return
        try:
            sha, size = self._recorder.write(key, record)
        except CheckpointWriteError as exc:
            message = safe_error_text(str(exc))
            self._persistence_errors.append(message)
            self._sink.emit(
                CheckpointWriteFailed,
                step=key.step,
                lane=key.lane,
                stage=key.stage,
                chunk=key.chunk,
                message=message,
            )
            return
        self._sink.emit(
            CheckpointWritten,
            step=key.step,
            lane=key.lane,
            stage=key.stage,
            chunk=key.chunk,
            sha256=sha,
            size=size,
        )

    def _emit_artifact(self, artifact: Artifact, *, restored: bool = False) -> None:
        for warning in artifact.warnings:
            self._warnings.append((artifact.step, artifact.lane, warning))
        self._sink.emit(
            ArtifactGenerated,
            step=artifact.step,
            lane=artifact.lane,
            kind=artifact.kind,
            schema=artifact.schema,
            media_type=artifact.media_type,
            sha256=artifact.sha256,
            size=artifact.size,
            warnings=artifact.warnings,
            restored=restored,
        )

    def _outputs(
        self, pipeline: ResolvedPipeline, artifacts: dict[str, dict[str, Artifact]]
    ) -> list[OutputFile]:
        outputs: list[OutputFile] = []
        for step in pipeline.steps:
            for lane, artifact in artifacts[step.id].items():
                own = OutputFile(f"artifacts/{step.id}/{safe_lane_id(lane)}.json", artifact.data)
                outputs.append(own)
                ctx = StageContext(
                    step=step.id,
                    lane=lane,
                    params=dict(step.params),
                    references=dict(pipeline.references),
                    consumed={},
                    overrides=step.overrides_seen(pipeline.overrides),
                )
                try:
                    extra = step.module.outputs(artifact.value, ctx)
                    for item in extra:
                        if not isinstance(item, OutputFile) or not isinstance(item.data, bytes):
                            raise TypeError("outputs() must return OutputFile(name, bytes)")
                except Exception as exc:
                    message = safe_error_text(f"{type(exc).__name__}: {exc}", ERROR_MESSAGE_LIMIT)
                    self._sink.emit(
                        StageFailed,
                        step=step.id,
                        lane=lane,
                        stage=Stage.NORMALIZE,
                        chunk="",
                        code=ReasonCode.STAGE_FAILED,
                        message=message,
                    )
                    raise StageFailure(
                        step.id, lane, ReasonCode.STAGE_FAILED, message, exception=exc
                    ) from None
                outputs.extend(extra)
                for item in (own, *extra):
                    self._attribution.setdefault(item.name, (step.id, lane))
        return outputs


class _ModuleTrace:
    def __init__(self, trace: TraceRecorder, step: str, lane: str) -> None:
        self._trace = trace
        self._where = {"step": step, "lane": lane}

    def record(self, name: str, data: Any) -> None:
        self._trace.record("module", name, {**self._where, "data": dict(data)})


class _LaneRun:
    """One lane's progressive extract -> merge -> normalize, with early cutoff."""

    def __init__(
        self,
        runner: PipelineRunner,
        step: ResolvedStep,
        lane: str,
        lid: str,
        deps: str,
        forced: bool,
        ctx: StageContext,
    ) -> None:
        self.r = runner
        self.step = step
        self.module = step.module
        self.lane = lane
        self.lid = lid
        self.deps = deps
        self.forced = forced
        self.ctx = ctx
        self.resumed = runner._loader is not None

    def _key(self, stage: Stage, chunk: str = "") -> CheckpointKey:
        return CheckpointKey(self.step.id, self.lane, stage, chunk)

    def _digests(self, stage_input: str) -> StageDigests:
        return StageDigests(self.step.components, stage_input, self.deps)

    def _lookup(self, stage: Stage, chunk: str = ""):
        loader = self.r._loader
        if self.forced or loader is None:
            return CheckpointState.NOT_LOOKED_UP, None
        loaded = loader.load(self._key(stage, chunk), codec_id(self.module, stage))
        return loaded.state, loaded.record

    def _facts(
        self, stage: Stage, stage_input: str, state: CheckpointState, record: Any
    ) -> StageFacts:
        return StageFacts(
            stage=stage,
            forced=self.forced,
            resumed=self.resumed,
            checkpoint=state,
            current=self._digests(stage_input),
            recorded=record.digests if record is not None else None,
        )

    def record_failure(self, stage: Stage, chunk: str, cause: FailureCause | None) -> None:
        facts = StageFacts(
            stage=stage,
            forced=self.forced,
            resumed=self.resumed,
            failed=True,
            current=self._digests(""),
        )
        self.r._decide(self.step.id, self.lane, chunk, facts, cause)

    # --- LLM calls: one metered scope per stage execution (docs/internals.md) -------

    def _stage_ctx(self, stage: Stage, chunk: str) -> tuple[StageContext, list[LLMAttempt]]:
        """The stage's context with its own metered LLM call scope (attempts collected)."""
        if self.step.llm is None:
            return self.ctx, []
        llm, attempts = bind_call(self.ctx.llm, CallScope(self.step.id, self.lane, stage, chunk))
        if llm is self.ctx.llm:
            return self.ctx, attempts
        return msgspec.structs.replace(self.ctx, llm=llm), attempts

    def emit_attempts(self, stage: Stage, chunk: str, attempts: list[LLMAttempt]) -> None:
        """Journal a stage's LLM attempts, on the calling thread, in the stage's order."""
        for attempt in attempts:
            self.r._sink.emit(
                LLMCallAttempted,
                step=self.step.id,
                lane=self.lane,
                stage=stage,
                chunk=chunk,
                **LLMCallAttempted.fields_of(attempt),
            )
        attempts.clear()

    def _reused(self, stage: Stage, chunk: str, record: CheckpointRecord) -> None:
        """A reused checkpoint that cost LLM calls: journal what this run did not spend."""
        if record.usage:
            self.r._sink.emit(
                LLMUsageReused,
                step=self.step.id,
                lane=self.lane,
                stage=stage,
                chunk=chunk,
                usage=record.usage,
            )

    def _refresh_identity(self, key: CheckpointKey, record: CheckpointRecord) -> None:
        """A reused envelope gets the current lane identity so --recompute finds it."""
        if self.r._recorder is not None and record.lane_identity != self.lid:
            self.r._write_checkpoint(key, msgspec.structs.replace(record, lane_identity=self.lid))

    def _call(
        self, stage: Stage, chunk: str, fn: Callable[[StageContext], Any], tp: Any
    ) -> _Result:
        if stage is not Stage.EXTRACT:  # extract may run on worker threads: counted in run()
            self.r._module_calls += 1
        ctx, attempts = self._stage_ctx(stage, chunk)
        try:
            value = fn(ctx)
            if stage is Stage.NORMALIZE:
                if not isinstance(value, Normalized):
                    raise TypeError("normalize() must return Normalized(value, warnings)")
                data = canonical_bytes(value.value)
                decoded = msgspec.json.decode(data, type=tp)
            else:
                data = canonical_bytes(value)
                decoded = msgspec.json.decode(data, type=tp)
        except Exception as exc:
            raise _StageError(stage, chunk, exc, attempts) from exc
        return _Result(sha256_hex(data), data, decoded, True, attempts)

    def _decode(self, stage: Stage, chunk: str, result: _Result, tp: Any) -> Any:
        if not result.decoded:
            try:
                result.value = msgspec.json.decode(result.data, type=tp)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise _StageError(stage, chunk, exc) from exc
            result.decoded = True
        return result.value

    def _store(
        self,
        stage: Stage,
        chunk: str,
        stage_input: str,
        result: _Result,
        *,
        warnings: list[str] | None = None,
        provenance: Provenance | None = None,
    ) -> None:
        usage = LLMUsage.of(result.attempts) if result.attempts else None
        self.emit_attempts(stage, chunk, result.attempts)
        self.r._sink.emit(
            StageExecuted,
            step=self.step.id,
            lane=self.lane,
            stage=stage,
            chunk=chunk,
            sha256=result.digest,
            size=len(result.data),
        )
        self.r._write_checkpoint(
            self._key(stage, chunk),
            CheckpointRecord(
                codec_id=codec_id(self.module, stage),
                lane_identity=self.lid,
                digests=self._digests(stage_input),
                output_sha256=result.digest,
                payload=result.data,
                warnings=warnings or [],
                provenance=provenance,
                usage=usage,
            ),
        )

    def run(self, chunks: list[Chunk]) -> Artifact:
        step_id, lane, module = self.step.id, self.lane, self.module
        merge_state, merge_record = self._lookup(Stage.MERGE)
        # A chunk with no checkpoint is "new bytes" (input_changed) only when the lane's
        # recorded identity differs, i.e. its sources or components changed since; in an
        # unchanged lane a missing file is just checkpoint_missing.
        lane_record = (
            merge_record
            if merge_state is CheckpointState.PRESENT and merge_record.lane_identity != self.lid
            else None
        )

        # extract: decide every chunk in order, then execute the misses.
        results: list[_Result | None] = []
        misses: list[int] = []
        for i, chunk in enumerate(chunks):
            state, record = self._lookup(Stage.EXTRACT, chunk.id)
            if state is CheckpointState.MISSING and lane_record is not None:
                state, record = CheckpointState.LANE_ONLY, lane_record
            code = self.r._decide(
                step_id, lane, chunk.id, self._facts(Stage.EXTRACT, chunk.id, state, record)
            )
            if code is ReasonCode.REUSED:
                results.append(_Result(record.output_sha256, record.payload))
                self._reused(Stage.EXTRACT, chunk.id, record)
                self._refresh_identity(self._key(Stage.EXTRACT, chunk.id), record)
            else:
                results.append(None)
                misses.append(i)

        failures: list[_StageError] = []

        def extract(i: int) -> _Result | _StageError | None:
            if failures:  # first failure: schedule no new work
                return None
            chunk = chunks[i]
            try:
                return self._call(
                    Stage.EXTRACT,
                    chunk.id,
                    lambda ctx: module.extract(chunk, ctx),
                    module.chunk_type,
                )
            except _StageError as err:
                failures.append(err)
                return err

        # Results are stored in chunk order whatever the parallelism; the stages that
        # finished are checkpointed before the first failure is raised.
        failed: list[_StageError] = []
        mapped = self.r._map(extract, misses)
        for done_count, (i, result) in enumerate(zip(misses, mapped, strict=True), 1):
            if result is not None:  # the module was called (a result or its error)
                self.r._module_calls += 1
            if isinstance(result, _Result):
                results[i] = result
                self._store(Stage.EXTRACT, chunks[i].id, chunks[i].id, result)
            elif isinstance(result, _StageError):
                self.emit_attempts(Stage.EXTRACT, chunks[i].id, result.attempts)
                failed.append(result)
            if self.r._progress:
                self.r._progress(step_id, lane, done_count, len(misses))
        if failed:  # the first failure in chunk order, whatever the parallelism
            raise failed[0]
        done = [r for r in results if r is not None]
        extract_digest = sequence_digest(r.digest for r in done)

        # merge
        code = self.r._decide(
            step_id, lane, "", self._facts(Stage.MERGE, extract_digest, merge_state, merge_record)
        )
        if code is ReasonCode.REUSED:
            merged = _Result(merge_record.output_sha256, merge_record.payload)
            self._reused(Stage.MERGE, "", merge_record)
            self._refresh_identity(self._key(Stage.MERGE), merge_record)
        else:
            parts = [
                self._decode(Stage.EXTRACT, c.id, r, module.chunk_type)
                for c, r in zip(chunks, done, strict=True)
            ]
            merged = self._call(
                Stage.MERGE, "", lambda ctx: module.merge(parts, ctx), module.merged_type
            )
            self._store(Stage.MERGE, "", extract_digest, merged)

        # normalize
        norm_state, norm_record = self._lookup(Stage.NORMALIZE)
        code = self.r._decide(
            step_id, lane, "", self._facts(Stage.NORMALIZE, merged.digest, norm_state, norm_record)
        )
        if code is ReasonCode.REUSED:
            out = _Result(norm_record.output_sha256, norm_record.payload)
            value = self._decode(Stage.NORMALIZE, "", out, module.artifact_type)
            warnings = list(norm_record.warnings)
            artifact = Artifact.of(module, step_id, lane, out.data, value, warnings)
            self._reused(Stage.NORMALIZE, "", norm_record)
            self._refresh_identity(self._key(Stage.NORMALIZE), norm_record)
        else:
            merged_value = self._decode(Stage.MERGE, "", merged, module.merged_type)
            holder: dict[str, Normalized] = {}

            def normalize(ctx: StageContext) -> Normalized:
                result = module.normalize(merged_value, ctx)
                holder["n"] = result
                return result

            out = self._call(Stage.NORMALIZE, "", normalize, module.artifact_type)
            value = out.value
            # Warnings are module diagnostics, not documents: redacted before they are
            # journaled, checkpointed or reported.
            warnings = [redact_text(str(w)) for w in holder["n"].warnings]
            for validator in self.step.validators:
                try:
                    warnings.extend(redact_text(str(w)) for w in validator.check(value, self.ctx))
                except Exception as exc:
                    raise _StageError(Stage.NORMALIZE, "", exc, out.attempts) from exc
            artifact = Artifact.of(module, step_id, lane, out.data, value, warnings)
            self._store(
                Stage.NORMALIZE,
                "",
                merged.digest,
                out,
                warnings=warnings,
                provenance=artifact.provenance(module.fingerprint),
            )
        self.r._emit_artifact(artifact)
        return artifact


def _make_chunk(source: Source, span: Span) -> Chunk:
    data = source.data[span.start : span.end]
    return Chunk(
        id=chunk_id(source.name, data),
        source=source.name,
        start=span.start,
        end=span.end,
        text=data.decode("utf-8"),
        sha256=hashlib.sha256(data).hexdigest(),
    )
