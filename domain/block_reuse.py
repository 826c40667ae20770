"""Block summaries: consecutive units of a run that equal an earlier run's, as one event.

A no-op resume journals, besides its decisions (already one `LaneReused` per lane,
domain/lane_reuse.py), a handful of events per lane and per source that equal the earlier
run's: `LaneResolved`, `ArtifactGenerated`, `OutputWritten`, `ChunkPlanResolved`, and the
run's `InputsFingerprinted`. A **unit** is one of those (a lane: its `LaneResolved`, its
plain reuse decisions with their reused LLM usage, its `ArtifactGenerated`); a run's
**stream** of a kind (and, for lanes, a step) is its units in journal order, numbered
from 0. An `EventsReused` stands for units `first` .. `first + units - 1` of the named
run's stream, equal to this run's but for their origin (docs/internals.md "Block
summaries").

Positions and digests are those of the source's stored events with its `LaneReused`
counted as the decisions it stands for (never its `EventsReused`: a block always names a
run where the units are journaled, so expansion never chains).

Pure: no I/O. The journal adapter reads the runs and feeds their events in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgspec
from runjournal.domain.events import (
    ArtifactGenerated,
    BlockKind,
    ChunkPlanResolved,
    EventsReused,
    InputsFingerprinted,
    LaneResolved,
    LaneReused,
    LLMCallAttempted,
    LLMUsageReused,
    OutputWritten,
    PlanOutcome,
    RunEvent,
    StageDecided,
)
from runjournal.domain.lane_reuse import (
    LaneItems,
    Reused,
    ReusedEvents,
    ReusedStage,
    ReusedUsage,
    item_of,
    journaled_as_reuse,
    origin_of,
    reuse_digest,
)

_encoder = msgspec.msgpack.Encoder()

Stream = tuple[BlockKind, str]
"""A stream: its kind and, for lanes, the step ("" otherwise)."""

# the event types each kind's expansion holds (the `Run` aggregate accepts these, and
# only these, under a block's version)
EXPANDED: dict[BlockKind, tuple[type[RunEvent], ...]] = {
    BlockKind.INPUTS: (InputsFingerprinted,),
    BlockKind.PLANS: (ChunkPlanResolved,),
    BlockKind.LANES: (LaneResolved, StageDecided, LLMUsageReused, ArtifactGenerated),
    BlockKind.OUTPUTS: (OutputWritten,),
}
_SINGLE: dict[type[RunEvent], BlockKind] = {
    InputsFingerprinted: BlockKind.INPUTS,
    ChunkPlanResolved: BlockKind.PLANS,
    OutputWritten: BlockKind.OUTPUTS,
}
# a block's fewest units: fewer are journaled as they are (a summary is about 200 bytes,
# a lane's own events more, a plan or an output file about 100)
MIN_UNITS: dict[BlockKind, int] = {
    BlockKind.INPUTS: 1,
    BlockKind.PLANS: 2,
    BlockKind.LANES: 1,
    BlockKind.OUTPUTS: 2,
}
MAX_UNITS = 512
"""At most this many units in one block: a recorder holds a block's units until it is
recorded (memory, and the live views' lag)."""


class BlockMismatch(Exception):
    """A block's expansion does not match its units, count or digest (or has no source)."""


def content(event: RunEvent) -> bytes:
    """The canonical bytes of an event but for its origin (id, version, time)."""
    return _encoder.encode((type(event).__name__, msgspec.structs.astuple(event)[3:]))


def lane_digest(resolved: bytes, items: int, items_digest: str, artifact: bytes) -> str:
    """A lane unit's digest: its `LaneResolved`, its decisions' count and `reuse_digest`
    (what a `LaneReused` carries), its `ArtifactGenerated`."""
    h = hashlib.sha256(resolved)
    h.update(b"%d:%s" % (items, items_digest.encode()))
    h.update(artifact)
    return h.hexdigest()


def single_digest(event: RunEvent) -> str:
    return hashlib.sha256(content(event)).hexdigest()


def block_digest(unit_digests: Iterable[str]) -> str:
    """sha256 over the units' digests, in order."""
    h = hashlib.sha256()
    for digest in unit_digests:
        h.update(digest.encode())
    return h.hexdigest()


class LaneUnit:
    """A fully reused lane as a recorder holds it for a block: its `LaneResolved` and
    `ArtifactGenerated` (drafts, origin not yet given) and its plain reuse items. Its
    digest is computed here, once, from exactly what `events` builds the lane's events
    from, so equal digests are equal expansions (docs/internals.md "Block summaries",
    "A summary applied as a count")."""

    __slots__ = ("_built", "artifact", "count", "digest", "lane", "resolved", "stages", "step")

    def __init__(
        self, resolved: LaneResolved, stages: Sequence[Reused], artifact: ArtifactGenerated
    ) -> None:
        if (artifact.step, artifact.lane) != (resolved.step, resolved.lane):
            raise ValueError(
                f"lane {resolved.step}/{resolved.lane}: its artifact is of "
                f"{artifact.step}/{artifact.lane}"
            )
        self.step, self.lane = resolved.step, resolved.lane
        self.resolved, self.stages, self.artifact = resolved, tuple(stages), artifact
        self.count = len(self.stages) + 2
        self.digest = lane_digest(
            content(resolved), len(self.stages), reuse_digest(self.stages), content(artifact)
        )
        self._built: tuple[dict[str, Any], list[RunEvent]] | None = None

    def events(self, origin: dict[str, Any], reused: ReusedEvents) -> list[RunEvent]:
        """Its `LaneResolved`, each item as its lane journals it, its artifact: as a
        reader expands the unit (`reoriginated`), under `origin`. Built once per origin:
        the aggregate's call builds them, the committed fold's gets the same (frozen)
        events, not a copy a caller could have changed."""
        built = self._built
        if built is not None and built[0] == origin:
            return built[1]
        replace = msgspec.structs.replace
        step, lane = self.step, self.lane
        out: list[RunEvent] = [replace(self.resolved, **origin)]
        decision, usage = reused.decision, reused.usage
        for item in self.stages:
            if type(item) is ReusedStage:
                out.append(decision(step, lane, item))
            else:
                out.append(usage(step, lane, item))  # type: ignore[arg-type]
        out.append(replace(self.artifact, **origin))
        self._built = (origin, out)
        return out


class SingleUnit:
    """A unit of one event (`InputsFingerprinted`, `ChunkPlanResolved`, `OutputWritten`)
    held for a block, with its digest computed once from it."""

    __slots__ = ("_built", "count", "digest", "event")

    def __init__(self, event: RunEvent) -> None:
        self.event, self.count, self.digest = event, 1, single_digest(event)
        self._built: tuple[dict[str, Any], list[RunEvent]] | None = None

    def events(self, origin: dict[str, Any], reused: ReusedEvents) -> list[RunEvent]:
        """Its event under `origin`, built once per origin (as `LaneUnit.events`)."""
        built = self._built
        if built is not None and built[0] == origin:
            return built[1]
        out: list[RunEvent] = [msgspec.structs.replace(self.event, **origin)]
        self._built = (origin, out)
        return out


BlockUnit = LaneUnit | SingleUnit


def units_fit(kind: BlockKind, step: str, units: Sequence[BlockUnit]) -> str | None:
    """Why `units` cannot be one block of `kind` (and, for lanes, `step`), or None: each
    a whole lane of the step, or one event of the kind's type. O(units): a lane unit's
    decisions are built for its own lane between its `LaneResolved` and its artifact."""
    if not units:
        return "a block of no units"
    if kind is BlockKind.LANES:
        for unit in units:
            if type(unit) is not LaneUnit or unit.step != step:
                return f"a block of lanes of step {step!r} holds another unit"
        return None
    allowed = EXPANDED[kind]
    for unit in units:
        if type(unit) is not SingleUnit or type(unit.event) not in allowed:
            return f"a block of {kind} holds another unit"
    return None


def units_events(units: Iterable[BlockUnit], origin: dict[str, Any]) -> list[RunEvent]:
    """The events a block of `units` stands for, under the block's `origin`, in order."""
    reused = ReusedEvents(origin)
    out: list[RunEvent] = []
    for unit in units:
        out.extend(unit.events(origin, reused))
    return out


def units_match(summary: EventsReused, units: Sequence[BlockUnit]) -> bool:
    """Whether `units`, as a recorder held them for `summary`, are what it stands for:
    a block of its kind and step, as many events as its `count`, `block_digest` of their
    digests (each computed from what the unit expands from) equal to its own. O(units):
    what `expansion_matches` proves of the expanded events, taken from the units the
    events are built from (docs/internals.md "A summary applied as a count")."""
    return (
        len(units) == summary.units
        and units_fit(summary.kind, summary.step, units) is None
        and sum(unit.count for unit in units) == summary.count
        and block_digest(unit.digest for unit in units) == summary.digest
    )


class Unit(msgspec.Struct):
    """One unit of a run's stream: its position, key (the lane, source or file name), its
    digest (None: not a whole unit, which no block can stand for), and, when kept, its
    events."""

    stream: Stream
    position: int
    key: str
    digest: str | None
    events: list[RunEvent] | None = None


class _OpenLane:
    __slots__ = (
        "broken",
        "count",
        "events",
        "items",
        "pending",
        "position",
        "resolved",
        "summary",
        "version",
    )

    def __init__(self, position: int, resolved: LaneResolved, keep: bool) -> None:
        self.position = position
        self.resolved = content(resolved)
        self.pending = LaneItems()  # its decisions, usage and attempts, taken at its artifact
        self.items: list[Any] = []
        self.count = 0
        self.summary: tuple[int, str] | None = None
        self.version = -1  # the summary's version, which its expanded decisions carry
        self.events: list[RunEvent] | None = [resolved] if keep else None
        self.broken = False

    def settle(self) -> None:
        """The pending items (decisions with their reused or spent usage) into the lane."""
        for item, event in self.pending.take():
            self.items.append(item)
            self.count += 1
            if self.events is not None and event is not None:
                self.events.append(event)


def units(events: Iterable[RunEvent], *, keep: bool = False) -> Iterator[Unit]:
    """A run's units, each when it is complete (a lane at its `ArtifactGenerated`).

    `events` are a run's stored events, with or without its `LaneReused` expanded (a
    summary counts as its decisions either way); its `EventsReused` (and the events
    expanded from them) are not units of this run. A lane's stages executed with LLM calls
    count their attempts as the reused usage a later resume journals (`LaneItems`). `keep`
    keeps each unit's events (the decisions of a `LaneReused` only when they were
    expanded)."""
    counters: dict[Stream, int] = {}
    open_lanes: dict[tuple[str, str], _OpenLane] = {}
    block_version = -1
    for event in events:
        kind = type(event)
        if kind is EventsReused:
            block_version = event.originator_version
            continue
        if event.originator_version == block_version:
            continue  # expanded from a block: that block's source's units
        single = _SINGLE.get(kind)
        if single is not None:
            stream = (single, "")
            position = counters.get(stream, 0)
            counters[stream] = position + 1
            if kind is ChunkPlanResolved:
                event = as_reused_plan(event)  # type: ignore[arg-type]
            key = event.source if kind is ChunkPlanResolved else getattr(event, "name", "")  # type: ignore[attr-defined]
            yield Unit(stream, position, key, single_digest(event), [event] if keep else None)
        elif kind is LaneResolved:
            assert isinstance(event, LaneResolved)
            stream = (BlockKind.LANES, event.step)
            position = counters.get(stream, 0)
            counters[stream] = position + 1
            lane_key = (event.step, event.lane)
            earlier = open_lanes.pop(lane_key, None)
            if earlier is not None:  # a lane resolved again before its artifact
                yield Unit(stream, earlier.position, event.lane, None)
            open_lanes[lane_key] = _OpenLane(position, event, keep)
        elif (
            kind is StageDecided
            or kind is LLMUsageReused
            or kind is LaneReused
            or kind is LLMCallAttempted
        ):
            lane = open_lanes.get((event.step, event.lane))  # type: ignore[attr-defined]
            if lane is None:
                continue
            if kind is LaneReused:
                assert isinstance(event, LaneReused)
                if lane.summary is not None or lane.pending:
                    lane.broken = True
                lane.summary = (event.count, event.digest)
                lane.version = event.originator_version
                continue
            if lane.summary is not None and (
                kind is LLMCallAttempted or event.originator_version != lane.version
            ):
                lane.broken = True  # a lane journaled in pieces, or executed after all
            lane.pending.add(event)
        elif kind is ArtifactGenerated:
            assert isinstance(event, ArtifactGenerated)
            lane = open_lanes.pop((event.step, event.lane), None)
            if lane is None:
                continue
            lane.settle()
            stream = (BlockKind.LANES, event.step)
            if lane.events is not None:
                lane.events.append(event)
            yield Unit(stream, lane.position, event.lane, _close(lane, event), lane.events)
    for (step, lane_name), lane in open_lanes.items():
        yield Unit((BlockKind.LANES, step), lane.position, lane_name, None)


_REUSED_PLAN = [PlanOutcome.REUSED]


def as_reused_plan(event: ChunkPlanResolved) -> ChunkPlanResolved:
    """A source's plan unit as a later run that finds the plan journals it: outcomes
    `[reused]`, whatever the run that made it did (`[computed, published]` in a cold run).
    A block of plans then stands for exactly the events the run that records it held, as
    a block of lanes stands for plain reuse decisions, and the first resume after a cold
    run journals its plans as blocks too (docs/internals.md "Block summaries")."""
    if event.outcomes == _REUSED_PLAN:
        return event
    return msgspec.structs.replace(event, outcomes=list(_REUSED_PLAN))


def _close(lane: _OpenLane, artifact: ArtifactGenerated) -> str | None:
    if lane.broken:
        return None
    if lane.summary is not None:
        if not lane.count:
            count, digest = lane.summary
        else:  # the summary's decisions were expanded
            count, digest = lane.count, reuse_digest(lane.items)
            if (count, digest) != lane.summary:
                return None
    else:
        count, digest = lane.count, reuse_digest(lane.items)
    return lane_digest(lane.resolved, count, digest, content(artifact))


def expand(summary: EventsReused, source_units: list[Unit]) -> list[RunEvent]:
    """The events a block stands for, each with the block's origin and time.

    `source_units` are the source's units `first` .. `first + units - 1` of the block's
    stream, with their events; a position, count or digest that does not match is
    `BlockMismatch`."""
    stream = (summary.kind, summary.step)
    positions = [u.position for u in source_units]
    if (
        positions != list(range(summary.first, summary.first + summary.units))
        or any(u.stream != stream or u.digest is None or u.events is None for u in source_units)
        or block_digest(u.digest for u in source_units) != summary.digest  # type: ignore[misc]
    ):
        raise BlockMismatch(
            f"the block summary of {summary.kind} {summary.step!r} (event "
            f"{summary.originator_version}) does not match units {summary.first} to "
            f"{summary.first + summary.units - 1} of run {summary.source_run!r}"
        )
    origin = origin_of(summary)
    out: list[RunEvent] = []
    events = ReusedEvents(origin)
    for unit in source_units:
        for event in unit.events or ():
            out.append(reoriginated(event, origin, events))
    if len(out) != summary.count:
        raise BlockMismatch(
            f"the block summary of {summary.kind} {summary.step!r} (event "
            f"{summary.originator_version}) stands for {summary.count} events, run "
            f"{summary.source_run!r} has {len(out)}"
        )
    return out


def reoriginated(
    event: RunEvent, origin: dict[str, Any], events: ReusedEvents | None = None
) -> RunEvent:
    """`event` as this run journals it under a block: a decision as a plain reuse (its
    stage, chunk, input and D), its reused usage, any other event as it is; all with the
    block's origin (`events`: the builder of that origin's reuses, `ReusedEvents`)."""
    kind = type(event)
    if kind is StageDecided or kind is LLMUsageReused:
        if events is None:
            events = ReusedEvents(origin)
        if kind is StageDecided:
            assert isinstance(event, StageDecided)
            return events.decision(event.step, event.lane, ReusedStage.of_event(event))
        assert isinstance(event, LLMUsageReused)
        return events.usage(event.step, event.lane, ReusedUsage.of_event(event))
    return msgspec.structs.replace(event, **origin)


def expansion_matches(summary: RunEvent, events: Sequence[RunEvent]) -> bool:
    """Whether `events`, as a recorder applied them for the reuse summary `summary` (an
    `EventsReused` or a `LaneReused`), are the events a reader expands it into from the
    run it names, when that run's units have the summary's digest (which every reader
    checks, docs/internals.md "Block summaries").

    Checked from the events themselves: their count and origin (the summary's version),
    every decision exactly as a plain reuse is journaled, and their digest: a
    `LaneReused`'s `reuse_digest` of its lane's items, an `EventsReused`'s `block_digest`
    of the units they form (`units`), which must be `units` whole units of its stream.
    What a reader expands is a function of what these digests cover, so equal digests are
    equal expansions."""
    version = summary.originator_version
    if len(events) != summary.count:  # type: ignore[attr-defined]
        return False
    for event in events:
        if event.originator_version != version:
            return False
        if type(event) is StageDecided and not journaled_as_reuse(event):
            return False
    kind = type(summary)
    if kind is LaneReused:
        assert isinstance(summary, LaneReused)
        lane = (summary.step, summary.lane)
        items = []
        for event in events:
            item = item_of(event)
            if item is None or (event.step, event.lane) != lane:  # type: ignore[attr-defined]
                return False
            items.append(item)
        return reuse_digest(items) == summary.digest
    if kind is EventsReused:
        assert isinstance(summary, EventsReused)
        allowed = EXPANDED[summary.kind]
        if any(type(event) not in allowed for event in events):
            return False
        stream = (summary.kind, summary.step)
        found = list(units(events))
        return (
            len(found) == summary.units
            and all(u.stream == stream and u.digest is not None for u in found)
            and block_digest(u.digest for u in found) == summary.digest  # type: ignore[misc]
        )
    return False
