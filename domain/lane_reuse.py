"""A fully reused lane journaled as one `LaneReused` summary, and its expansion.

A lane whose every stage decision of a run is a plain reuse (code `reused`, checkpoint
present, nothing differing, not forced, resumed) is journaled as one `LaneReused` event
instead of one `StageDecided` per stage. What varies between those decisions is only each
stage's position and current digests (`ReusedStage`: stage, chunk, input, D); everything
else is the same for every plain reuse (`reused_fields`). A reused checkpoint that cost LLM
calls adds its `LLMUsageReused` after its decision (`ReusedUsage`: stage, chunk, usage).
The summary names the run that journaled the same items explicitly (`source_run`), their
count and digest, so the projections expand it from events the journal already holds,
and the expansion is checked against the digest (docs/internals.md "Reuse summaries").

Pure: no I/O. The journal adapter reads the source run's events and feeds them in.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from runjournal.domain.decisions import CheckpointState, Stage, StageFacts, recorded_differences
from runjournal.domain.events import (
    ArtifactGenerated,
    LaneReused,
    LLMCallAttempted,
    LLMUsageReused,
    RunEvent,
    StageDecided,
)
from runjournal.domain.llm import LLMUsage
from runjournal.domain.reasons import ReasonCode, category_of, detail_for

# Summaries pay off from two decisions on (one summary is about the size of one decision).
MIN_SUMMARIZED = 2

_encoder = msgspec.msgpack.Encoder()


class LaneReuseMismatch(Exception):
    """A summary's expansion does not match its count or digest (or has no source)."""


class ReusedStage(msgspec.Struct, frozen=True, array_like=True):
    """What one plain reuse decision of a lane holds that the others do not."""

    stage: Stage
    chunk: str
    input: str
    dependencies: str

    @classmethod
    def of_event(cls, event: StageDecided) -> ReusedStage:
        return cls(event.stage, event.chunk, event.input, event.dependencies)

    @classmethod
    def of_facts(cls, chunk: str, facts: StageFacts) -> ReusedStage:
        return cls(facts.stage, chunk, facts.current.input, facts.current.dependencies)


class ReusedUsage(msgspec.Struct, frozen=True, array_like=True):
    """What a reused checkpoint's LLM usage event (`LLMUsageReused`, no request digest:
    the checkpoint's recorded cost) holds; it follows its stage's decision."""

    stage: Stage
    chunk: str
    usage: LLMUsage

    @classmethod
    def of_event(cls, event: LLMUsageReused) -> ReusedUsage:
        return cls(event.stage, event.chunk, event.usage)


Reused = ReusedStage | ReusedUsage
"""One event a summary stands for: a plain reuse decision, or its reused LLM usage."""

_POISON = b"\xc1"  # never valid msgpack: what no summary's item encodes to


def item_of(event: RunEvent) -> Reused | None:
    """The summary item of a lane's event, None for an event no summary stands for."""
    if type(event) is StageDecided:
        return ReusedStage.of_event(event)
    if type(event) is LLMUsageReused and event.request_sha256 is None:
        return ReusedUsage.of_event(event)
    return None


def plain_reuse(facts: StageFacts, code: ReasonCode, cause: Any = None) -> bool:
    """Whether a decision is a plain reuse, the only kind a summary stands for."""
    return (
        code is ReasonCode.REUSED
        and cause is None
        and not facts.forced
        and facts.resumed
        and not facts.failed
        and facts.predecessor is None
        and facts.checkpoint is CheckpointState.PRESENT
        and not recorded_differences(facts)
    )


def plain_reuse_event(event: StageDecided) -> bool:
    """`plain_reuse` of a recorded decision."""
    return (
        event.code is ReasonCode.REUSED
        and event.cause is None
        and not event.forced
        and event.resumed
        and not event.failed
        and event.predecessor is None
        and event.checkpoint is CheckpointState.PRESENT
        and not event.recorded
    )


def journaled_as_reuse(event: StageDecided) -> bool:
    """Whether a decision is exactly what `reused_fields` journals for its item: a plain
    reuse with the category and detail every plain reuse carries (what a summary's
    expansion gives, `expand`)."""
    plain = _plain_fields()
    return (
        plain_reuse_event(event)
        and event.category == plain["category"]
        and event.detail == plain["detail"]
    )


def reuse_digest(stages: Iterable[Reused | None]) -> str:
    """sha256 over the canonical msgpack of each item, in journal order (an event no
    summary stands for, None, poisons it)."""
    h = hashlib.sha256()
    encode = _encoder.encode
    for stage in stages:
        h.update(_POISON if stage is None else encode(stage))
    return h.hexdigest()


