"""Reuse summaries in the journal: finding what a summary names, and expanding it.

A fully reused lane is journaled as one `LaneReused` naming the earlier run that
journaled the same decisions explicitly (domain/lane_reuse.py; docs/internals.md "Reuse
summaries"). `SourceIndex` answers the recording session which earlier run that is;
`expand_summaries` gives a run's events back with each summary followed by the decisions
it stands for, read from that run's events and checked against the summary's digest.
Both only read the journal through the callables they are handed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence

from runjournal.adapters.journal.journal_errors import JournalCorrupt, JournalError, one_line
from runjournal.domain.block_reuse import BlockMismatch, Stream, Unit, block_digest
from runjournal.domain.block_reuse import expand as block_expand
from runjournal.domain.block_reuse import units as block_units
from runjournal.domain.events import EventsReused, LaneReused, RunEvent
from runjournal.domain.lane_reuse import (
    LaneReuseMismatch,
    Reused,
    SourceLane,
    expand,
    lane_decisions,
    source_lanes,
)

ReadEvents = Callable[[str], Iterable[RunEvent]]
"""A run's stored events in order (`JournalStore.events`)."""

Lane = tuple[str, str]


class SourceIndex:
    """Where the lanes of the recording run were journaled explicitly before.

    `candidates` are earlier runs, newest first; each is read once, when a lane is not
    found in the ones before it, and only its lanes' digests are kept (O(lanes)). A run
    that cannot be read is passed over: the lane is then journaled explicitly.

    Each lane is kept as two small byte strings, for the whole run (issue 29: peak RSS):
    16 bytes of the digest of its step and name, and its decisions' digest (32 bytes),
    count and which source run; not as a key of two strings and a `SourceLane` with a
    hex digest (about 450 bytes a lane against 170). A lane whose digest is not hex, or
    two lanes whose keys collide, are dropped: such a lane is journaled explicitly.
    """

    def __init__(self, read: ReadEvents, candidates: Sequence[str]) -> None:
        self._read = read
        self._candidates = list(candidates)
        self._loaded: list[dict[bytes, bytes]] = []
        self._runs: list[str] = []  # the source runs the entries name, by index

    def find(self, step: str, lane: str) -> SourceLane | None:
        key = _lane_key(step, lane)
        for lanes in self._loaded:
            entry = lanes.get(key)
            if entry is not None:
                return self._lane(entry)
        while self._candidates:
            run_id = self._candidates.pop(0)
            try:
                lanes = self._packed(source_lanes(run_id, self._read(run_id)))
            except JournalError:
                continue
            self._loaded.append(lanes)
            entry = lanes.get(key)
            if entry is not None:
                return self._lane(entry)
        return None

    def _packed(self, lanes: dict[Lane, SourceLane]) -> dict[bytes, bytes]:
        index: dict[str, int] = {r: i for i, r in enumerate(self._runs)}
        out: dict[bytes, bytes] = {}
        collided: set[bytes] = set()
        while lanes:  # each lane let go as it is packed
            (step, lane), source = lanes.popitem()
            try:
                digest = bytes.fromhex(source.digest)
            except ValueError:
                continue
            if len(digest) != 32 or not 0 <= source.count < 1 << 48:
                continue
            run = index.get(source.run_id)
            if run is None:
                run = index[source.run_id] = len(self._runs)
                self._runs.append(source.run_id)
            key = _lane_key(step, lane)
            if key in out:
                collided.add(key)
            out[key] = digest + source.count.to_bytes(6, "big") + run.to_bytes(4, "big")
        for key in collided:
            del out[key]
        return out

    def _lane(self, entry: bytes) -> SourceLane:
        run = int.from_bytes(entry[38:], "big")
        return SourceLane(self._runs[run], entry[:32].hex(), int.from_bytes(entry[32:38], "big"))


def _lane_key(step: str, lane: str) -> bytes:
    """16 bytes naming a lane in `SourceIndex` (step and lane names can be long)."""
    return hashlib.sha256(f"{step}\x00{lane}".encode("utf-8", "surrogatepass")).digest()[:16]


class _Source:
    """One source run's explicit decisions, read once and in order, lane by lane.

    A summary's lanes come in the source's own plan order, so a lane is usually the next
    one read and only it is held; lanes passed over are kept until asked for.
    """

    def __init__(self, decisions: Iterator[tuple[Lane, Reused | None]]) -> None:
        self._decisions = decisions
        self._held: dict[Lane, list[Reused | None]] = {}
        self._done = False

    def take(self, key: Lane, *, to_end: bool = False) -> list[Reused | None]:
        if key in self._held and not to_end:
            return self._held.pop(key)
        started = key in self._held
        for lane, stage in self._decisions:
            if lane != key and started and not to_end:
                self._held.setdefault(lane, []).append(stage)
                return self._held.pop(key)
            started = started or lane == key
            self._held.setdefault(lane, []).append(stage)
        self._done = True
        return self._held.pop(key, [])

    def give_back(self, key: Lane, stages: list[Reused | None]) -> None:
        self._held[key] = stages + self._held.get(key, [])


