"""`PipelineRunner`: a resolved pipeline's steps and lanes, run through the ports.

It works only through ports (`journal`, the run's `RunRecorder`; checkpoint loader and
recorder, plan store, trace) and returns logical output files; it never sees a root or a
path. Every stage is decided by `decide_stage` from facts that go into the `StageDecided` event.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator

from runjournal.domain.decisions import Stage
from runjournal.domain.events import FileFingerprint
from runjournal.domain.identity import LaneIdentities, lane_identity
from runjournal.domain.leases import StageLeases
from runjournal.domain.llm import failure_cause
from runjournal.domain.modules import Chunk, StageContext
from runjournal.domain.names import CORPUS_LANE
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.plan_keys import ChunkMapEntry
from runjournal.domain.ports import (
    CheckpointLoaderPort,
    CheckpointRecorderPort,
    ChunkPlanStore,
    KnownChunks,
    RunRecorder,
    Spool,
    TraceRecorder,
)
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.recompute import RecomputePolicy
from runjournal.domain.redaction import safe_error_text
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import guarded, is_interrupt
from runjournal.domain.runner.lanes import LaneRun, LaneServices, ModuleTrace, Progress
from runjournal.domain.runner.ledger import CheckpointWrites, RunLedger
from runjournal.domain.runner.outcome import RunOutcome
from runjournal.domain.runner.outputs import collect_outputs
from runjournal.domain.runner.plans import (
    SourceChunks,
    read_chunks,
    resolve_plans,
    settle_plans,
)
from runjournal.domain.runner.reads import declares_reads, recorded_reads, stage_reads, whole
from runjournal.domain.runner.restore import restore_lane
from runjournal.domain.runner.scheduler import (
    Executor,
    FailurePolicy,
    LaneJob,
    LaneWork,
    Scheduler,
    SerialExecutor,
)
from runjournal.domain.runner.stage_failures import (
    ERROR_MESSAGE_LIMIT,
    PARTIAL_OUTPUT,
    PartialOutputs,
    RunStopped,
    StageError,
    StageFailure,
)
from runjournal.domain.runner.tasks import ConsumedData, TaskContext

PARTIAL_NAMED = 10  # documents a partial-output warning names before "and N more"


class _ChunkMap:
    """The run's chunk map (`RunOutcome.chunk_map`), made only when it is read: a run that
    writes none does not hold an entry per chunk at its end (issue 29: peak RSS)."""

    def __init__(self, sources: list[SourceChunks]) -> None:
        self._sources = sources

    def __iter__(self) -> Iterator[ChunkMapEntry]:
        for chunks in self._sources:
            for c in chunks.get():
                yield ChunkMapEntry(
                    chunk_id=c.id, source=c.source, start=c.start, end=c.end, sha256=c.sha256
                )


class PipelineRunner:
    def __init__(
        self,
        *,
        journal: RunRecorder,
        loader: CheckpointLoaderPort | None = None,
        recorder: CheckpointRecorderPort | None = None,
        plan_store: ChunkPlanStore | None = None,
        trace: TraceRecorder | None = None,
        recompute: RecomputePolicy | None = None,
        progress: Progress | None = None,
        executor: Executor | None = None,
        keep_going: bool = False,
        checkpoint_writes: CheckpointWrites | None = None,
        leases: StageLeases | None = None,
        on_execute: Callable[[], None] | None = None,
        known_chunks: KnownChunks | None = None,
        parts: CheckpointLoaderPort | None = None,
        spool: Spool | None = None,
    ) -> None:
        self._loader = loader
        # inputs a resume does not read (docs/internals.md "Inputs a resume does not read")
        self._known = known_chunks
        self._unread: dict[str, Source] = {}  # by name: the sources planned unread
        self._chunks: dict[str, SourceChunks] = {}  # by source, set by `run`
        self._on_execute = on_execute
        self._consumed_steps: set[str] = set()  # set by `run`
        self._parts = parts  # a streaming merge's reader of this run's own extracts
        # where artifacts no step consumes, and the output files, wait for P5 (issue 29)
        self._spool = spool
        self._plan_store = plan_store
        self._trace = trace
        self._policy = recompute or RecomputePolicy(selected=(), forced=(), required=())
        self._ledger = RunLedger(journal, recorder, checkpoint_writes)
        self._loader_progress = (loader, progress)
        self._leases = leases
        self._executor = executor or SerialExecutor()
        self._keep_going = keep_going
        self._scheduler: Scheduler | None = None
        self._stop_requested = False
        self._attribution: dict[str, tuple[str, str]] = {}
        # (step, lane) of a partial step -> the documents it ran without
        self._partial: dict[tuple[str, str], list[str]] = {}

    # --- public ------------------------------------------------------------------

    def run(self, pipeline: ResolvedPipeline) -> RunOutcome:
        # the steps another step consumes keep their artifacts decoded (`Artifact.lean`)
        self._consumed_steps = {p for s in pipeline.steps for p in s.consumes}
        self._record_inputs(pipeline)
        planned = resolve_plans(pipeline, self._plan_store, self._known, self._spool)
        # a source, not its plan: the plans go once settled (issue 29: peak RSS)
        self._unread = {p.source.name: p.source for p in planned if p.unread}
        # held packed until a lane starts, not as objects for the whole run (issue 29)
        chunks_by_source = {
            p.source.name: p.packed
            if p.packed is not None
            else SourceChunks(p.source.name, p.chunks)
            for p in planned
        }
        self._chunks = chunks_by_source
        artifacts: dict[str, dict[str, Artifact]] = {s.id: {} for s in pipeline.steps}
        lane_ids = LaneIdentities()  # 32 bytes a lane, not a hex string (issue 29)
        # Selective recomputation restores every required step before anything executes
        # or is written (plans included): a required step never consumes a forced one,
        # and a failed predecessor must leave the cache root untouched (docs/internals.md
        # "Checkpoint store"). Restores stop at the first failure whatever the policy.
        required = [s for s in pipeline.steps if s.id in self._policy.required]
        self._schedule(required, pipeline, chunks_by_source, artifacts, lane_ids, stop=True)
        settle_plans(planned, self._plan_store, self._ledger)
        del planned  # each source's key, facts and outcomes: recorded, not needed again
        others = [s for s in pipeline.steps if s.id not in self._policy.required]
        try:
            self._schedule(
                others, pipeline, chunks_by_source, artifacts, lane_ids, stop=not self._keep_going
            )
        except StageFailure as failure:
            failure.partial = self._partial_outputs(pipeline, artifacts)
            raise
        outputs = collect_outputs(pipeline, artifacts, self._ledger, self._attribution, self._spool)
        chunk_map = _ChunkMap(list(chunks_by_source.values()))
        ledger = self._ledger
        # handed over, not copied: an entry an output file (issue 29: peak RSS)
        attribution, self._attribution = self._attribution, {}
        return RunOutcome(
            outputs=outputs,
            lane_identities=lane_ids,
            chunk_map=chunk_map,
            persistence_errors=list(ledger.persistence_errors),
            attribution=attribution,
        )

    def stop(self) -> None:
        """Schedule no new work (an interrupt): calls in flight finish, then `run` raises
        `RunStopped` (at once if no lane has been scheduled yet)."""
        self._stop_requested = True
        if self._scheduler is not None:
            self._scheduler.stop()

    def _schedule(
        self,
        steps: list[ResolvedStep],
        pipeline: ResolvedPipeline,
        chunks_by_source: dict[str, SourceChunks],
        artifacts: dict[str, dict[str, Artifact]],
        lane_ids: LaneIdentities,
        *,
        stop: bool,
    ) -> None:
        """Run the steps' lanes through the scheduler; artifacts by step and lane, in plan order."""
        lanes_of = {s.id: self._lane_names(s, pipeline) for s in pipeline.steps}
        jobs = self._jobs(steps, pipeline, chunks_by_source, artifacts, lane_ids, lanes_of)
        policy = FailurePolicy.STOP if stop else FailurePolicy.KEEP_GOING
        self._scheduler = Scheduler(self._ledger, self._executor, policy)
        if self._stop_requested:
            self._scheduler.stop()
        try:
            done = self._scheduler.run(jobs, artifacts)
        finally:
            self._scheduler = None
            jobs.close()
        for step in steps:  # lanes in plan order, whatever order they finished in
            finished = artifacts[step.id]
            artifacts[step.id] = {ln: finished[ln] for ln in lanes_of[step.id] if ln in finished}
        if self._stop_requested and done < sum(len(lanes_of[s.id]) for s in steps):
            raise RunStopped()

    def _jobs(
        self,
        steps: list[ResolvedStep],
        pipeline: ResolvedPipeline,
        chunks_by_source: dict[str, SourceChunks],
        artifacts: dict[str, dict[str, Artifact]],
        lane_ids: LaneIdentities,
        lanes_of: dict[str, list[str]],
    ) -> Generator[LaneJob, None, None]:
        """The steps' lane jobs in plan order, each made when the scheduler draws it: a
        run holds the jobs (closure, needs, identity) of the lanes in its window, not of
        every lane from its start (issue 29: peak RSS). Each lane's identity is appended
        to `lane_ids` as its job is made: a run that returns has drawn every job."""
        # each producer's lanes as a set: a per-document consumer asks for its lane in
        # them once per lane (a list made that quadratic in the documents)
        members = {sid: frozenset(names) for sid, names in lanes_of.items()}
        for step in steps:
            for lane, chunks, source_digests in self._lanes(step, pipeline, chunks_by_source):
                needs = self._needs(step, lane, lanes_of, members)
                lid = lane_identity(step.components, source_digests)
                lane_ids.append(lid)

                def start(
                    ledger: RunLedger,
                    step: ResolvedStep = step,
                    lane: str = lane,
                    planned: Callable[[], list[Chunk]] = chunks,
                    lid: str = lid,
                    needs: list[tuple[str, str]] = needs,
                ) -> LaneWork:
                    chunks = planned()  # the lane's chunks, made as it starts
                    consumed: dict[str, dict[str, Artifact]] = {p: {} for p in step.consumes}
                    left_out: list[tuple[str, str]] = []
                    for producer, producer_lane in needs:
                        artifact = artifacts[producer].get(producer_lane)
                        if artifact is None:  # a partial step under --keep-going only
                            left_out.append((producer, producer_lane))
                            continue
                        consumed[producer][producer_lane] = artifact
                    if left_out:
                        self._left_out(ledger, step, lane, left_out, len(needs))
                    return self._run_lane(ledger, step, lane, chunks, lid, pipeline, consumed)

                yield LaneJob(step.id, lane, needs, start, partial=step.partial)

    def _left_out(
        self,
        ledger: RunLedger,
        step: ResolvedStep,
        lane: str,
        left_out: list[tuple[str, str]],
        needed: int,
    ) -> None:
        """A partial step's lane starts without the producer lanes that failed or never
        ran: a warning names them (docs/pipeline.md "`partial`")."""
        documents = sorted({ln for _, ln in left_out})
        self._partial[(step.id, lane)] = documents
        producers = ", ".join(dict.fromkeys(p for p, _ in left_out))
        shown = ", ".join(documents[:PARTIAL_NAMED])
        extra = len(documents) - PARTIAL_NAMED
        more = f" and {extra} more" if extra > 0 else ""
        ledger.journal.warning(
            step=step.id,
            lane=lane,
            message=(
                f"{PARTIAL_OUTPUT} {len(left_out)} of {needed} producer lane(s) of "
                f"{producers} failed or never ran, so {len(documents)} document(s) are "
                f"left out: {shown}{more}"
            ),
        )

    def _partial_outputs(
        self, pipeline: ResolvedPipeline, artifacts: dict[str, dict[str, Artifact]]
    ) -> PartialOutputs | None:
        """A failed --keep-going run: the outputs of the steps that declare `partial`
        and finished, and which of their lanes left documents out."""
        steps = [s for s in pipeline.steps if s.partial and artifacts[s.id]]
        if not steps:
            return None
        ids = {s.id for s in steps}
        attribution: dict[str, tuple[str, str]] = {}
        kept = {s.id: (artifacts[s.id] if s.id in ids else {}) for s in pipeline.steps}
        try:
            outputs = collect_outputs(pipeline, kept, self._ledger, attribution, self._spool)
        except StageFailure:  # its `outputs()` raised: journaled; the run fails as it was
            return None
        left_out = {key: docs for key, docs in self._partial.items() if key[0] in ids}
        return PartialOutputs(outputs, attribution, left_out)

    def _record_inputs(self, pipeline: ResolvedPipeline) -> None:
        self._ledger.journal.inputs_fingerprinted(
            sources=[FileFingerprint(s.name, s.sha256, s.size) for s in pipeline.sources],
            references=[
                FileFingerprint(name, digest, len(pipeline.references[name].encode("utf-8")))
                for name, digest in sorted(pipeline.reference_digests.items())
            ],
        )

    def _lane_names(self, step: ResolvedStep, pipeline: ResolvedPipeline) -> list[str]:
        """The step's lanes in plan order: the corpus lane, or one a source."""
        if step.scope is Scope.CORPUS:
            return [CORPUS_LANE]
        return [s.name for s in pipeline.sources]

    def _lanes(
        self,
        step: ResolvedStep,
        pipeline: ResolvedPipeline,
        chunks_by_source: dict[str, SourceChunks],
    ) -> Iterator[tuple[str, Callable[[], list[Chunk]], list[str]]]:
        """Each lane, what gives its chunks (when it starts), its sources' digests; made
        one at a time, as its job is."""
        if step.scope is Scope.CORPUS:

            def corpus() -> list[Chunk]:
                return [c for s in pipeline.sources for c in chunks_by_source[s.name].get()]

            yield CORPUS_LANE, corpus, [s.sha256 for s in pipeline.sources]
            return
        for s in pipeline.sources:
            yield s.name, chunks_by_source[s.name].get, [s.sha256]

    # --- lanes ------------------------------------------------------------------

    def _needs(
        self,
        step: ResolvedStep,
        lane: str,
        lanes_of: dict[str, list[str]],
        members: dict[str, frozenset[str]],
    ) -> list[tuple[str, str]]:
        """The producer lanes a lane consumes: it is ready once they are all settled."""
        out: list[tuple[str, str]] = []
        for producer in step.consumes:
            lanes = lanes_of[producer]
            if step.scope is Scope.CORPUS:
                out.extend((producer, ln) for ln in lanes)
            elif lanes == [CORPUS_LANE] and lane != CORPUS_LANE:
                out.append((producer, CORPUS_LANE))
            elif lane in members[producer]:
                out.append((producer, lane))
        return out

    def _shipped(
        self,
        step: ResolvedStep,
        lane: str,
        pipeline: ResolvedPipeline,
        consumed: dict[str, dict[str, Artifact]],
    ) -> TaskContext | None:
        """The lane's context as data for a worker; None when its calls must stay here
        (an LLM-backed step, or a step or producer whose module has no shipment)."""
        if step.shipment is None or step.llm is not None:
            return None
        shipped: dict[str, ConsumedData] = {}
        for producer, lanes in consumed.items():
            shipment = pipeline.step(producer).shipment
            if shipment is None:
                return None
            shipped[producer] = ConsumedData(
                shipment,
                {ln: a.data for ln, a in lanes.items()},
                {ln: a.ref for ln, a in lanes.items()},
            )
        return TaskContext(
            step=step.id,
            lane=lane,
            params=dict(step.params),
            references=dict(pipeline.references),
            overrides=step.overrides_seen(pipeline.overrides),
            consumed=shipped,
            trace=self._trace is not None,
        )

    def _materializer(self, chunks: list[Chunk]) -> Callable[[], list[Chunk]] | None:
        """For a lane with chunks of sources not read: what gives them their text (each
        source read when a lane executes an extract of it, and held only by that lane, so
        the run never holds the corpus: issue 29, peak RSS)."""
        if not self._unread or not any(c.source in self._unread for c in chunks):
            return None

        def materialize() -> list[Chunk]:
            out = []
            read_now: dict[str, dict[str, Chunk]] = {}
            for c in chunks:
                source = self._unread.get(c.source)
                if source is None:
                    out.append(c)
                    continue
                read = read_now.get(c.source)
                if read is None:
                    assert self._known is not None
                    got = read_chunks(source, self._known, self._chunks[c.source].get())
                    read = read_now[c.source] = {r.id: r for r in got}
                out.append(read[c.id])
            return out

        return materialize

    def _run_lane(
        self,
        ledger: RunLedger,
        step: ResolvedStep,
        lane: str,
        chunks: list[Chunk],
        lid: str,
        pipeline: ResolvedPipeline,
        consumed: dict[str, dict[str, Artifact]],
    ) -> LaneWork:
        deps = [a.ref for lanes in consumed.values() for a in lanes.values()]
        forced = step.id in self._policy.forced
        ctx = StageContext(
            step=step.id,
            lane=lane,
            params=dict(step.params),
            references=dict(pipeline.references),
            consumed={p: {ln: a.value for ln, a in lanes.items()} for p, lanes in consumed.items()},
            overrides=step.overrides_seen(pipeline.overrides),
            **({"llm": step.llm} if step.llm is not None else {}),
            **({"trace": ModuleTrace(self._trace, step.id, lane)} if self._trace else {}),
        )
        required = step.id in self._policy.required
        # What each stage reads of the consumed artifacts; a module whose `reads`
        # raises fails that stage.
        # docs/modules.md "Declaring what a stage reads"
        reads = dict.fromkeys(Stage, whole(ctx, deps))
        reads_error: StageError | None = None
        if not required and declares_reads(step.module):
            for stage in Stage:
                try:
                    reads[stage] = stage_reads(step.module, stage, ctx, deps)
                except BaseException as exc:
                    if is_interrupt(exc):
                        raise
                    first = chunks[0].id if chunks and stage is Stage.EXTRACT else ""
                    reads_error = StageError(stage, first, exc)
                    break
        ledger.journal.lane_resolved(
            step=step.id,
            lane=lane,
            components=step.components,
            lane_identity=lid,
            dependencies=sorted(deps, key=lambda d: (d.step, d.lane)),
            chunks=len(chunks),
            forced=forced,
            reads=recorded_reads(reads),
        )
        if required:
            return restore_lane(ledger, self._loader, step, lane, lid)
        loader, progress = self._loader_progress
        services = LaneServices(
            ledger=ledger,
            loader=loader,
            progress=progress,
            leases=self._leases,
            on_execute=self._on_execute,
            parts=self._parts,
        )
        shipped = self._shipped(step, lane, pipeline, consumed)
        lane_run = LaneRun(
            services,
            step,
            lane,
            lid,
            reads,
            forced,
            ctx,
            shipped,
            materialize=self._materializer(chunks),
        )
        try:
            if reads_error is not None:
                raise reads_error
            artifact = yield from lane_run.run(chunks)
            if step.id in self._consumed_steps:
                return artifact
            return artifact.lean(step.module.artifact_type, self._spool)
        except StageError as err:
            module_exc = err.exc
            message = safe_error_text(err.text, ERROR_MESSAGE_LIMIT)
            cause = err.cause or guarded(lambda: failure_cause(module_exc), lambda _: None)
            lane_run.record_attempts(err.stage, err.chunk, err.attempts)
            lane_run.record_failure(err.stage, err.chunk, cause)
            ledger.journal.stage_failed(
                step=step.id,
                lane=lane,
                stage=err.stage,
                chunk=err.chunk,
                code=ReasonCode.STAGE_FAILED,
                message=message,
                cause=cause,
            )
            raise StageFailure(
                step.id,
                lane,
                ReasonCode.STAGE_FAILED,
                message,
                cause,
                exception=err.exc,
                stage=err.stage,
                chunk=err.chunk,
            ) from None