def origin_of(summary: RunEvent) -> dict[str, Any]:
    """The origin (id, version, time) a summary's events carry: its own."""
    return {
        "originator_id": summary.originator_id,
        "originator_version": summary.originator_version,
        "timestamp": summary.timestamp,
    }


def reused_fields(step: str, lane: str, stage: ReusedStage) -> dict[str, Any]:
    """The fields of the `StageDecided` a plain reuse of `stage` records (as
    `StageDecided.fields` builds them from the facts)."""
    return {
        "step": step,
        "lane": lane,
        "stage": stage.stage,
        "chunk": stage.chunk,
        **_plain_fields(),
        "input": stage.input,
        "dependencies": stage.dependencies,
        "recorded": {},
    }


@functools.cache
def _plain_fields() -> dict[str, Any]:
    """What every plain reuse decision records alike (read-only: copied into each)."""
    code = ReasonCode.REUSED
    return {
        "code": code,
        "category": category_of(code),
        "detail": detail_for(code),
        "forced": False,
        "resumed": True,
        "failed": False,
        "checkpoint": CheckpointState.PRESENT,
        "predecessor": None,
    }


def expand(summary: LaneReused, stages: list[Reused | None]) -> list[RunEvent]:
    """The events a summary stands for, each with the summary's origin and time: a
    `StageDecided` per `ReusedStage`, an `LLMUsageReused` per `ReusedUsage`.

    `stages` are the source run's items of the lane; a count or digest that does not
    match is `LaneReuseMismatch` (the source was changed, or is another run's).
    """
    if len(stages) != summary.count or None in stages or reuse_digest(stages) != summary.digest:
        raise LaneReuseMismatch(
            f"the reuse summary of step {summary.step!r} lane {summary.lane!r} "
            f"(event {summary.originator_version}) does not match the "
            f"{len(stages)} decision(s) of run {summary.source_run!r}"
        )
    origin = origin_of(summary)
    step, lane = summary.step, summary.lane
    events = ReusedEvents(origin)
    out: list[RunEvent] = []
    for s in stages:
        if type(s) is ReusedStage:
            out.append(events.decision(step, lane, s))
        else:
            assert isinstance(s, ReusedUsage)
            out.append(events.usage(step, lane, s))
    return out


def usage_event(origin: dict[str, Any], step: str, lane: str, item: ReusedUsage) -> LLMUsageReused:
    return LLMUsageReused(
        **origin, step=step, lane=lane, stage=item.stage, chunk=item.chunk, usage=item.usage
    )


_replace = msgspec.structs.replace


class ReusedEvents:
    """The events of plain reuses under one origin (a summary's id, version and time), as
    `StageDecided(**origin, **reused_fields(...))` and `usage_event` build them, each
    made from the first of its type by `msgspec.structs.replace` of the fields that vary
    (step, lane, stage, chunk, input and D; or the usage's): about a tenth of the cpu of
    building each from keyword arguments (issue 29: a no-op resume expands every decision
    of its block summaries; docs/performance.md "A corpus at scale: the packed store and
    what a no-op resume costs (issue 29)")."""

    __slots__ = ("_decision", "_origin", "_usage")

    def __init__(self, origin: dict[str, Any]) -> None:
        self._origin = origin
        self._decision: StageDecided | None = None
        self._usage: LLMUsageReused | None = None

    def decision(self, step: str, lane: str, item: ReusedStage) -> StageDecided:
        first = self._decision
        if first is None:
            first = self._decision = StageDecided(**self._origin, **reused_fields(step, lane, item))
            return first
        return _replace(
            first,
            step=step,
            lane=lane,
            stage=item.stage,
            chunk=item.chunk,
            input=item.input,
            dependencies=item.dependencies,
            recorded={},  # each event its own (as `reused_fields` gives it)
        )

    def usage(self, step: str, lane: str, item: ReusedUsage) -> LLMUsageReused:
        first = self._usage
        if first is None:
            first = self._usage = usage_event(self._origin, step, lane, item)
            return first
        return _replace(
            first, step=step, lane=lane, stage=item.stage, chunk=item.chunk, usage=item.usage
        )


class SourceLane(msgspec.Struct, frozen=True):
    """Where a lane's plain-reuse decisions are journaled explicitly, and their digest."""

    run_id: str
    digest: str
    count: int