def expand_summaries(events: Iterable[RunEvent], read: ReadEvents) -> Iterator[RunEvent]:
    """`events` with each `LaneReused` followed by the `StageDecided` it stands for.

    A source run that is not in the journal, or whose decisions do not match the
    summary's count and digest, is `JournalCorrupt` naming the summary.
    """
    sources: dict[str, _Source] = {}
    for event in events:
        yield event
        if type(event) is not LaneReused:
            continue
        source = sources.get(event.source_run)
        if source is None:
            source = sources[event.source_run] = _Source(lane_decisions(read(event.source_run)))
        key = (event.step, event.lane)
        stages = source.take(key)
        if len(stages) != event.count:  # a lane journaled in pieces: every decision of it
            source.give_back(key, stages)
            stages = source.take(key, to_end=True)
        try:
            yield from expand(event, stages)
        except LaneReuseMismatch as exc:
            why = "is not in this journal" if not stages else "does not match"
            raise JournalCorrupt(
                one_line(f"{exc} (the source run {event.source_run!r} {why})")
            ) from None


# --- block summaries (domain/block_reuse.py; docs/internals.md "Block summaries") ------


class BlockIndex:
    """Where the units of the recording run were journaled before: the newest earlier run
    of the pipeline, read once when first asked, and, for the units that run journaled as
    block summaries, the runs those name (so a block never names a block). Holds one
    24-byte entry per unit (16 bytes of its digest, its position, which run): what a unit
    is matched by before a block is recorded (expansion checks the whole block digest)."""

    def __init__(self, read: ReadEvents, candidate: str | None) -> None:
        self._read = read
        self._candidate = candidate
        self._runs: list[str] = []
        self._units: dict[Stream, dict[str, bytes]] | None = None
        # the candidate's own units and its blocks by source run (read once), and the
        # candidate's blocks of each stream in journal order with how many were repeated
        self._own: dict[Stream, dict[str, bytes]] | None = None
        self._blocks: dict[str, list[EventsReused]] = {}
        self._in_order: dict[Stream, list[EventsReused]] = {}
        self._next: dict[Stream, int | None] = {}
        self._present: dict[str, bool] = {}
        self.sources_read = 0  # source runs read in full (for tests)

    def same_block(self, stream: Stream, digests: Sequence[str]) -> tuple[str, int] | None:
        """(source run, first) when `digests`, the digests of consecutive units of
        `stream`, are those the candidate's next block of that stream stands for: the
        block is repeated as it is, and no source run is read (a no-op resume after a
        no-op resume). The candidate's blocks of a stream are tried in order, and after
        one that does not match, none of that stream again (`find` then decides unit by
        unit)."""
        if self._own is None:
            self._load_candidate()
        at = self._next.get(stream, 0)
        blocks = self._in_order.get(stream, [])
        if at is None or at >= len(blocks):
            return None
        block = blocks[at]
        if (
            block.units != len(digests)
            or block_digest(digests) != block.digest
            or not self._exists(block.source_run)
        ):
            self._next[stream] = None
            return None
        self._next[stream] = at + 1
        return block.source_run, block.first

    def _exists(self, run_id: str) -> bool:
        """Whether the journal holds run `run_id` (its first events read, once)."""
        known = self._present.get(run_id)
        if known is None:
            try:
                known = next(iter(self._read(run_id)), None) is not None
            except JournalError:
                known = False
            self._present[run_id] = known
        return known

    def find(self, stream: Stream, key: str) -> tuple[str, int, bytes] | None:
        """(source run, position, first 16 bytes of its digest) of the unit `key` of
        `stream`, or None. The candidate's own units first: the source runs its blocks
        name are read only for a unit not among them."""
        if self._own is None:
            self._load_candidate()
        assert self._own is not None
        own = self._own.get(stream)
        if self._units is None and (own is None or key not in own):
            self._units = self._load()
        entries = self._units.get(stream) if self._units is not None else own
        entry = entries.get(key) if entries is not None else None
        if entry is None:
            return None
        where = int.from_bytes(entry[16:], "big")
        return self._runs[where & 0xFFFF], where >> 16, entry[:16]

    def _entry(self, run: int, position: int, digest: str) -> bytes:
        return short(digest) + ((position << 16) | run).to_bytes(8, "big")

    def _load_candidate(self) -> None:
        """The candidate's own units and its blocks (one read of the candidate)."""
        own: dict[Stream, dict[str, bytes]] = {}
        self._own = own
        run_id = self._candidate
        if run_id is None:
            return
        self._runs = [run_id]
        blocks: dict[str, list[EventsReused]] = {}
        try:
            for unit in block_units(_blocks_seen(self._read(run_id), blocks)):
                if unit.digest is not None:
                    entry = self._entry(0, unit.position, unit.digest)
                    own.setdefault(unit.stream, {})[unit.key] = entry
        except JournalError:
            own.clear()
            blocks = {}
        self._blocks = blocks
        for summaries in blocks.values():
            for s in summaries:
                self._in_order.setdefault((s.kind, s.step), []).append(s)
        for stream_blocks in self._in_order.values():
            stream_blocks.sort(key=lambda s: s.originator_version)

    def _load(self) -> dict[Stream, dict[str, bytes]]:
        if self._own is None:
            self._load_candidate()
        assert self._own is not None
        out: dict[Stream, dict[str, bytes]] = {s: dict(u) for s, u in self._own.items()}
        if self._candidate is None:
            return out
        blocks = self._blocks
        try:
            for source, summaries in list(blocks.items())[:0xFFFF]:
                index = len(self._runs)
                self._runs.append(source)
                wanted: dict[Stream, list[range]] = {}  # the ranges the candidate names
                for s in summaries:
                    wanted.setdefault((s.kind, s.step), []).append(
                        range(s.first, s.first + s.units)
                    )
                self.sources_read += 1
                for unit in block_units(self._read(source)):
                    ranges = wanted.get(unit.stream)
                    if unit.digest is None or not ranges:
                        continue
                    if any(unit.position in r for r in ranges):
                        entry = self._entry(index, unit.position, unit.digest)
                        out.setdefault(unit.stream, {})[unit.key] = entry
        except JournalError:
            return {}
        return out


