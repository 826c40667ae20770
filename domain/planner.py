"""`runjournal plan`: predict every stage decision of a run without executing anything.

Pure: from a resolved pipeline, the recompute policy and a read-only view of the cache
(the same `CheckpointLoaderPort` and `ChunkPlanStore` ports the runner reads), it walks the
stages in the order the runner decides them (docs/internals.md "The runner") and takes
each decision with the runner's own `decide_stage` (docs/operations.md "Decision order").

A stage whose stage input or dependency digest is produced by a stage that may execute
(its output is not known before execution: early cutoff) is decided under every value
that digest can take; when they disagree the prediction is `upstream_pending`, naming
the stage it waits on and the codes the run may record (docs/operations.md "`plan`").
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.domain.checkpoint_scope import stage_scopes
from runjournal.domain.chunking import PlanInvalid, Span, plan_chunks, validate_plan
from runjournal.domain.decisions import (
    REUSE_CODES,
    CheckpointState,
    Stage,
    decide_stage,
)
from runjournal.domain.events import PlanOutcome
from runjournal.domain.identity import (
    ArtifactRef,
    chunk_ids,
    codec_id,
    dependencies_digest,
    lane_identity,
    sha256_hex,
    step_identity,
)
from runjournal.domain.lane_walk import LaneWalk, Look, Settle, recorded_digests, stage_facts
from runjournal.domain.llm import LLMUsage, Prices, batch_price, total_usage
from runjournal.domain.modules import Chunk, PlannedCall, StageContext, may_call_llm
from runjournal.domain.names import CORPUS_LANE
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.plan_keys import PlanFacts
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointLoaderPort,
    CheckpointRecord,
    ChunkPlanStore,
    ScopeIndex,
    StoreScope,
)
from runjournal.domain.prompt_cache import (
    RECENT_PROMPTS,
    AnthropicCache,
    CacheKind,
    OpenAICache,
    SharedPrefixes,
    estimate_tokens,
    marked_prefix,
    prefix_tokens,
)
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.recompute import RecomputePolicy
from runjournal.domain.runner.reads import declares_reads, stage_reads
from runjournal.domain.runner.restore import restoration

# A digest no stage ever produces: "this unknown output differs from the recorded one".
_DIFFERENT = "\x00unknown"
# The D a lookup uses for "a D no checkpoint is stored under" (a valid digest never stored).
_UNSTORED = sha256_hex(_DIFFERENT.encode("utf-8"))


class PredictionCode(enum.StrEnum):
    """A prediction that is not a reason code: the decision waits on an unknown output."""

    UPSTREAM_PENDING = "upstream_pending"


class Outcome(enum.StrEnum):
    """What a predicted stage does: its table column in the text output."""

    REUSED = "reused"
    EXECUTED = "executed"
    PENDING = "pending"
    FAILED = "failed"  # a required predecessor that cannot be restored: the run stops


class Basis(enum.StrEnum):
    """Where an LLM estimate comes from (docs/operations.md "`plan`")."""

    CHECKPOINT = "checkpoint"  # the usage recorded in the scope's checkpoint
    CHUNK_SIZE = "chunk_size"  # prompt tokens from the chunk's size, the profile's prices
    PROMPT = "prompt"  # the prompts the module says it would send (`planned_calls`)
    UNKNOWN = "unknown"  # an LLM step's merge or normalize with no recorded usage


class StageRef(msgspec.Struct, frozen=True):
    step: str
    lane: str
    stage: Stage
    chunk: str = ""

    def view(self) -> dict[str, str]:
        return {
            "step": self.step,
            "lane": self.lane,
            "stage": self.stage.value,
            "chunk": self.chunk,
        }


class StepPricing(msgspec.Struct, frozen=True, kw_only=True):
    """How a step's requests are priced, as the run prices them: its profile's `prices`,
    its `batch_discount` (1.0: its provider sends no batches), whether the run would
    batch them, and its provider's prompt cache (`endpoint`: steps that share one share
    its cache)."""

    prices: Prices = msgspec.field(default_factory=Prices)
    batch_discount: float = 1.0
    batched: bool = False
    cache: CacheKind = CacheKind.NONE
    endpoint: str = ""


class Estimate(msgspec.Struct, frozen=True):
    """What executing one stage would cost in LLM calls, and where that figure comes from.

    `usage` is priced as the run would send the requests; `online` and `batch` as each
    mode would (the same when the provider sends no batches); `calls` are the prompts
    the module said it would send (basis `prompt`).
    """

    usage: LLMUsage
    basis: Basis
    calls: tuple[PlannedCall, ...] = ()
    online: LLMUsage | None = None
    batch: LLMUsage | None = None

    def by_mode(self, mode: str) -> LLMUsage:
        chosen = self.online if mode == "online" else self.batch
        return self.usage if chosen is None else chosen


class Prediction(msgspec.Struct, frozen=True):
    """One predicted stage decision, in the order the run would take it."""

    where: StageRef
    code: ReasonCode | PredictionCode
    outcome: Outcome
    possible: tuple[ReasonCode, ...]  # the codes the run may record (one when definite)
    waits_on: StageRef | None = None
    estimate: Estimate | None = None  # LLM cost if it executes
    saved: LLMUsage | None = None  # LLM cost a reuse saves

    def view(self) -> dict[str, Any]:
        return {
            **self.where.view(),
            "code": self.code.value,
            "possible": [c.value for c in self.possible],
            "waits_on": self.waits_on.view() if self.waits_on else None,
        }


class Plan(msgspec.Struct, frozen=True):
    pipeline: str
    predictions: list[Prediction]
    stopped: Prediction | None  # the required predecessor the run would stop at

    def decisions(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.predictions:
            out[p.code.value] = out.get(p.code.value, 0) + 1
        return dict(sorted(out.items()))

    def estimate(self) -> dict[str, Any]:
        """Module calls and LLM usage of what executes, may execute, and what reuse saves."""
        executed = [p for p in self.predictions if p.outcome is Outcome.EXECUTED]
        pending = [p for p in self.predictions if p.outcome is Outcome.PENDING]
        reused = [p for p in self.predictions if p.outcome is Outcome.REUSED]
        return {
            "module_calls": {"certain": len(executed), "pending": len(pending)},
            "llm": {
                "executed": _usage_view(executed),
                "pending": _usage_view(pending),
                "saved": total_usage(p.saved for p in reused if p.saved).view(),
                # the same requests sent online and in batches, side by side
                **{
                    mode: {
                        "executed": _mode_view(executed, mode),
                        "pending": _mode_view(pending, mode),
                    }
                    for mode in ("online", "batch")
                },
            },
        }


class _Output(msgspec.Struct, frozen=True):
    """A stage's output digest when it is known before execution, else who produces it."""

    digest: str | None
    producer: StageRef | None = None


