"""Reuse summaries in the journal: finding what a summary names, and expanding it.

A fully reused lane is journaled as one `LaneReused` naming the earlier run that
journaled the same decisions explicitly (domain/lane_reuse.py; docs/internals.md "Reuse
summaries"). `SourceIndex` answers the recording session which earlier run that is;
`expand_summaries` gives a run's events back with each summary followed by the decisions
it stands for, read from that run's events and checked against the summary's digest.
Both only read the journal through the callables they are handed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from runjournal.adapters.journal.journal_errors import JournalCorrupt, JournalError, one_line
from runjournal.domain.events import LaneReused, RunEvent
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
    """

    def __init__(self, read: ReadEvents, candidates: Sequence[str]) -> None:
        self._read = read
        self._candidates = list(candidates)
        self._loaded: list[dict[Lane, SourceLane]] = []

    def find(self, step: str, lane: str) -> SourceLane | None:
        key = (step, lane)
        for lanes in self._loaded:
            if key in lanes:
                return lanes[key]
        while self._candidates:
            run_id = self._candidates.pop(0)
            try:
                lanes = source_lanes(run_id, self._read(run_id))
            except JournalError:
                continue
            self._loaded.append(lanes)
            if key in lanes:
                return lanes[key]
        return None


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