class LaneItems:
    """One lane's events a summary stands for, as a later plain reuse of the lane journals
    them: its decisions and reused LLM usage in journal order and, for each stage the run
    executed with LLM calls, the usage its checkpoint records (`LLMUsage.of` the stage's
    `LLMCallAttempted`) right after its decision. So the run that executed a lane of LLM
    stages is what its first no-op resume's summary names (docs/internals.md "Reuse
    summaries"); whether the usage is really the same is what the digest checks."""

    __slots__ = ("_attempts", "_events")

    def __init__(self) -> None:
        self._events: list[RunEvent] = []
        self._attempts: dict[tuple[Stage, str], list[LLMCallAttempted]] = {}

    def add(self, event: RunEvent) -> None:
        """A `StageDecided`, `LLMUsageReused` or `LLMCallAttempted` of the lane."""
        if type(event) is LLMCallAttempted:
            self._attempts.setdefault((event.stage, event.chunk), []).append(event)
        else:
            self._events.append(event)

    def __bool__(self) -> bool:
        return bool(self._events or self._attempts)

    def take(self) -> list[tuple[Reused | None, RunEvent | None]]:
        """The items added so far with their events (a usage made of attempts is a new
        `LLMUsageReused` with its decision's origin), and forget them. Attempts of no
        decision taken here are a None item, which no summary stands for."""
        out: list[tuple[Reused | None, RunEvent | None]] = []
        attempts = self._attempts
        for event in self._events:
            out.append((item_of(event), event))
            if attempts and type(event) is StageDecided:
                spent = attempts.pop((event.stage, event.chunk), None)
                if spent:
                    usage = LLMUsageReused(
                        originator_id=event.originator_id,
                        originator_version=event.originator_version,
                        timestamp=event.timestamp,
                        step=event.step,
                        lane=event.lane,
                        stage=event.stage,
                        chunk=event.chunk,
                        usage=LLMUsage.of(spent),
                    )
                    out.append((ReusedUsage.of_event(usage), usage))
        out.extend((None, None) for _ in attempts)
        self._events, self._attempts = [], {}
        return out


_LANE_ITEM_EVENTS = (StageDecided, LLMUsageReused, LLMCallAttempted)

Taken = list[tuple[Reused | None, RunEvent | None]]


def _lanes_items(
    events: Iterable[RunEvent],
) -> Iterator[tuple[tuple[str, str], Taken | LaneReused]]:
    """A run's lanes as (step, lane) and their `LaneItems` taken at each artifact (and at
    the end, for a lane without one), or a `LaneReused` as it comes."""
    open_items: dict[tuple[str, str], LaneItems] = {}
    for event in events:
        kind = type(event)
        if kind in _LANE_ITEM_EVENTS:
            key = (event.step, event.lane)  # type: ignore[attr-defined]
            items = open_items.get(key)
            if items is None:
                items = open_items[key] = LaneItems()
            items.add(event)
        elif kind is ArtifactGenerated:
            assert isinstance(event, ArtifactGenerated)
            key = (event.step, event.lane)
            if key in open_items:
                yield key, open_items.pop(key).take()
        elif kind is LaneReused:
            assert isinstance(event, LaneReused)
            yield (event.step, event.lane), event
    for key, items in open_items.items():
        yield key, items.take()


def source_lanes(run_id: str, events: Iterable[RunEvent]) -> dict[tuple[str, str], SourceLane]:
    """Each lane of one run, as a later run's summary would name it.

    A lane journaled explicitly is its own source (the digest of its `LaneItems`: its
    decisions and their reused or spent LLM usage, whatever they were: a later run can only
    match it when they are the same stages with the same digests and usage); a summarized
    lane passes its own source on, so a summary always names a run whose decisions are
    explicit and expansion never chains.
    """
    digests: dict[tuple[str, str], Any] = {}
    counts: dict[tuple[str, str], int] = {}
    summarized: dict[tuple[str, str], SourceLane] = {}
    encode = _encoder.encode
    for key, taken in _lanes_items(events):
        if isinstance(taken, LaneReused):
            summarized[key] = SourceLane(taken.source_run, taken.digest, taken.count)
            continue
        h = digests.get(key)
        if h is None:
            h = digests[key] = hashlib.sha256()
        for item, _event in taken:
            h.update(encode(item) if item is not None else _POISON)
        counts[key] = counts.get(key, 0) + len(taken)
    out = {key: SourceLane(run_id, h.hexdigest(), counts[key]) for key, h in digests.items()}
    out.update(summarized)
    return out


def lane_decisions(events: Iterable[RunEvent]) -> Iterator[tuple[tuple[str, str], Reused | None]]:
    """A run's explicit decisions and their reused or spent LLM usage (`LaneItems`) as
    (step, lane) and item, each lane's at its artifact (None: an item no summary stands
    for)."""
    for key, taken in _lanes_items(events):
        if not isinstance(taken, LaneReused):
            for item, _event in taken:
                yield key, item