class _Known(msgspec.Struct, frozen=True):
    """A lane's artifact fingerprint, or None with the normalize stage that decides it.

    `payload` and `artifact_type` give the artifact's value to a consumer that declares
    what its stages read (decoded only then).
    """

    fingerprint: ArtifactRef | None
    producer: StageRef | None = None
    payload: bytes = b""
    artifact_type: Any = None

    def value(self) -> Any:
        return msgspec.json.decode(self.payload, type=self.artifact_type)


class _Chunk(msgspec.Struct, frozen=True):
    id: str
    chars: int
    chunk: Chunk  # what the module's `planned_calls` is given


class Planner:
    """Walks a pipeline's stages like the runner, reading checkpoints and plans only.

    `loader` is what the run would consult (None without --resume or --recompute); `cache`
    is read for estimates whatever the flags (a plain run's checkpoints still say what a
    stage cost). `prices` holds the LLM steps (step id -> its profile's prices). `scopes`
    lists the D values a lane has checkpoints under, so a lane whose D is not known
    before execution is predicted under each of them (docs/internals.md "Checkpoint store").
    """

    def __init__(
        self,
        *,
        loader: CheckpointLoaderPort | None,
        cache: CheckpointLoaderPort | None,
        plan_store: ChunkPlanStore | None,
        policy: RecomputePolicy,
        prices: Mapping[str, StepPricing | Prices],
        scopes: ScopeIndex | None = None,
        references: Mapping[str, str] | None = None,
    ) -> None:
        self._loader = loader
        self._scopes = scopes
        self._cache = cache
        self._plans = plan_store
        self._policy = policy
        self._prices = {
            step: p if isinstance(p, StepPricing) else StepPricing(prices=p)
            for step, p in prices.items()
        }
        self._references = dict(references or {})
        self._overrides: dict[str, str] = {}
        self._out: list[Prediction] = []

    def plan(self, pipeline: ResolvedPipeline) -> Plan:
        self._overrides = dict(pipeline.overrides)
        chunks = {s.name: self._chunks(s, pipeline) for s in pipeline.sources}
        known: dict[str, dict[str, _Known]] = {}
        # The run restores every required step first, then runs the others in file order.
        required = [s for s in pipeline.steps if s.id in self._policy.required]
        for step in required:
            stop = self._restore_step(step, pipeline, known)
            if stop is not None:
                return Plan(pipeline.name, self._forecast(), stop)
        for step in pipeline.steps:
            if step.id not in self._policy.required:
                known[step.id] = {}
                for lane, lane_chunks, digests in _lanes(step, pipeline, chunks):
                    deps = _stage_dependencies(step, lane, known, pipeline)
                    known[step.id][lane] = self._lane(step, lane, lane_chunks, digests, deps)
        return Plan(pipeline.name, self._forecast(), None)

    # --- chunk plans (read, never published) -------------------------------------

    def _chunks(self, source: Source, pipeline: ResolvedPipeline) -> list[_Chunk]:
        settings = pipeline.chunking
        spans: list[Span] | None = None
        if self._plans is not None:
            facts = PlanFacts(
                source_sha256=source.sha256, source_size=source.size, settings=settings
            )
            lookup = self._plans.get(facts.key())
            if lookup.outcome is PlanOutcome.REUSED and lookup.spans is not None:
                try:
                    validate_plan(source.data, lookup.spans, settings.max_chars)
                    spans = list(lookup.spans)
                except PlanInvalid:
                    spans = None
        if spans is None:
            spans = plan_chunks(source.data, settings)
        out = []
        ids = chunk_ids(source.name)
        for span in spans:
            data = source.data[span.start : span.end]
            text = data.decode("utf-8")
            chunk = Chunk(
                id=ids(data),
                source=source.name,
                start=span.start,
                end=span.end,
                text=text,
                sha256=sha256_hex(data),
            )
            out.append(_Chunk(chunk.id, len(text), chunk))
        return out

    # --- required steps under --recompute -----------------------------------------

    def _restore_step(
        self, step: ResolvedStep, pipeline: ResolvedPipeline, known: dict[str, dict[str, _Known]]
    ) -> Prediction | None:
        known[step.id] = {}
        dummy: dict[str, list[_Chunk]] = {s.name: [] for s in pipeline.sources}
        for lane, _chunks, digests in _lanes(step, pipeline, dummy):
            lid = lane_identity(step.components, digests)
            found = restoration(self._loader, step, lane, lid)
            code = decide_stage(found.facts)
            where = StageRef(step.id, lane, Stage.NORMALIZE)
            record, artifact = found.record, found.artifact
            prediction = Prediction(
                where,
                code,
                Outcome.REUSED if artifact is not None else Outcome.FAILED,
                (code,),
                saved=record.usage if artifact is not None and record is not None else None,
            )
            self._out.append(prediction)
            if artifact is None or record is None:
                return prediction
            known[step.id][lane] = _Known(
                artifact.ref, payload=record.payload, artifact_type=step.module.artifact_type
            )
        return None

    # --- one lane: extract per chunk, merge, normalize ------------------------------

    def _lane(
        self,
        step: ResolvedStep,
        lane: str,
        chunks: list[_Chunk],
        source_digests: list[str],
        deps: dict[Stage, _Output],
    ) -> _Known:
        lid = lane_identity(step.components, source_digests)
        forced = step.id in self._policy.forced
        unknown = [d for d in deps.values() if d.digest is None]
        if not unknown or forced or self._loader is None:
            return self._lane_under(step, lane, chunks, lid, forced, deps)
        # A D waits on a producer that may execute: the run looks the stage's checkpoints
        # up under the D it gets, so predict under every D stored for this step identity,
        # and under one never stored; stages on which they disagree are pending on it.
        passes: list[tuple[list[Prediction], _Known]] = []
        for value in [*self._stored_dependencies(step, lane), _UNSTORED]:
            mark = len(self._out)
            lane_known = self._lane_under(step, lane, chunks, lid, forced, deps, value)
            passes.append((self._out[mark:], lane_known))
            del self._out[mark:]
        for row in zip(*(p for p, _ in passes), strict=True):
            self._out.append(_combine(list(row), unknown[0].producer))
        fingerprints = {k.fingerprint for _, k in passes}
        if len(fingerprints) == 1 and None not in fingerprints:
            return passes[0][1]
        return _Known(None, StageRef(step.id, lane, Stage.NORMALIZE))

    def _stored_dependencies(self, step: ResolvedStep, lane: str) -> list[str]:
        """The D values this step identity has checkpoints under in the lane (and the one of
        the old layout's merge checkpoint when it is of the same S)."""
        values: list[str] = []
        if self._scopes is not None:
            values.extend(
                self._scopes.stored_dependencies(step.id, lane, step_identity(step.components))
            )
        if self._loader is not None:
            old = self._loader.load(
                CheckpointKey(step.id, lane, Stage.MERGE), codec_id(step.module, Stage.MERGE)
            ).record
            if old is not None and old.digests.components == step.components:
                values.append(old.digests.dependencies)
        return list(dict.fromkeys(values))

    def _lane_under(
        self,
        step: ResolvedStep,
        lane: str,
        chunks: list[_Chunk],
        lid: str,
        forced: bool,
        deps: dict[Stage, _Output],
        unknown_dir: str = _UNSTORED,
    ) -> _Known:
        """The lane's predictions (appended), answering the lane walk the runner takes
        (domain/lane_walk.py) with each stage's D `deps`; a stage whose stored D is not
        known (its own or an earlier stage's D waits on a producer) is looked up under the
        D directory `unknown_dir`, its D decided both ways."""
        scopes = stage_scopes(step.components, [deps[s].digest for s in Stage], lid, unknown_dir)
        walk = LaneWalk(lid, [c.id for c in chunks])
        looked: dict[Stage, CheckpointRecord | None] = {}  # each stage's own record
        pending: StageRef | None = None  # the first extract whose output is unknown
        merged = _Output(None)
        index = 0
        for turn in walk:
            if isinstance(turn, Look):
                found = self._lookup(step, lane, turn.stage, turn.chunk, forced, scopes[turn.stage])
                looked[turn.stage] = found[1]
                walk.answer(found)
                continue
            if isinstance(turn, Settle):  # nothing executes here: their outputs stay unknown
                walk.answer([None] * len(turn.misses))
                continue
            stage = turn.stage
            chunk: _Chunk | None = None
            if stage is Stage.EXTRACT:
                chunk, index = chunks[index], index + 1
                stage_input = _Output(turn.chunk)
            elif stage is Stage.MERGE:
                stage_input = _Output(turn.stage_input, None if turn.stage_input else pending)
            else:
                stage_input = merged
            where = StageRef(step.id, lane, stage, turn.chunk)
            pred = self._predict(
                step,
                where,
                forced,
                turn.state,
                turn.record,
                stage_input,
                deps[stage],
                looked[stage],
                scopes[stage],
                chunk,
            )
            out = _result(pred, turn.record)
            if stage is Stage.EXTRACT and out.digest is None and pending is None:
                pending = out.producer
            if stage is Stage.MERGE:
                merged = out
            if stage is Stage.NORMALIZE and pred.outcome is Outcome.REUSED and turn.record:
                return self._known(step, lane, turn.record)
            walk.answer(out.digest)
        return _Known(None, StageRef(step.id, lane, Stage.NORMALIZE))

    @staticmethod
    def _known(step: ResolvedStep, lane: str, record: CheckpointRecord) -> _Known:
        """A reused normalize checkpoint as the lane's known artifact."""
        module = step.module
        return _Known(
            ArtifactRef(
                step=step.id,
                lane=lane,
                kind=module.artifact_kind,
                schema=module.schema,
                media_type=module.media_type,
                sha256=record.output_sha256,
                size=len(record.payload),
            ),
            payload=record.payload,
            artifact_type=module.artifact_type,
        )

    def _lookup(
        self,
        step: ResolvedStep,
        lane: str,
        stage: Stage,
        chunk: str,
        forced: bool,
        scope: StoreScope,
    ) -> tuple[CheckpointState, CheckpointRecord | None]:
        if forced or self._loader is None:
            return CheckpointState.NOT_LOOKED_UP, None
        loaded = self._loader.load(
            CheckpointKey(step.id, lane, stage, chunk, scope), codec_id(step.module, stage)
        )
        return loaded.state, loaded.record

    def _predict(
        self,
        step: ResolvedStep,
        where: StageRef,
        forced: bool,
        state: CheckpointState,
        record: CheckpointRecord | None,
        stage_input: _Output,
        deps: _Output,
        own: CheckpointRecord | None,
        scope: StoreScope,
        chunk: _Chunk | None = None,
    ) -> Prediction:
        """Decide under every value the unknown digests can take; one code is definite."""
        recorded = recorded_digests(state, record, deps.digest)
        inputs = _values(stage_input.digest, recorded.input if recorded else None)
        dep_values = _values(deps.digest, recorded.dependencies if recorded else None)
        codes: list[ReasonCode] = []
        for value in inputs:
            for dep in dep_values:
                facts = stage_facts(
                    stage=where.stage,
                    components=step.components,
                    stage_input=value,
                    dependencies=dep,
                    state=state,
                    record=record,
                    forced=forced,
                    resumed=self._loader is not None,
                    recorded=recorded,
                )
                code = decide_stage(facts)
                if code not in codes:
                    codes.append(code)
        possible = tuple(sorted(codes, key=list(ReasonCode).index))
        estimate = self._estimate(step, where, own, scope, chunk)
        if len(possible) == 1:
            code = possible[0]
            reused = code in REUSE_CODES
            prediction = Prediction(
                where,
                code,
                Outcome.REUSED if reused else Outcome.EXECUTED,
                possible,
                estimate=None if reused else estimate,
                saved=record.usage if reused and record is not None and record.usage else None,
            )
        else:
            waits_on = stage_input.producer if stage_input.digest is None else deps.producer
            prediction = Prediction(
                where,
                PredictionCode.UPSTREAM_PENDING,
                Outcome.PENDING,
                possible,
                waits_on=waits_on,
                estimate=estimate,
                saved=record.usage if record is not None and record.usage else None,
            )
        self._out.append(prediction)
        return prediction

    def _estimate(
        self,
        step: ResolvedStep,
        where: StageRef,
        own: CheckpointRecord | None,
        scope: StoreScope,
        chunk: _Chunk | None,
    ) -> Estimate | None:
        """From what the scope's checkpoint cost before, else from the chunk's size.

        A stage whose module declares it never calls a model (`llm_stages`) is no LLM
        call, whatever profile the step inherits; nor is one whose checkpoint made none.
        """
        if not may_call_llm(step.module, where.stage.value):
            return None
        record = own
        if record is None and self._cache is not None:
            loaded = self._cache.load(
                CheckpointKey(where.step, where.lane, where.stage, where.chunk, scope),
                codec_id(step.module, where.stage),
            )
            record = loaded.record
        pricing = self._prices.get(step.id)
        if record is not None and (record.usage or pricing is not None):
            usage = record.usage or LLMUsage()  # none included
            if pricing is None:
                return Estimate(usage, Basis.CHECKPOINT)
            # the recorded tokens priced online and batched (cache writes were not recorded)
            listed = pricing.prices.cost(
                usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens
            )
            online = msgspec.structs.replace(usage, cost=listed)
            batch = msgspec.structs.replace(usage, cost=batch_price(listed, pricing.batch_discount))
            return Estimate(usage, Basis.CHECKPOINT, online=online, batch=batch)
        if pricing is None:
            return None
        if chunk is None:
            return Estimate(LLMUsage(), Basis.UNKNOWN)
        calls = self._planned_calls(step, where, chunk.chunk)
        if calls:
            prompt = sum(estimate_tokens(_whole(c)) for c in calls)
            basis = Basis.PROMPT
        else:
            prompt, basis = max(1, math.ceil(chunk.chars / 4)), Basis.CHUNK_SIZE
        usage = LLMUsage(calls=len(calls) or 1, attempts=len(calls) or 1, prompt_tokens=prompt)
        # priced with the prompt cache's hits by `_forecast`, once every request is known
        return Estimate(usage, basis, calls=tuple(calls or ()))

    def _planned_calls(
        self, step: ResolvedStep, where: StageRef, chunk: Chunk
    ) -> list[PlannedCall]:
        """What the module says its extract would send (nothing when it does not say)."""
        planned = getattr(step.module, "planned_calls", None)
        if planned is None:
            return []
        ctx = StageContext(
            step=step.id,
            lane=where.lane,
            params=dict(step.params),
            references=self._references,
            overrides=step.overrides_seen(self._overrides),
        )
        try:
            calls = planned(chunk, ctx)
        except Exception:  # a module's forecast never fails the plan: chunk size then
            return []
        if not isinstance(calls, list) or not all(isinstance(c, PlannedCall) for c in calls):
            return []
        return calls

    # --- prices and the prompt cache, over every request the run would send ----------

    def _forecast(self) -> list[Prediction]:
        """Each estimate priced online and batched, with the prompt-cache hits its
        requests get from the ones sent before them (docs/operations.md "`plan`")."""
        sent = [
            (i, p)
            for i, p in enumerate(self._out)
            if p.estimate is not None
            and p.estimate.basis in (Basis.PROMPT, Basis.CHUNK_SIZE)
            and p.outcome is not Outcome.REUSED
        ]
        priced: dict[int, dict[str, LLMUsage]] = {i: {} for i, _ in sent}
        for mode in ("online", "batch"):
            caches: dict[str, Any] = {}
            batches: dict[str, dict[str, SharedPrefixes]] = {}
            if mode == "batch":  # a batch's requests are known together: all of them
                for _, p in sent:
                    pricing = self._prices[p.where.step]
                    if pricing.cache is CacheKind.MARKED and pricing.batch_discount < 1:
                        for call in p.estimate.calls if p.estimate else ():
                            seen = batches.setdefault(pricing.endpoint, {})
                            seen.setdefault(call.system or "", SharedPrefixes()).add(call.prompt)
            online_marks: dict[str, dict[str, SharedPrefixes]] = {}
            for i, p in sent:
                estimate = p.estimate
                assert estimate is not None
                pricing = self._prices[p.where.step]
                batched = mode == "batch" and pricing.batch_discount < 1
                cached = written = 0
                for call in estimate.calls:
                    if pricing.cache is CacheKind.AUTOMATIC:
                        cache = caches.setdefault(pricing.endpoint, OpenAICache())
                        read, wrote = cache.request(_whole(call))
                    elif pricing.cache is CacheKind.MARKED:
                        cache = caches.setdefault(pricing.endpoint, AnthropicCache())
                        system = call.system or ""
                        if batched:
                            shared = batches[pricing.endpoint][system].shared(call.prompt)
                        else:
                            seen = online_marks.setdefault(pricing.endpoint, {})
                            recent = seen.setdefault(system, SharedPrefixes(RECENT_PROMPTS))
                            shared = recent.remember(call.prompt)
                        read, wrote = cache.request(_marks(call, shared))
                    else:
                        read = wrote = 0
                    cached, written = cached + read, written + wrote
                usage = estimate.usage
                cost = pricing.prices.cost(usage.prompt_tokens, 0, cached, written)
                if batched:
                    cost = batch_price(cost, pricing.batch_discount)
                priced[i][mode] = msgspec.structs.replace(usage, cached_tokens=cached, cost=cost)
        out = list(self._out)
        for i, p in sent:
            estimate = p.estimate
            assert estimate is not None
            pricing = self._prices[p.where.step]
            modes = priced[i]
            run = modes["batch"] if pricing.batched else modes["online"]
            out[i] = msgspec.structs.replace(
                p,
                estimate=msgspec.structs.replace(
                    estimate, usage=run, online=modes["online"], batch=modes["batch"]
                ),
            )
        return out


