"""What a run references in the cache root, read from its events (for `gc`).

Pure: the journal's events in, the checkpoint keys (with their scopes) and plan keys out
(docs/operations.md "Retention and cleanup"). A run references every checkpoint it wrote
and every one it reused, each under the scope its `LaneResolved` gives, every normalize of
a lane identity it restored under --recompute, the chunk plans it resolved, and the
provider batches its LLM requests went through (their records under `llm/batches/`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any
from uuid import UUID, uuid5

import msgspec
from runjournal.domain.checkpoint_scope import stage_scopes
from runjournal.domain.decisions import REUSE_CODES, Stage
from runjournal.domain.events import (
    BlockKind,
    CacheCollected,
    CheckpointWritten,
    ChunkPlanResolved,
    EventsReused,
    LaneResolved,
    LaneReused,
    LLMBatchSubmitted,
    RunAllocated,
    RunEvent,
    StageDecided,
    Timestamp,
)
from runjournal.domain.identity import dependencies_digest
from runjournal.domain.ports import CheckpointKey, StoreScope
from runjournal.domain.reasons import ReasonCode

CACHE_NAMESPACE = UUID("1f0b6a52-3c1d-5e7a-9b40-6a2d8e9c4f17")

# The event classes `references` reads (the journal is asked for these topics only).
REFERENCE_EVENTS: tuple[type[RunEvent], ...] = (
    RunAllocated,
    LaneResolved,
    StageDecided,
    CheckpointWritten,
    ChunkPlanResolved,
    LaneReused,
    EventsReused,
    LLMBatchSubmitted,
)


class RunReferences(msgspec.Struct, kw_only=True):
    run_id: str
    pipeline: str
    started: Timestamp
    checkpoints: set[CheckpointKey] = msgspec.field(default_factory=set)
    # (step, lane, lane identity) of normalize artifacts restored under --recompute: any
    # stored normalize of that identity may have been the one (whatever its D)
    restored: set[tuple[str, str, str]] = msgspec.field(default_factory=set)
    plans: set[str] = msgspec.field(default_factory=set)
    # the request sets of the provider batches it submitted or followed (batch records)
    batches: set[str] = msgspec.field(default_factory=set)
    # each lane journaled as a reuse summary: (source run, step, lane) and the lane's
    # scopes in this run; it references the positions that run's decisions of the lane
    # reference, under these scopes (`with_summarized`)
    summarized: list[tuple[tuple[str, str, str], dict[Stage, StoreScope]]] = msgspec.field(
        default_factory=list
    )
    # each block summary of lanes or plans: (source run, kind, step, first, units); it
    # references what that run's units `first` .. `first + units - 1` of the step's lanes
    # (or of its plans) reference: the units are equal, scopes included
    blocks: list[tuple[str, BlockKind, str, int, int]] = msgspec.field(default_factory=list)
    # the run's streams as a block numbers them (domain/block_reuse.py `units`): its lanes
    # of each step and its chunk plans, in journal order
    lane_order: dict[str, list[str]] = msgspec.field(default_factory=dict)
    plan_order: list[str] = msgspec.field(default_factory=list)


# Each stage's slot in a lane's block of scope ids (`reference_facts`): a lane's scopes get
# ids `first + STAGE_SLOTS[stage]`, so a lane is held as one id, not a dict of scopes.
STAGE_SLOTS: dict[Stage, int] = {stage: i for i, stage in enumerate(Stage)}
STAGES_BY_SLOT: tuple[Stage, ...] = tuple(Stage)

# What `reference_facts` yields, a tuple starting with one of these tags (docs/performance.md
# "gc, audit and explain at scale": gc keeps them on disk, not as sets of keys):
#   (RUN, owner, run_id, pipeline, started)
#   (SCOPE, scope_id, StoreScope)                     a lane's stage scope, once
#   (KEY, owner, step, lane, stage slot, chunk, scope_id)   a checkpoint it references
#   (RESTORED, owner, step, lane, lane identity)      a normalize restored (--recompute)
#   (PLAN, owner, plan key)                           in journal order (a block's units)
#   (LANE, owner, step, lane)                         in journal order (a block's units)
#   (SUMMARY, owner, source run, step, lane, first scope id)   a lane reuse summary
#   (BLOCK, owner, source run, kind, step, first, units)       a block summary
#   (BATCH, owner, request set)
RUN, SCOPE, KEY, RESTORED, PLAN, LANE, SUMMARY, BLOCK, BATCH = range(9)


def reference_facts(events: Iterable[RunEvent]) -> Iterator[tuple[Any, ...]]:
    """What each run references, as facts in journal order (any interleaving of runs;
    events of a run without its `RunAllocated` are ignored). Holds one entry per lane
    (its first scope id and lane identity) and nothing per checkpoint: the caller keeps
    the facts (`references` in memory, gc on disk)."""
    known: set[UUID] = set()
    lanes: dict[tuple[UUID, str, str], tuple[int, str]] = {}
    next_scope = 0
    names: dict[str, str] = {}  # one copy of each step and lane string
    shared = names.setdefault
    slots = STAGE_SLOTS
    for event in events:
        owner = event.originator_id
        if isinstance(event, RunAllocated):
            known.add(owner)
            yield (RUN, owner, event.run_id, event.pipeline, event.timestamp)
            continue
        if owner not in known:
            continue
        if isinstance(event, LaneResolved):
            own = [dependencies_digest(event.stage_dependencies(stage)) for stage in Stage]
            first = next_scope
            next_scope += len(slots)
            for stage, scope in stage_scopes(event.components, own, event.lane_identity).items():
                yield (SCOPE, first + slots[stage], scope)
            step = shared(event.step, event.step)
            lane = shared(event.lane, event.lane)
            lanes[(owner, step, lane)] = (first, event.lane_identity)
            yield (LANE, owner, step, lane)
        elif isinstance(event, ChunkPlanResolved):
            yield (PLAN, owner, event.plan_key)
        elif isinstance(event, EventsReused):
            if event.kind in (BlockKind.LANES, BlockKind.PLANS):
                yield (BLOCK, owner, event.source_run, event.kind, event.step, event.first,
                       event.units)  # fmt: skip
        elif isinstance(event, LLMBatchSubmitted):
            yield (BATCH, owner, event.request_set)
        elif isinstance(event, LaneReused):
            found = lanes.get((owner, event.step, event.lane))
            if found is not None:
                yield (SUMMARY, owner, event.source_run, event.step, event.lane, found[0])
        elif isinstance(event, StageDecided | CheckpointWritten):
            found = lanes.get((owner, event.step, event.lane))
            if found is None:
                continue
            if isinstance(event, StageDecided):
                if event.code is ReasonCode.PREDECESSOR_REUSED:
                    yield (RESTORED, owner, event.step, event.lane, found[1])
                    continue
                if event.code not in REUSE_CODES:
                    continue
            step, lane = shared(event.step, event.step), shared(event.lane, event.lane)
            slot = slots[event.stage]
            yield (KEY, owner, step, lane, slot, event.chunk, found[0] + slot)


def references(events: Iterable[RunEvent]) -> dict[UUID, RunReferences]:
    """Each run's references, by aggregate id, from its events in order (any interleaving
    of runs; events of a run without its `RunAllocated` are ignored): `reference_facts`
    held in memory (for a few runs; gc keeps them on disk)."""
    runs: dict[UUID, RunReferences] = {}
    scopes: dict[int, StoreScope] = {}
    # runs of one pipeline reference mostly the same checkpoints: every run's set holds
    # the one key object (memory grows with the distinct keys, not with runs x keys)
    canonical: dict[CheckpointKey, CheckpointKey] = {}
    for fact in reference_facts(events):
        tag = fact[0]
        if tag == RUN:
            _, owner, run_id, pipeline, started = fact
            runs[owner] = RunReferences(run_id=run_id, pipeline=pipeline, started=started)
        elif tag == SCOPE:
            scopes[fact[1]] = fact[2]
        elif tag == KEY:
            _, owner, step, lane, slot, chunk, scope_id = fact
            key = _key(step, lane, STAGES_BY_SLOT[slot], chunk, scopes[scope_id])
            runs[owner].checkpoints.add(canonical.setdefault(key, key))
        elif tag == LANE:
            _, owner, step, lane = fact
            runs[owner].lane_order.setdefault(step, []).append(lane)
        elif tag == PLAN:
            runs[fact[1]].plans.add(fact[2])
            runs[fact[1]].plan_order.append(fact[2])
        elif tag == RESTORED:
            runs[fact[1]].restored.add(fact[2:])
        elif tag == BATCH:
            runs[fact[1]].batches.add(fact[2])
        elif tag == BLOCK:
            runs[fact[1]].blocks.append(fact[2:])
        elif tag == SUMMARY:
            _, owner, source, step, lane, first = fact
            lane_scopes = {
                stage: scopes[first + slot]
                for stage, slot in STAGE_SLOTS.items()
                if first + slot in scopes
            }
            runs[owner].summarized.append(((source, step, lane), lane_scopes))
    return runs


def with_summarized(runs: Iterable[RunReferences]) -> None:
    """Give each run the checkpoints of the lanes it journaled as reuse summaries: the
    positions (stage, chunk) the named run's decisions of the lane reference, under this
    run's own scopes of the lane (docs/internals.md "Reuse summaries"). So a kept run keeps
    them whichever runs are dropped, and its start counts for them."""
    by_id = {refs.run_id: refs for refs in runs}
    lanes_of: dict[str, dict[tuple[str, str], list[CheckpointKey]]] = {}  # by source run
    for refs in by_id.values():
        for (source, step, lane), lane_scopes in refs.summarized:
            found = by_id.get(source)
            if found is None:
                continue
            lanes = lanes_of.get(source)
            if lanes is None:
                lanes = lanes_of[source] = {}
                for k in found.checkpoints:
                    lanes.setdefault((k.step, k.lane), []).append(k)
            for k in lanes.get((step, lane), ()):
                refs.checkpoints.add(_key(k.step, k.lane, k.stage, k.chunk, lane_scopes[k.stage]))
    # then the block summaries (docs/internals.md "Block summaries"): a block names a run
    # whose units are journaled there (their checkpoints complete after the loop above),
    # by their positions in its stream: exactly those units' references are kept
    # A source's checkpoints are grouped by lane once: walking all of them for each block
    # (of up to 512 units) was blocks x checkpoints, quadratic in the corpus
    # (docs/performance.md "gc, audit and explain at scale").
    lanes_of.clear()  # (the sources' checkpoints may have grown since it was made)
    by_lane: dict[str, dict[tuple[str, str], list[CheckpointKey]]] = {}
    for refs in by_id.values():
        for source, kind, step, first, units in refs.blocks:
            found = by_id.get(source)
            if found is None:
                continue
            if kind is BlockKind.PLANS:
                refs.plans.update(found.plan_order[first : first + units])
                continue
            lanes = by_lane.get(source)
            if lanes is None:
                lanes = by_lane[source] = {}
                for k in found.checkpoints:
                    lanes.setdefault((k.step, k.lane), []).append(k)
            for lane in found.lane_order.get(step, ())[first : first + units]:
                refs.checkpoints.update(lanes.get((step, lane), ()))


def _key(step: str, lane: str, stage: Stage, chunk: str, scope: StoreScope) -> CheckpointKey:
    return CheckpointKey(step, lane, stage, chunk, scope)


def collection_id(started: Timestamp, token: str) -> str:
    """A collection's id: its UTC start and a random token, like a run id."""
    return f"gc-{started.strftime('%Y%m%dT%H%M%SZ')}-{token}"


def collected(clock: Callable[[], Timestamp], collection: str, **fields: object) -> CacheCollected:
    """The one event of a collection's own aggregate (uuid5 of its id, version 1)."""
    return CacheCollected(
        originator_id=uuid5(CACHE_NAMESPACE, collection),
        originator_version=1,
        timestamp=clock(),
        collection=collection,
        **fields,  # type: ignore[arg-type]
    )