def short(digest: str) -> bytes:
    """What `BlockIndex` keeps of a unit's digest."""
    return bytes.fromhex(digest)[:16]


def _blocks_seen(
    events: Iterable[RunEvent], blocks: dict[str, list[EventsReused]]
) -> Iterator[RunEvent]:
    for event in events:
        if type(event) is EventsReused:
            blocks.setdefault(event.source_run, []).append(event)
        yield event


class _BlockSource:
    """One source run's units, read in order with their events (its `LaneReused`
    expanded); the units a block passes over are held until asked, and a unit asked for
    again reads the run again."""

    def __init__(self, read: Callable[[], Iterable[RunEvent]]) -> None:
        self._read = read
        self._units: Iterator[Unit] = block_units(read(), keep=True)
        self._held: dict[Stream, dict[int, Unit]] = {}
        self._passed: dict[Stream, int] = {}  # positions below this were given or dropped

    def take(self, stream: Stream, first: int, n: int) -> list[Unit]:
        if first < self._passed.get(stream, 0):
            self._units = block_units(self._read(), keep=True)
            self._held = {}
            self._passed = {}
        held = self._held.setdefault(stream, {})
        wanted = range(first, first + n)
        # the positions still to read (counted down, not searched again per unit read:
        # that was quadratic in a block's units)
        missing = {p for p in wanted if p not in held}
        while missing:
            unit = next(self._units, None)
            if unit is None:
                break
            self._held.setdefault(unit.stream, {})[unit.position] = unit
            if unit.stream == stream:
                missing.discard(unit.position)
        out = [held.pop(p) for p in wanted if p in held]
        for p in [p for p in held if p < first]:
            del held[p]
        self._passed[stream] = first + n
        return out


def expand_blocks(events: Iterable[RunEvent], read: ReadEvents) -> Iterator[RunEvent]:
    """`events` with each `EventsReused` followed by the events it stands for, read from
    the run it names (`read`: that run's events with its `LaneReused` expanded) and
    checked against its digest; a source missing or not matching is `JournalCorrupt`."""
    sources: dict[str, _BlockSource] = {}
    for event in events:
        yield event
        if type(event) is not EventsReused:
            continue
        source = sources.get(event.source_run)
        if source is None:
            run_id = event.source_run
            source = sources[run_id] = _BlockSource(lambda run_id=run_id: read(run_id))
        units = source.take((event.kind, event.step), event.first, event.units)
        try:
            yield from block_expand(event, units)
        except BlockMismatch as exc:
            why = "is not in this journal" if not units else "does not match"
            raise JournalCorrupt(
                one_line(f"{exc} (the source run {event.source_run!r} {why})")
            ) from None