def _whole(call: PlannedCall) -> str:
    """A call's whole prompt: the system prompt, then the user's."""
    return f"{call.system}\n\n{call.prompt}" if call.system else call.prompt


def _marks(call: PlannedCall, shared: int) -> list[str]:
    """The prefixes the Anthropic provider marks `cache_control` for this call: the
    system prompt, and the part of the user prompt it shares with another
    (adapters/llm/anthropic_transport.py marks the same)."""
    system = call.system or ""
    context = prefix_tokens(len(system)) if system else 0
    cut = marked_prefix(call.prompt, shared, context)
    marks = [system] if system else []
    if cut:
        marks.append(f"{system}\n\n{call.prompt[:cut]}" if system else call.prompt[:cut])
    return marks


def _mode_view(predictions: list[Prediction], mode: str) -> dict[str, Any]:
    """The estimates' usage had every request gone `mode` (online or batch)."""
    return total_usage(p.estimate.by_mode(mode) for p in predictions if p.estimate).view()


def _usage_view(predictions: list[Prediction]) -> dict[str, Any]:
    """Summed estimates, and how many stages each basis estimated."""
    estimates = [p.estimate for p in predictions if p.estimate is not None]
    basis = {b.value: sum(1 for e in estimates if e.basis is b) for b in Basis}
    return {**total_usage(e.usage for e in estimates).view(), "basis": basis}


