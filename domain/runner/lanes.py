"""One lane's stage loop: progressive extract -> merge -> normalize, with early cutoff.

`LaneRun` is handed what it works with (`LaneServices`: its ledger, the checkpoint
loader and the progress callback); it knows nothing of the runner that created it.
Its `run` is a generator: it yields its module calls (`Batch`es) to the scheduler
(`scheduler.py`) and is resumed with their outcomes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from runjournal.domain.checkpoint_scope import call_scope_identity, checkpoint_key, stage_scopes
from runjournal.domain.decisions import (
    REUSE_CODES,
    CheckpointState,
    Stage,
    StageDigests,
    StageFacts,
    decide_stage,
)
from runjournal.domain.identity import codec_id, sha256_hex
from runjournal.domain.lane_walk import (
    Decide,
    LaneWalk,
    Look,
    Settle,
    stage_facts,
    with_lane_only,
)
from runjournal.domain.leases import Lease, LeaseWaitOutcome, StageLeases, lane_lease
from runjournal.domain.llm import CallScope, FailureCause, LLMAttempt, LLMUsage, bind_call
from runjournal.domain.modules import Chunk, StageContext, streams_merge
from runjournal.domain.pipeline import ResolvedStep
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointLoaderPort,
    CheckpointRecord,
    Provenance,
    TraceRecorder,
)
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import is_interrupt, module_warnings
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.reads import StageReads
from runjournal.domain.runner.reused_lane import reuse_lane
from runjournal.domain.runner.scheduler import Batch, LaneWork
from runjournal.domain.runner.stage_failures import StageError, WorkerError
from runjournal.domain.runner.tasks import (
    CheckpointTarget,
    PartRef,
    StageCall,
    StageReply,
    StageTask,
    StoredCheckpoint,
    TaskContext,
    encode_stage_value,
)

Progress = Callable[[str, str, int, int], None]


@dataclass(frozen=True)
class LaneServices:
    """The collaborators every lane of a run shares (each lane has its own ledger)."""

    ledger: RunLedger
    loader: CheckpointLoaderPort | None
    progress: Progress | None = None
    leases: StageLeases | None = None  # docs/operations.md "Concurrent runs"
    # told before an LLM step's stage executes (the run may then load its LLM client)
    on_execute: Callable[[], None] | None = None
    # reads back the lane's own extract checkpoints for a streaming merge, even in a run
    # that is not a resume (docs/modules.md "Streaming merge"); None: parts stay in memory
    parts: CheckpointLoaderPort | None = None


@dataclass
class StageResult:
    """One stage result: digest always; bytes and/or decoded value as far as needed."""

    digest: str
    data: bytes
    value: Any = None
    decoded: bool = False
    attempts: list[LLMAttempt] = field(default_factory=list)  # LLM attempts that produced it
    warnings: list[str] = field(default_factory=list)  # normalize's, made safe
    # A worker wrote its checkpoint (a bucket cache root): `data` stayed there (b"").
    stored: StoredCheckpoint | None = None
    # a reused checkpoint's payload, loaded and verified when first used (`LaneRun._bytes`)
    fetch: Callable[[], bytes] | None = None
    spilled: bool = False  # an extract's bytes left in the checkpoint store, read back to merge


class PartUnreadable(Exception):
    """An extract checkpoint a streaming merge reads back is not there as it was written."""


class ModuleTrace:
    """The `ctx.trace` a module records into: tagged with its step and lane."""

    def __init__(self, trace: TraceRecorder, step: str, lane: str) -> None:
        self._trace = trace
        self._where = {"step": step, "lane": lane}

    def record(self, name: str, data: Any) -> None:
        self._trace.record("module", name, {**self._where, "data": dict(data)})


class LaneRun:
    """One lane's progressive extract -> merge -> normalize, with early cutoff."""

    def __init__(
        self,
        services: LaneServices,
        step: ResolvedStep,
        lane: str,
        lid: str,
        reads: dict[Stage, StageReads],
        forced: bool,
        ctx: StageContext,
        shipped: TaskContext | None = None,
        *,
        materialize: Callable[[], list[Chunk]] | None = None,
    ) -> None:
        self.services = services
        self.ledger = services.ledger
        self.step = step
        self.module = step.module
        self.lane = lane
        self.lid = lid
        self.reads = reads
        self.forced = forced
        self.ctx = ctx
        # Each stage sees only what it reads of the consumed artifacts (reads.py).
        self.ctxs = {
            stage: ctx if r.parts is None else msgspec.structs.replace(ctx, consumed=r.consumed)
            for stage, r in reads.items()
        }
        self.resumed = services.loader is not None
        # the lane's chunks with their text, when some are of a source not read (their
        # text is then "" until an extract executes)
        # (docs/internals.md "Inputs a resume does not read")
        self.materialize = materialize
        # extract and merge payloads are used only when a later stage executes: a loader
        # that can leaves them unread until then
        # (docs/internals.md "Payloads a resume does not use")
        self.defers = bool(getattr(services.loader, "defers_payloads", False))
        # the lane's own hold on its lease, from its first executed stage to its end
        # (`lane_lease`, docs/operations.md "Concurrent runs")
        self._lane_hold: Lease | None = None
        self._leased: CheckpointKey | None = None  # the lane's lease, built once
        # the context's data for a worker; None: every call of the lane runs here
        self.shipped = shipped
        # Checkpoints are looked up by what the stage is, under the D of what the stage
        # reads (docs/internals.md "Checkpoint store").
        self.scopes = stage_scopes(step.components, [reads[s].digest for s in Stage], lid)
        # A streaming merge decodes its parts one at a time, and reads back from the store
        # the ones whose checkpoint is written (docs/modules.md "Streaming merge").
        self.streams = streams_merge(self.module)
        # Whether a written part is read back rather than kept: None until the lane's first
        # written part is read back once (a store that cannot return it keeps them all).
        # Not for an LLM step: a concurrent run may write the same stage with other bytes.
        spills = self.streams and services.parts is not None and self.ledger.recording
        self.spills: bool | None = None if spills and step.llm is None else False

    def _key(self, stage: Stage, chunk: str = "") -> CheckpointKey:
        return checkpoint_key(self.step.id, self.lane, stage, chunk, self.scopes)

    def _digests(self, stage: Stage, stage_input: str) -> StageDigests:
        return StageDigests(self.step.components, stage_input, self.reads[stage].digest)

    def _lookup(self, stage: Stage, chunk: str = ""):
        loader = self.services.loader
        if self.forced or loader is None:
            return CheckpointState.NOT_LOOKED_UP, None
        if self.defers and stage is not Stage.NORMALIZE:
            loaded = loader.load(
                self._key(stage, chunk), codec_id(self.module, stage), payload=False
            )  # type: ignore[call-arg]
        else:
            loaded = loader.load(self._key(stage, chunk), codec_id(self.module, stage))
        return loaded.state, loaded.record

    def _reused_result(self, stage: Stage, chunk: str, record: CheckpointRecord) -> StageResult:
        """A reused extract's or merge's result; its payload read when first used."""
        if not self.defers:
            return StageResult(record.output_sha256, record.payload)
        digest = record.output_sha256
        return StageResult(digest, b"", fetch=lambda: self._payload(stage, chunk, digest))

    def _payload(self, stage: Stage, chunk: str, digest: str) -> bytes:
        """The verified payload of a reused checkpoint whose header was read without it."""
        loader = self.services.loader
        assert loader is not None
        loaded = loader.load(self._key(stage, chunk), codec_id(self.module, stage))
        record = loaded.record
        if record is None or record.output_sha256 != digest:
            why = f"its checkpoint is {loaded.state.value} now" if record is None else "changed"
            raise StageError(
                stage, chunk, RuntimeError(f"a reused {stage.value} result {why} while in use")
            )
        return record.payload

    @staticmethod
    def _bytes(result: StageResult) -> bytes:
        if result.fetch is not None:
            result.data, result.fetch = result.fetch(), None
        return result.data

    def _facts(
        self, stage: Stage, stage_input: str, state: CheckpointState, record: Any
    ) -> StageFacts:
        return stage_facts(
            stage=stage,
            components=self.step.components,
            stage_input=stage_input,
            dependencies=self.reads[stage].digest,
            state=state,
            record=record,
            forced=self.forced,
            resumed=self.resumed,
        )

    def _decide(
        self, turn: Decide, stage_input: str, relook: Callable[[], tuple[CheckpointState, Any]]
    ) -> tuple[ReasonCode, Any, Lease | None]:
        """Decide a stage from what the walk looked up; a stage that will execute is leased
        first.

        When another run holds the lease, the wait is journaled and the checkpoint looked
        up again (`relook`) once it is released: the decision is made from what was found
        then, so a stage the other run just wrote is reused (docs/operations.md "Concurrent
        runs"). A stage that is not looked up (no resume, a forced step) executes whatever
        it would find: it takes the lease only if it is free, and waits for nobody. Returns
        the code, the record it was decided from and the lease (None unless the stage
        executes with it); the caller releases the lease once the checkpoint is written.
        """
        stage, chunk, state, record = turn.stage, turn.chunk, turn.state, turn.record
        facts = self._facts(stage, stage_input, state, record)
        lease: Lease | None = None
        hold: CheckpointKey | None = None  # the lane's lease, when it has the lock
        leases = self.services.leases
        if leases is not None and self.ledger.recording and decide_stage(facts) not in REUSE_CODES:
            key = self._key(stage, chunk)
            # every stage of the lane takes the lane's lease; once the lane holds it, a
            # stage's share is a count in the process's table, no system call
            leased = self._leased
            if leased is None:
                leased = self._leased = lane_lease(
                    self.step.id, self.lane, self.scopes[Stage.EXTRACT]
                )
            hold = leased
            if state is CheckpointState.NOT_LOOKED_UP:  # executes whatever it would find
                lease = leases.try_acquire(leased)
            else:
                lease, wait = leases.acquire(leased)
                if wait is not None:
                    if wait.outcome is not LeaseWaitOutcome.RELEASED:
                        hold = None  # refused as a deadlock: it goes on without the lock
                    self.ledger.lease_waited(key, wait)
                    state, record = relook()
                    facts = self._facts(stage, stage_input, state, record)
        code = self.ledger.decide(self.step.id, self.lane, chunk, facts)
        on_execute = self.services.on_execute
        if on_execute is not None and code not in REUSE_CODES and self.step.llm is not None:
            on_execute()
        if lease is not None and code in REUSE_CODES:
            lease.release()
            lease = None
        elif (
            lease is not None
            and leases is not None
            and hold is not None
            and self._lane_hold is None
        ):
            self._lane_hold = leases.try_acquire(hold)  # a share of its lock: a count
        return code, record, lease

    def record_failure(self, stage: Stage, chunk: str, cause: FailureCause | None) -> None:
        facts = StageFacts(
            stage=stage,
            forced=self.forced,
            resumed=self.resumed,
            failed=True,
            current=self._digests(stage, ""),
        )
        self.ledger.decide(self.step.id, self.lane, chunk, facts, cause)

    # --- LLM calls: one metered scope per stage execution (docs/internals.md) -------

    def _stage_ctx(self, stage: Stage, chunk: str) -> tuple[StageContext, list[LLMAttempt]]:
        """The stage's context with its own metered LLM call scope (attempts collected)."""
        ctx = self.ctxs[stage]
        if self.step.llm is None:
            return ctx, []
        store = self.scopes[stage]
        scope = CallScope(
            self.step.id,
            self.lane,
            stage,
            chunk,
            identity=call_scope_identity(store),
            reuse=self.resumed and not self.forced,  # a stored reply answers only then
        )
        llm, attempts = bind_call(ctx.llm, scope)
        if llm is ctx.llm:
            return ctx, attempts
        return msgspec.structs.replace(ctx, llm=llm), attempts

    def record_attempts(self, stage: Stage, chunk: str, attempts: list[LLMAttempt]) -> None:
        """Journal a stage's LLM attempts, on the calling thread, in the stage's order; a
        stored reply reused instead of a request is journaled as saved, not spent."""
        for attempt in attempts:
            if attempt.reused:
                self.ledger.journal.llm_reused(
                    step=self.step.id,
                    lane=self.lane,
                    stage=stage,
                    chunk=chunk,
                    usage=LLMUsage.of([attempt]),
                    request_sha256=attempt.request_sha256,
                )
                continue
            self.ledger.journal.llm_attempt(
                step=self.step.id, lane=self.lane, stage=stage, chunk=chunk, attempt=attempt
            )
        attempts.clear()

    def _reused(self, stage: Stage, chunk: str, record: CheckpointRecord) -> None:
        """A reused checkpoint that cost LLM calls: journal what this run did not spend."""
        if record.usage:
            self.ledger.journal.llm_reused(
                step=self.step.id,
                lane=self.lane,
                stage=stage,
                chunk=chunk,
                usage=record.usage,
            )

    def _refresh_identity(
        self, stage: Stage, chunk: str, record: CheckpointRecord, result: StageResult | None = None
    ) -> None:
        """A reused envelope gets the current lane identity so --recompute finds it (its
        key is built only then: most reused envelopes already have it). `result`: the
        reused result, whose payload is read now if it was left unread."""
        if self.ledger.recording and record.lane_identity != self.lid:
            payload = self._bytes(result) if result is not None else record.payload
            self.ledger.write_checkpoint(
                self._key(stage, chunk),
                msgspec.structs.replace(record, lane_identity=self.lid, payload=payload),
            )

    def _call(
        self, stage: Stage, chunk: str, fn: Callable[[StageContext], Any], tp: Any
    ) -> StageResult:
        # May run on the executor's threads: only the module call and its encoding.
        ctx, attempts = self._stage_ctx(stage, chunk)
        try:
            data, warnings = encode_stage_value(stage, fn(ctx))
            decoded = msgspec.json.decode(data, type=tp)
        except BaseException as exc:  # whatever the module does, but an interrupt
            if is_interrupt(exc):
                raise
            raise StageError(stage, chunk, exc, attempts) from exc
        return StageResult(sha256_hex(data), data, decoded, True, attempts, warnings)

    def _accept(self, stage: Stage, chunk: str, tp: Any, reply: StageReply) -> Any:
        """A worker's reply as the outcome of a local call: decoded here, by this codec."""
        if reply.error is not None or reply.data is None:
            text = reply.error if reply.error is not None else "WorkerError: no value"
            exc = WorkerError(text, reply.traceback)
            return StageError(stage, chunk, exc, text=text, cause=reply.cause)
        for name, data in reply.trace:
            self.ctx.trace.record(name, data)
        try:
            decoded = msgspec.json.decode(reply.data, type=tp)
        except BaseException as exc:  # the codec refused it, or the module's type raised
            if is_interrupt(exc):
                raise
            return StageError(stage, chunk, exc)
        data = reply.data
        return StageResult(sha256_hex(data), data, decoded, True, [], list(reply.warnings))

    def _accept_stored(self, reply: StageReply) -> StageResult:
        """A call whose worker wrote its checkpoint: the digest is the worker's (the
        bucket's object is content-addressed and verified by every reader); the value
        stays in the bucket, read there by the next stage's worker."""
        stored = reply.stored
        assert stored is not None
        for name, data in reply.trace:
            self.ctx.trace.record(name, data)
        warnings = list(reply.warnings)
        return StageResult(stored.output_sha256, b"", None, False, [], warnings, stored)

    def _part_ref(self, stage: Stage, chunk: str, result: StageResult) -> PartRef | None:
        """Where a worker reads a result the coordinator does not hold."""
        if result.stored is None:
            return None
        return PartRef(self._key(stage, chunk), codec_id(self.module, stage), result.digest)

    def _decode(self, stage: Stage, chunk: str, result: StageResult, tp: Any) -> Any:
        if not result.decoded:
            data = self._bytes(result)
            try:
                result.value = msgspec.json.decode(data, type=tp)
            except BaseException as exc:  # the codec refused it, or the module's type raised
                if is_interrupt(exc):
                    raise
                raise StageError(stage, chunk, exc) from exc
            result.decoded = True
        return result.value

    def _store(
        self,
        stage: Stage,
        chunk: str,
        stage_input: str,
        result: StageResult,
        *,
        warnings: list[str] | None = None,
        provenance: Provenance | None = None,
        lease: Lease | None = None,
    ) -> bool:
        """Journal and checkpoint a stage's result; True when it is in the store now."""
        usage = LLMUsage.of(result.attempts) if result.attempts else None
        self.record_attempts(stage, chunk, result.attempts)
        stored = result.stored
        self.ledger.journal.executed(
            step=self.step.id,
            lane=self.lane,
            stage=stage,
            chunk=chunk,
            sha256=result.digest,
            size=len(result.data) if stored is None else stored.output_size,
        )
        if stored is not None:  # the worker wrote it: journaled here, as it says
            self.ledger.stored_checkpoint(
                self._key(stage, chunk), stored, then=lease.release if lease else None
            )
            return False  # a worker's: kept by reference, never read back here
        return self.ledger.write_checkpoint(
            self._key(stage, chunk),
            CheckpointRecord(
                codec_id=codec_id(self.module, stage),
                lane_identity=self.lid,
                digests=self._digests(stage, stage_input),
                output_sha256=result.digest,
                payload=result.data,
                warnings=warnings or [],
                provenance=provenance,
                usage=usage,
            ),
            then=lease.release if lease is not None else None,
        )

    def _attempt(
        self,
        stage: Stage,
        chunk: str,
        fn: Callable[[StageContext], Any],
        tp: Any,
        inputs: Callable[[], dict[str, Any]],
        stage_input: str = "",
        *,
        local: bool = False,
    ) -> StageCall:
        """One module call as the scheduler runs it: its result or its error, never raised.

        `inputs` are the stage's inputs for a worker (`StageTask` fields), built only if
        the executor ships the call.
        """

        def call() -> StageResult | StageError:
            try:
                return self._call(stage, chunk, fn, tp)
            except StageError as err:
                return err

        shipment, shipped = self.step.shipment, self.shipped
        if local or shipment is None or shipped is None or self.step.llm is not None:
            return StageCall(call)

        def task() -> StageTask:
            target = None
            if stage is not Stage.NORMALIZE and self.ledger.recording:
                # normalize's record holds the coordinator's validators and provenance
                target = CheckpointTarget(
                    self._key(stage, chunk),
                    codec_id(self.module, stage),
                    self.lid,
                    self._digests(stage, stage_input),
                )
            return StageTask(shipment, stage, chunk, shipped, checkpoint=target, **inputs())

        def accept(reply: StageReply) -> Any:
            if reply.stored is not None and reply.data is None and reply.error is None:
                return self._accept_stored(reply)
            return self._accept(stage, chunk, tp, reply)

        return StageCall(call, task, accept)

    def _one(self, call: Callable[[], StageResult | StageError]) -> LaneWork:
        """Run one merge or normalize call through the scheduler; raise its error."""
        [outcome] = yield Batch([call])
        if isinstance(outcome, StageError):
            raise outcome
        return outcome

    def run(self, chunks: list[Chunk]) -> LaneWork:
        """The lane's stages, yielding its module calls to the scheduler (`Batch`es)."""
        held: dict[tuple[Stage, int], Lease] = {}  # leases not yet handed to a write
        try:
            return (yield from self._run(chunks, held))
        finally:  # a failed, stopped or abandoned lane releases what it still holds
            for lease in held.values():
                lease.release()
            hold, self._lane_hold = self._lane_hold, None
            if hold is not None:  # the lock goes with the last write's share
                hold.release()

    def _run(self, chunks: list[Chunk], held: dict[tuple[Stage, int], Lease]) -> LaneWork:
        """Answer the lane walk's turns (domain/lane_walk.py): look up, decide, execute."""
        reused = reuse_lane(self, chunks)  # docs/internals.md "Reusing a lane as a whole"
        if reused is not None:
            self.ledger.artifact(reused)
            return reused
        walk = LaneWalk(self.lid, [c.id for c in chunks])
        results: list[StageResult | None] = []
        merged: StageResult | None = None
        artifact: Artifact | None = None
        for turn in walk:
            if isinstance(turn, Look):
                walk.answer(self._lookup(turn.stage, turn.chunk))
            elif isinstance(turn, Settle):
                if turn.misses and self.materialize is not None:
                    chunks = self._materialized(chunks[turn.misses[0]].id)
                walk.answer((yield from self._extract(chunks, turn.misses, results, held)))
            elif turn.stage is Stage.EXTRACT:
                walk.answer(self._decide_extract(turn, results, held))
            elif turn.stage is Stage.MERGE:
                merged = yield from self._merge(turn, chunks, results, held)
                walk.answer(merged.digest)
            else:
                assert merged is not None  # the walk decides normalize after merge
                artifact = yield from self._normalize(turn, merged, held)
        assert artifact is not None  # the walk always ends with normalize
        self.ledger.artifact(artifact)
        return artifact

    def _materialized(self, first: str) -> list[Chunk]:
        """The lane's chunks with their text (an input read after all); a source that
        changed since its digest was trusted fails the first extract to execute."""
        assert self.materialize is not None
        try:
            chunks = self.materialize()
        except BaseException as exc:
            if is_interrupt(exc):
                raise
            raise StageError(Stage.EXTRACT, first, exc) from exc
        self.materialize = None
        return chunks

    def _decide_extract(
        self,
        turn: Decide,
        results: list[StageResult | None],
        held: dict[tuple[Stage, int], Lease],
    ) -> str | None:
        """One chunk's extract: reused now, or left for `_extract` (None)."""
        i, chunk = len(results), turn.chunk

        def relook() -> tuple[CheckpointState, Any]:
            return with_lane_only(*self._lookup(Stage.EXTRACT, chunk), turn.fallback)

        code, record, lease = self._decide(turn, chunk, relook)  # an extract's input: its chunk
        if lease is not None:
            held[Stage.EXTRACT, i] = lease
        if code is ReasonCode.REUSED:
            result = self._reused_result(Stage.EXTRACT, chunk, record)
            results.append(result)
            self._reused(Stage.EXTRACT, chunk, record)
            self._refresh_identity(Stage.EXTRACT, chunk, record, result)
            return record.output_sha256
        results.append(None)
        return None

    def _extract(
        self,
        chunks: list[Chunk],
        misses: list[int],
        results: list[StageResult | None],
        held: dict[tuple[Stage, int], Lease],
    ) -> LaneWork:
        """Execute the extracts that were not reused; their digests in `misses` order.

        Results are stored in chunk order as they arrive, whatever the parallelism (a
        result waits for the ones before it); the stages that finished are checkpointed
        before the first failure is raised.
        """
        step_id, lane, module = self.step.id, self.lane, self.module
        failed: list[StageError] = []
        arrived: dict[int, Any] = {}
        stored = 0

        def settle(j: int, result: Any) -> None:
            i = misses[j]
            if isinstance(result, StageResult):
                results[i] = result
                lease = held.pop((Stage.EXTRACT, i), None)
                kept = self._store(Stage.EXTRACT, chunks[i].id, chunks[i].id, result, lease=lease)
                # decoded again one at a time by the merge, or read back (a worker's stays
                # in the bucket)
                if self.streams and result.stored is None:
                    results[i] = (
                        StageResult(result.digest, b"", spilled=True)
                        if kept and self._spills(chunks[i].id, result)
                        else StageResult(result.digest, result.data)
                    )
            elif isinstance(result, StageError):
                self.record_attempts(Stage.EXTRACT, chunks[i].id, result.attempts)
                failed.append(result)
            if self.services.progress:
                self.services.progress(step_id, lane, j + 1, len(misses))

        def on_result(j: int, result: Any) -> None:
            nonlocal stored
            arrived[j] = result
            while stored in arrived:
                settle(stored, arrived.pop(stored))
                stored += 1

        calls = [
            self._attempt(
                Stage.EXTRACT,
                chunks[i].id,
                lambda ctx, chunk=chunks[i]: module.extract(chunk, ctx),
                module.chunk_type,
                lambda chunk=chunks[i]: {"chunk": chunk},
                chunks[i].id,
            )
            for i in misses
        ]
        outcomes = yield Batch(calls, on_result, keeps=False)  # each kept in `arrived` if need be
        del calls
        for j in range(stored, len(misses)):  # after a failure: the rest, never started
            settle(j, arrived.pop(j) if j in arrived else outcomes[j])
        if failed:  # the first failure in chunk order, whatever the parallelism
            raise failed[0]
        return [results[i].digest for i in misses]  # type: ignore[union-attr]

    def _merge(
        self,
        turn: Decide,
        chunks: list[Chunk],
        results: list[StageResult | None],
        held: dict[tuple[Stage, int], Lease],
    ) -> LaneWork:
        """Reuse or execute the merge over every extract's result."""
        done = [r for r in results if r is not None]
        extract_digest = turn.stage_input or ""
        code, merge_record, lease = self._decide(
            turn, extract_digest, lambda: self._lookup(Stage.MERGE)
        )
        if lease is not None:
            held[Stage.MERGE, 0] = lease
        if code is ReasonCode.REUSED:
            result = self._reused_result(Stage.MERGE, "", merge_record)
            self._reused(Stage.MERGE, "", merge_record)
            self._refresh_identity(Stage.MERGE, "", merge_record, result)
            return result
        if self.streams and not any(r.stored is not None for r in done):
            merged = yield from self._merge_streamed(chunks, done, extract_digest)
        else:
            merged = yield from self._merge_listed(chunks, done, extract_digest)
        lease = held.pop((Stage.MERGE, 0), None)
        self._store(Stage.MERGE, "", extract_digest, merged, lease=lease)
        return merged

    def _merge_listed(
        self, chunks: list[Chunk], done: list[StageResult], extract_digest: str
    ) -> LaneWork:
        """A merge over the list of its decoded parts (a worker given refs to parts a worker
        left in the bucket reads them there)."""
        module = self.module
        # decoded here, as a local merge takes them (a result a worker left in the bucket
        # is only ever merged by a worker, which reads it there)
        parts = [
            self._decode(Stage.EXTRACT, c.id, r, module.chunk_type) if r.stored is None else None
            for c, r in zip(chunks, done, strict=True)
        ]

        def inputs() -> dict[str, Any]:
            refs = [
                self._part_ref(Stage.EXTRACT, c.id, r) for c, r in zip(chunks, done, strict=True)
            ]
            if not any(refs):
                return {"parts": [self._bytes(r) for r in done]}
            return {"parts": [self._bytes(r) for r in done], "part_refs": refs}

        return (
            yield from self._one(
                self._attempt(
                    Stage.MERGE,
                    "",
                    lambda ctx: module.merge(parts, ctx),
                    module.merged_type,
                    inputs,
                    extract_digest,
                )
            )
        )

    def _merge_streamed(
        self, chunks: list[Chunk], done: list[StageResult], extract_digest: str
    ) -> LaneWork:
        """A `merge_streams` module's merge over an iterator of its parts, each loaded (read
        back from the store and its digest verified, when spilled) and decoded only when the
        module asks for it, and dropped once it asks for the next: never all at once.

        A part that does not decode fails its extract, as for a list merge. With a worker
        executor the call is shipped with every part's bytes (the worker hands the module a
        list) unless a part was spilled: the merge then runs here.
        """
        module = self.module
        failed: list[StageError] = []

        def parts() -> Any:
            for chunk, result in zip(chunks, done, strict=True):
                if result.decoded:
                    yield result.value
                    continue
                data = self._read_back(chunk.id, result) if result.spilled else self._bytes(result)
                try:
                    value = msgspec.json.decode(data, type=module.chunk_type)
                except BaseException as exc:  # the codec refused it, or the module's type
                    if is_interrupt(exc):
                        raise
                    failed.append(StageError(Stage.EXTRACT, chunk.id, exc))
                    raise
                del data
                yield value
                del value

        spilled = any(r.spilled for r in done)
        call = self._attempt(
            Stage.MERGE,
            "",
            lambda ctx: module.merge(parts(), ctx),
            module.merged_type,
            lambda: {"parts": [self._bytes(r) for r in done]},
            extract_digest,
            local=spilled,
        )
        try:
            return (yield from self._one(call))
        except StageError as err:
            if failed:  # a part that does not decode: its extract's failure
                failed[0].attempts = err.attempts
                raise failed[0] from None
            raise

    def _spills(self, chunk: str, result: StageResult) -> bool:
        """Whether the lane's written parts are read back to merge: asked of its first one."""
        if self.spills is None:
            try:
                self.spills = self._read_back(chunk, result) == result.data
            except Exception:  # whatever the store says: the parts then stay in memory
                self.spills = False
        return self.spills

    def _read_back(self, chunk: str, result: StageResult) -> bytes:
        """A spilled extract result's bytes from the store, verified against its digest."""
        parts = self.services.parts
        assert parts is not None  # only a lane with a part reader spills
        loaded = parts.load(self._key(Stage.EXTRACT, chunk), codec_id(self.module, Stage.EXTRACT))
        record = loaded.record
        if record is None or sha256_hex(record.payload) != result.digest:
            raise PartUnreadable(
                f"the extract checkpoint of chunk {chunk[:12]} written by this run reads back "
                f"{loaded.state.value if record is None else 'changed'}"
            )
        return record.payload

    def _normalize(
        self, turn: Decide, merged: StageResult, held: dict[tuple[Stage, int], Lease]
    ) -> LaneWork:
        """Reuse or execute normalize; the lane's artifact."""
        step_id, lane, module = self.step.id, self.lane, self.module
        code, norm_record, lease = self._decide(
            turn, merged.digest, lambda: self._lookup(Stage.NORMALIZE)
        )
        if lease is not None:
            held[Stage.NORMALIZE, 0] = lease
        if code is ReasonCode.REUSED:
            out = StageResult(norm_record.output_sha256, norm_record.payload)
            value = self._decode(Stage.NORMALIZE, "", out, module.artifact_type)
            warnings = module_warnings(norm_record.warnings)  # bounded if recorded before
            self._reused(Stage.NORMALIZE, "", norm_record)
            self._refresh_identity(Stage.NORMALIZE, "", norm_record)
            return Artifact.of(module, step_id, lane, out.data, value, warnings)

        merged_value = (
            self._decode(Stage.MERGE, "", merged, module.merged_type)
            if merged.stored is None
            else None
        )

        def inputs() -> dict[str, Any]:
            ref = self._part_ref(Stage.MERGE, "", merged)
            return {"merged": self._bytes(merged)} if ref is None else {"merged_ref": ref}

        out = yield from self._one(
            self._attempt(
                Stage.NORMALIZE,
                "",
                lambda ctx: module.normalize(merged_value, ctx),
                module.artifact_type,
                inputs,
                merged.digest,
            )
        )
        value = out.value
        # Warnings are module diagnostics, not documents: redacted, made printable and
        # bounded (by `encode_stage_value`) before they are journaled, checkpointed or
        # reported; validators run here, in the coordinator.
        try:
            warnings = list(out.warnings)
            for validator in self.step.validators:
                warnings.extend(module_warnings(validator.check(value, self.ctxs[Stage.NORMALIZE])))
        except BaseException as exc:
            if is_interrupt(exc):
                raise
            raise StageError(Stage.NORMALIZE, "", exc, out.attempts) from exc
        artifact = Artifact.of(module, step_id, lane, out.data, value, warnings)
        self._store(
            Stage.NORMALIZE,
            "",
            merged.digest,
            out,
            warnings=warnings,
            provenance=artifact.provenance(module.fingerprint),
            lease=held.pop((Stage.NORMALIZE, 0), None),
        )
        return artifact
