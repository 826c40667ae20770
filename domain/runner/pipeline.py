"""`PipelineRunner`: a resolved pipeline's steps and lanes, run through the ports.

It works only through ports (event sink, checkpoint loader and recorder, plan store,
trace) and returns logical output files; it never sees a root or a path. Every stage
is decided by `decide_stage` from facts that go into the `StageDecided` event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from runjournal.domain.events import FileFingerprint, InputsFingerprinted, LaneResolved, StageFailed
from runjournal.domain.identity import dependencies_digest, lane_identity
from runjournal.domain.llm import failure_cause
from runjournal.domain.modules import Chunk, StageContext
from runjournal.domain.names import CORPUS_LANE
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope
from runjournal.domain.plan_keys import ChunkMapEntry
from runjournal.domain.ports import (
    CheckpointLoader,
    CheckpointRecorder,
    ChunkPlanStore,
    EventSink,
    TraceRecorder,
)
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.recompute import RecomputePolicy
from runjournal.domain.redaction import safe_error_text
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import exception_text, guarded
from runjournal.domain.runner.failures import ERROR_MESSAGE_LIMIT, StageError, StageFailure
from runjournal.domain.runner.lanes import (
    LaneRun,
    LaneServices,
    ModuleTrace,
    ParallelMap,
    Progress,
)
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.outcome import RunOutcome
from runjournal.domain.runner.outputs import collect_outputs
from runjournal.domain.runner.plans import resolve_plans, settle_plans
from runjournal.domain.runner.restore import restore_lane


def _serial_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    return (fn(item) for item in items)


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
        self._plan_store = plan_store
        self._trace = trace
        self._policy = recompute or RecomputePolicy(selected=(), forced=(), required=())
        self._ledger = RunLedger(sink, recorder)
        self._lane_services = LaneServices(
            ledger=self._ledger,
            loader=loader,
            parallel_map=parallel_map or _serial_map,
            progress=progress,
        )
        self._attribution: dict[str, tuple[str, str]] = {}

    # --- public ------------------------------------------------------------------

    def run(self, pipeline: ResolvedPipeline) -> RunOutcome:
        self._emit_inputs(pipeline)
        planned = resolve_plans(pipeline, self._plan_store)
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
        settle_plans(planned, self._plan_store, self._ledger)
        for step in pipeline.steps:
            if step.id not in self._policy.required:
                self._run_step(step, pipeline, chunks_by_source, artifacts, lane_ids)
        outputs = collect_outputs(pipeline, artifacts, self._ledger, self._attribution)
        chunk_map = [
            ChunkMapEntry(chunk_id=c.id, source=c.source, start=c.start, end=c.end, sha256=c.sha256)
            for chunks in chunks_by_source.values()
            for c in chunks
        ]
        ledger = self._ledger
        return RunOutcome(
            outputs=outputs,
            lane_identities=lane_ids,
            chunk_map=chunk_map,
            persistence_errors=list(ledger.persistence_errors),
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

    def _emit_inputs(self, pipeline: ResolvedPipeline) -> None:
        self._sink.emit(
            InputsFingerprinted,
            sources=[FileFingerprint(s.name, s.sha256, len(s.data)) for s in pipeline.sources],
            references=[
                FileFingerprint(name, digest, len(pipeline.references[name].encode("utf-8")))
                for name, digest in sorted(pipeline.reference_digests.items())
            ],
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
        deps = [a.ref for lanes in consumed.values() for a in lanes.values()]
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
            **({"trace": ModuleTrace(self._trace, step.id, lane)} if self._trace else {}),
        )
        if step.id in self._policy.required:
            return restore_lane(self._ledger, self._loader, step, lane, lid), lid
        lane_run = LaneRun(
            self._lane_services, step, lane, lid, dependencies_digest(deps), forced, ctx
        )
        try:
            return lane_run.run(chunks), lid
        except StageError as err:
            module_exc = err.exc
            message = safe_error_text(exception_text(module_exc), ERROR_MESSAGE_LIMIT)
            cause = guarded(lambda: failure_cause(module_exc), lambda _: None)
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