def _combine(row: list[Prediction], producer: StageRef | None) -> Prediction:
    """One stage predicted under several D values: definite only when they all agree."""
    order = list(ReasonCode)
    possible = tuple(sorted({c for p in row for c in p.possible}, key=order.index))
    first = row[0]
    if len(possible) == 1:
        return first
    waits_on = next((p.waits_on for p in row if p.waits_on is not None), producer)
    return Prediction(
        first.where,
        PredictionCode.UPSTREAM_PENDING,
        Outcome.PENDING,
        possible,
        waits_on=waits_on,
        estimate=next((p.estimate for p in row if p.estimate is not None), None),
        saved=next((p.saved for p in row if p.saved is not None), None),
    )


def _values(current: str | None, recorded: str | None) -> tuple[str, ...]:
    """The digests an unknown output may have: the recorded one, or any other."""
    if current is not None:
        return (current,)
    return (recorded, _DIFFERENT) if recorded is not None else (_DIFFERENT,)


def _result(prediction: Prediction, record: CheckpointRecord | None) -> _Output:
    if prediction.outcome is Outcome.REUSED and record is not None:
        return _Output(record.output_sha256)
    return _Output(None, prediction.where)


def _lanes(
    step: ResolvedStep, pipeline: ResolvedPipeline, chunks: Mapping[str, list[_Chunk]]
) -> list[tuple[str, list[_Chunk], list[str]]]:
    """A corpus step has one lane over every chunk; a document step one lane per source."""
    if step.scope is Scope.CORPUS:
        every = [c for s in pipeline.sources for c in chunks[s.name]]
        return [(CORPUS_LANE, every, [s.sha256 for s in pipeline.sources])]
    return [(s.name, chunks[s.name], [s.sha256]) for s in pipeline.sources]


