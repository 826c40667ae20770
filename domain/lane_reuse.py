"""A fully reused lane journaled as one `LaneReused` summary, and its expansion.

A lane whose every stage decision of a run is a plain reuse (code `reused`, checkpoint
present, nothing differing, not forced, resumed) is journaled as one `LaneReused` event
instead of one `StageDecided` per stage. What varies between those decisions is only each
stage's position and current digests (`ReusedStage`: stage, chunk, input, D); everything
else is the same for every plain reuse (`reused_fields`). The summary names the run that
journaled the same stages explicitly (`source_run`), their count and the digest of their
`ReusedStage` list, so the projections expand it from events the journal already holds,
and the expansion is checked against the digest (docs/internals.md "Reuse summaries").

Pure: no I/O. The journal adapter reads the source run's events and feeds them in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from runjournal.domain.decisions import CheckpointState, Stage, StageFacts, recorded_differences
from runjournal.domain.events import LaneReused, RunEvent, StageDecided
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


def reuse_digest(stages: Iterable[ReusedStage]) -> str:
    """sha256 over the canonical msgpack of each stage, in decision order."""
    h = hashlib.sha256()
    encode = _encoder.encode
    for stage in stages:
        h.update(encode(stage))
    return h.hexdigest()


def reused_fields(step: str, lane: str, stage: ReusedStage) -> dict[str, Any]:
    """The fields of the `StageDecided` a plain reuse of `stage` records (as
    `StageDecided.fields` builds them from the facts)."""
    code = ReasonCode.REUSED
    return {
        "step": step,
        "lane": lane,
        "stage": stage.stage,
        "chunk": stage.chunk,
        "code": code,
        "category": category_of(code),
        "detail": detail_for(code),
        "forced": False,
        "resumed": True,
        "failed": False,
        "checkpoint": CheckpointState.PRESENT,
        "predecessor": None,
        "input": stage.input,
        "dependencies": stage.dependencies,
        "recorded": {},
    }


def expand(summary: LaneReused, stages: list[ReusedStage]) -> list[StageDecided]:
    """The decisions a summary stands for, each with the summary's origin and time.

    `stages` are the source run's decisions of the lane; a count or digest that does not
    match is `LaneReuseMismatch` (the source was changed, or is another run's).
    """
    if len(stages) != summary.count or reuse_digest(stages) != summary.digest:
        raise LaneReuseMismatch(
            f"the reuse summary of step {summary.step!r} lane {summary.lane!r} "
            f"(event {summary.originator_version}) does not match the "
            f"{len(stages)} decision(s) of run {summary.source_run!r}"
        )
    origin = {
        "originator_id": summary.originator_id,
        "originator_version": summary.originator_version,
        "timestamp": summary.timestamp,
    }
    return [StageDecided(**origin, **reused_fields(summary.step, summary.lane, s)) for s in stages]


class SourceLane(msgspec.Struct, frozen=True):
    """Where a lane's plain-reuse decisions are journaled explicitly, and their digest."""

    run_id: str
    digest: str
    count: int


def source_lanes(run_id: str, events: Iterable[RunEvent]) -> dict[tuple[str, str], SourceLane]:
    """Each lane of one run, as a later run's summary would name it.

    A lane journaled explicitly is its own source (its decisions' digest, whatever they
    were: a later run can only match it when they are the same stages with the same
    digests); a summarized lane passes its own source on, so a summary always names a run
    whose decisions are explicit and expansion never chains.
    """
    digests: dict[tuple[str, str], Any] = {}
    counts: dict[tuple[str, str], int] = {}
    summarized: dict[tuple[str, str], SourceLane] = {}
    for event in events:
        if type(event) is StageDecided:
            key = (event.step, event.lane)
            h = digests.get(key)
            if h is None:
                h = digests[key] = hashlib.sha256()
            h.update(_encoder.encode(ReusedStage.of_event(event)))
            counts[key] = counts.get(key, 0) + 1
        elif type(event) is LaneReused:
            key = (event.step, event.lane)
            summarized[key] = SourceLane(event.source_run, event.digest, event.count)
    out = {key: SourceLane(run_id, h.hexdigest(), counts[key]) for key, h in digests.items()}
    out.update(summarized)
    return out


def lane_decisions(events: Iterable[RunEvent]) -> Iterator[tuple[tuple[str, str], ReusedStage]]:
    """A run's explicit decisions as (step, lane) and `ReusedStage`, in journal order."""
    for event in events:
        if type(event) is StageDecided:
            yield (event.step, event.lane), ReusedStage.of_event(event)
