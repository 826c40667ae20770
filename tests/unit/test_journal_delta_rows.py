"""Delta rows (docs/internals.md "Delta rows"): any run of per-lane events reads back
exactly as written, field by field and type by type, chained or not; rows of an older
class version are upcast."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.journal.codec import EventMapper
from runjournal.adapters.journal.delta import DELTA_TOPIC
from runjournal.domain.decisions import CheckpointState, PredecessorState, Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    ChunkPlanResolved,
    LaneResolved,
    OutputWritten,
    PlanOutcome,
    RunEvent,
    StageDecided,
    StageExecuted,
    WarningRecorded,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.llm import FailureCause
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.domain.run import run_aggregate_id

AGGREGATE = run_aggregate_id("delta")
T0 = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

# Few distinct values, so that fields repeat, change back and are shared across types.
# (Lone surrogates: test_journal_compact.py; a full map cannot hold them, as before.)
texts = st.sampled_from(
    ["", "docs/a.md", "docs/b.md", "terms", "x" * 64, "é long string here"]
    + [f"{i:064x}" for i in range(3)]
)
digests = st.sampled_from([f"{i:064x}" for i in range(4)] + ["A" * 64, ""])
times = st.one_of(
    st.integers(-(10**9), 10**9).map(lambda us: T0 + timedelta(microseconds=us)),
    st.sampled_from([timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))]).map(
        T0.astimezone
    ),
    st.just(T0.replace(tzinfo=None)),
)
refs = st.builds(
    ArtifactRef, step=texts, lane=texts, kind=texts, schema=texts, media_type=texts,
    sha256=digests, size=st.integers(0, 2**40),
)  # fmt: skip


def _code(code: ReasonCode) -> dict[str, Any]:
    return {"code": code, "category": category_of(code), "detail": detail_for(code)}


def _decided(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "step": draw(texts),
        "lane": draw(texts),
        "stage": draw(st.sampled_from(Stage)),
        "chunk": draw(digests),
        **_code(draw(st.sampled_from([ReasonCode.REUSED, ReasonCode.INPUT_CHANGED]))),
        "forced": draw(st.booleans()),
        "resumed": draw(st.booleans()),
        "failed": draw(st.booleans()),
        "checkpoint": draw(st.sampled_from(CheckpointState)),
        "predecessor": draw(st.none() | st.sampled_from(PredecessorState)),
        "input": draw(digests),
        "dependencies": draw(digests),
        "recorded": draw(st.dictionaries(texts, digests, max_size=2)),
        "cause": draw(st.none() | st.sampled_from(FailureCause)),
    }


@st.composite
def lane_event(draw: st.DrawFn) -> tuple[type[RunEvent], dict[str, Any]]:
    cls = draw(
        st.sampled_from(
            [
                *(ChunkPlanResolved, LaneResolved, StageDecided, StageExecuted),
                *(ArtifactGenerated, OutputWritten, WarningRecorded),
            ]
        )
    )
    fields: dict[str, Any]
    if cls is ChunkPlanResolved:
        outcomes = draw(st.lists(st.sampled_from(PlanOutcome), max_size=2))
        fields = {"source": draw(texts), "plan_key": draw(digests), "outcomes": outcomes}
        fields["chunks"] = draw(st.integers(0, 3))
    elif cls is LaneResolved:
        parts = {n: draw(digests) for n in LaneComponents.__struct_fields__}
        fields = {
            "step": draw(texts),
            "lane": draw(texts),
            "components": LaneComponents(**parts),
            "lane_identity": draw(digests),
            "dependencies": draw(st.lists(refs, max_size=2)),
            "chunks": draw(st.integers(0, 3)),
            "forced": draw(st.booleans()),
            "reads": draw(st.dictionaries(st.sampled_from(Stage), st.lists(refs, max_size=1))),
        }
    elif cls is StageDecided:
        fields = _decided(draw)
    elif cls is StageExecuted:
        fields = {"step": draw(texts), "lane": draw(texts), "stage": draw(st.sampled_from(Stage))}
        size = draw(st.integers(0, 2**63))
        fields |= {"chunk": draw(digests), "sha256": draw(digests), "size": size}
    elif cls is ArtifactGenerated:
        ref = draw(refs)
        fields = {**ArtifactGenerated.fields_of(ref), "warnings": draw(st.lists(texts))}
        fields["restored"] = draw(st.booleans())
    elif cls is OutputWritten:
        fields = {"name": draw(texts), "sha256": draw(digests), "size": draw(st.integers(0, 2**63))}
        fields |= {"step": draw(st.none() | texts), "lane": draw(st.none() | texts)}
    else:
        fields = {"step": draw(texts), "lane": draw(texts), "message": draw(texts)}
    return cls, fields


def _events(specs: list[tuple[type[RunEvent], dict[str, Any]]], stamps: list) -> list[RunEvent]:
    return [
        cls(originator_id=AGGREGATE, originator_version=v, timestamp=at, **fields)
        for v, ((cls, fields), at) in enumerate(zip(specs, stamps, strict=True), start=2)
    ]


def _read(mapper: EventMapper, rows: list[StoredEvent]) -> list[RunEvent]:
    return [e for row in rows for e in mapper.to_domain_events(row)]


@settings(max_examples=80, deadline=None)
@given(data=st.data(), chained=st.booleans())
def test_any_run_of_lane_events_reads_back_exactly(data: st.DataObject, chained: bool) -> None:
    specs = data.draw(st.lists(lane_event(), min_size=1, max_size=40))
    stamps = data.draw(st.lists(times, min_size=len(specs), max_size=len(specs)))
    events = _events(specs, stamps)
    mapper = EventMapper()
    rows, _ = mapper.to_stored_rows(events, b"\0" * 32 if chained else None)
    got = _read(EventMapper(), rows)
    assert got == events
    for g, e in zip(got, events, strict=True):
        assert type(g) is type(e)
        for name in type(e).__struct_fields__:
            value, expected = getattr(g, name), getattr(e, name)
            assert type(value) is type(expected), name
            if isinstance(expected, datetime):
                assert (value.tzinfo is None) == (expected.tzinfo is None)
    # the per-lane events (all but WarningRecorded) share rows
    lane_events = sum(type(e) is not WarningRecorded for e in events)
    assert len(rows) <= len(events) - lane_events + max(1, lane_events)


def _lane(version: int, lane: str) -> LaneResolved:
    parts = dict.fromkeys(LaneComponents.__struct_fields__, "c" * 64)
    return LaneResolved(
        originator_id=AGGREGATE,
        originator_version=version,
        timestamp=T0 + timedelta(milliseconds=version),
        step="terms",
        lane=lane,
        components=LaneComponents(**parts),
        lane_identity=f"{version:064x}",
        dependencies=[],
        chunks=1,
        forced=True,
    )


def test_a_delta_row_of_an_older_class_version_is_upcast() -> None:
    """A LaneResolved v1 row had no `forced` (absent meant not forced): rewrite a row's
    types table to version 1 and drop the field from its full item."""
    mapper = EventMapper()
    events = [_lane(2, "docs/a.md"), _lane(3, "docs/b.md"), _lane(4, "docs/c.md")]
    (row,), _ = mapper.to_stored_rows(events, None)
    state = bytes(row.state)
    assert state[0] == 0x41 and row.topic == DELTA_TOPIC
    body = msgspec.msgpack.decode(state[3:])
    body["~types"][0][1] = 1
    first = msgspec.msgpack.decode(body["~rows"][0][1])
    del first["forced"]
    body["~rows"][0][1] = msgspec.msgpack.encode(first)
    old = StoredEvent(row.originator_id, 4, DELTA_TOPIC, state[:3] + msgspec.msgpack.encode(body))
    got = mapper.to_domain_events(old)
    assert [e.lane for e in got] == ["docs/a.md", "docs/b.md", "docs/c.md"]  # type: ignore[attr-defined]
    assert [e.forced for e in got] == [False] * 3  # type: ignore[attr-defined]
    assert [e.lane_identity for e in got] == [e.lane_identity for e in events]  # type: ignore[attr-defined]
    assert [e.originator_version for e in got] == [2, 3, 4]