def _stage_dependencies(
    step: ResolvedStep,
    lane: str,
    known: dict[str, dict[str, _Known]],
    pipeline: ResolvedPipeline,
) -> dict[Stage, _Output]:
    """Each stage's D, when every producer artifact the lane consumes is known before
    execution: over the parts a stage declares it reads, else over every artifact."""
    consumed: dict[str, dict[str, _Known]] = {}
    for producer in step.consumes:
        lanes = known[producer]
        if step.scope is Scope.CORPUS:
            names = list(lanes)
        elif CORPUS_LANE in lanes and len(lanes) == 1 and lane not in lanes:
            names = [CORPUS_LANE]
        else:
            names = [lane] if lane in lanes else []
        consumed[producer] = {name: lanes[name] for name in names}
    refs: list[ArtifactRef] = []
    for lanes in consumed.values():
        for item in lanes.values():
            if item.fingerprint is None:
                return dict.fromkeys(Stage, _Output(None, item.producer))
            refs.append(item.fingerprint)
    lane_d = _Output(dependencies_digest(refs))
    if not declares_reads(step.module):
        return dict.fromkeys(Stage, lane_d)
    ctx = StageContext(
        step=step.id,
        lane=lane,
        params=dict(step.params),
        references=dict(pipeline.references),
        consumed={p: {ln: k.value() for ln, k in lanes.items()} for p, lanes in consumed.items()},
        overrides=step.overrides_seen(pipeline.overrides),
    )
    out: dict[Stage, _Output] = {}
    for stage in Stage:
        try:
            out[stage] = _Output(stage_reads(step.module, stage, ctx, refs).digest)
        except Exception:  # the run fails this stage: predict it from the whole artifacts
            out[stage] = lane_d
    return out
