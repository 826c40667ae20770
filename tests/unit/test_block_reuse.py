"""Block summaries (docs/internals.md "Block summaries"): units of a run equal to the last
run's journaled as one `EventsReused`, expanded back into the events they stand for.

Two sessions record the same calls: the first with nothing to name, the second with the
first as its block source (and a third, with none, as the reference). The second's
stored events must expand to the third's, every rule of the `Run` aggregate must hold
on them, and a block must never stand for a unit that differs.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.journal.journal_errors import JournalCorrupt
from runjournal.adapters.journal.reuse import BlockIndex, expand_blocks, expand_summaries
from runjournal.adapters.journal.session import RunSession
from runjournal.domain.block_reuse import units
from runjournal.domain.decisions import Stage
from runjournal.domain.events import (
    BlockKind,
    EventsReused,
    FileFingerprint,
    PlanOutcome,
    RunAllocated,
    RunEvent,
    StageDecided,
)
from runjournal.domain.identity import ArtifactRef
from runjournal.domain.lane_reuse import ReusedStage
from runjournal.domain.run import Run, run_aggregate_id
from support.hand_made import emit
from unit.test_run_recorder import COMPONENTS, clock

SOURCE, RUN = "20261201T000000Z-50000001", "20261201T000001Z-50000002"


def _session(
    run_id: str, stored: list[RunEvent], blocks: BlockIndex | None, committed: Any = None
) -> RunSession:
    run = Run(run_aggregate_id(run_id), clock())
    session = RunSession(stored.extend, run, block_sources=blocks, committed=committed)
    emit(
        session,
        RunAllocated,
        run_id=run_id,
        pipeline="p",
        pipeline_file="/p/pipeline.toml",
        argv=[],
        tool_version="0",
        run_dir=f"/out/{run_id}",
        output_root="/out",
        cache_root="/cache",
        workspace=None,
        debug_bundle=None,
        host="h",
        pid=1,
        process_start=0.0,
    )
    return session


Lane = tuple[str, int, str]  # step, decisions, artifact digest


def _record(session: RunSession, lanes: list[Lane], plans: list[str]) -> None:
    session.inputs_fingerprinted(sources=[FileFingerprint("a.md", "a" * 64, 1)], references=[])
    for source in plans:
        session.plan_resolved(
            source=source, plan_key=source * 8, outcomes=[PlanOutcome.REUSED], chunks=1
        )
    for i, (step, decisions, sha) in enumerate(lanes):
        lane = f"l{i}"
        session.lane_resolved(
            step=step,
            lane=lane,
            components=COMPONENTS,
            lane_identity=f"id{i}",
            dependencies=[],
            chunks=decisions,
            forced=False,
            reads={},
        )
        stages = [ReusedStage(Stage.EXTRACT, f"c{n}", f"in{n}", "") for n in range(decisions)]
        session.lane_reused(step=step, lane=lane, stages=list(stages))
        session.artifact(
            artifact=ArtifactRef(step, lane, "k", "s", "application/json", sha, 1), warnings=[]
        )
    for i, (step, _, sha) in enumerate(lanes):
        session.output_written(
            name=f"{step}/l{i}.json", sha256=sha, size=1, step=step, lane=f"l{i}"
        )
    session.close()


def _content(events: list[RunEvent]) -> list[tuple[str, Any]]:
    return [
        (type(e).__name__, msgspec.structs.astuple(e)[3:])
        for e in events
        if type(e) is not EventsReused
    ]


lanes_strategy = st.lists(
    st.tuples(st.sampled_from(["s", "t"]), st.integers(1, 3), st.sampled_from(["x", "y"])),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    lanes=lanes_strategy,
    changed=st.sets(st.integers(0, 11)),
    plans=st.lists(st.sampled_from("abcdef"), unique=True, max_size=5),
)
def test_a_resume_through_blocks_expands_to_the_resume_journaled_as_it_was(
    lanes: list[Lane], changed: set[int], plans: list[str]
) -> None:
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), lanes, plans)
    now = [(step, n, "z" if i in changed else sha) for i, (step, n, sha) in enumerate(lanes)]
    plain: list[RunEvent] = []
    _record(_session(RUN, plain, None), now, plans)
    stored: list[RunEvent] = []
    blocks = BlockIndex(lambda run_id: source if run_id == SOURCE else [], SOURCE)
    _record(_session(RUN, stored, blocks), now, plans)

    def read(run_id: str) -> list[RunEvent]:
        return list(expand_summaries(source if run_id == SOURCE else [], lambda _: []))

    projected = list(expand_blocks(stored, read))
    assert _content(projected) == _content(plain)
    assert not Run.replay(projected).violations
    assert not Run.replay(stored).violations
    summaries = [e for e in stored if type(e) is EventsReused]
    assert any(s.kind is BlockKind.INPUTS for s in summaries)
    unchanged = [i for i in range(len(lanes)) if i not in changed]
    if unchanged:
        assert any(s.kind is BlockKind.LANES for s in summaries)
    # a lane that changed is never inside a block: it is journaled as it is
    explicit = {e.lane for e in stored if type(e) is StageDecided}  # type: ignore[attr-defined]
    assert {f"l{i}" for i in changed if i < len(lanes)} <= explicit


def test_units_count_a_lane_summary_as_its_decisions() -> None:
    """Positions and digests are the same whether a run's `LaneReused` are expanded."""
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), [("s", 3, "x"), ("s", 2, "y")], ["a"])
    assert [(u.stream, u.position, u.digest) for u in units(source)] == [
        (u.stream, u.position, u.digest) for u in units(source, keep=True)
    ]


def test_a_block_that_does_not_match_its_source_is_refused_in_one_line() -> None:
    source: list[RunEvent] = []
    lanes = [("s", 2, "x"), ("s", 2, "x")]
    _record(_session(SOURCE, source, None), lanes, [])
    stored: list[RunEvent] = []
    _record(_session(RUN, stored, BlockIndex(lambda _: source, SOURCE)), lanes, [])
    tampered = [
        msgspec.structs.replace(e, digest="0" * 64)
        if type(e) is EventsReused and e.kind is BlockKind.LANES
        else e
        for e in stored
    ]
    with pytest.raises(JournalCorrupt, match="does not match") as info:
        list(expand_blocks(tampered, lambda _: source))
    assert "\n" not in str(info.value)
    with pytest.raises(JournalCorrupt, match="is not in this journal"):
        list(expand_blocks(stored, lambda _: []))


def test_the_aggregate_refuses_an_expanded_event_of_another_step() -> None:
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), [("s", 2, "x"), ("s", 1, "x")], [])
    stored: list[RunEvent] = []
    _record(
        _session(RUN, stored, BlockIndex(lambda _: source, SOURCE)),
        [("s", 2, "x"), ("s", 1, "x")],
        [],
    )
    projected = list(expand_blocks(stored, lambda _: source))
    block = next(
        i for i, e in enumerate(projected) if type(e) is EventsReused and e.kind is BlockKind.LANES
    )
    other = msgspec.structs.replace(projected[block + 2], step="t")  # type: ignore[call-arg]
    moved = [*projected[: block + 2], other, *projected[block + 3 :]]
    assert Run.replay(moved).violations
    extra = [*projected[: block + 2], projected[block + 1], *projected[block + 2 :]]
    assert Run.replay(extra).violations


def test_a_run_with_blocks_left_unterminated_is_recovered() -> None:
    """`recover` replays a run's stored events (blocks as stored) and ends it abandoned."""
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), [("s", 2, "x"), ("t", 1, "y")], ["a", "b"])
    stored: list[RunEvent] = []
    _record(_session(RUN, stored, BlockIndex(lambda _: source, SOURCE)), [("s", 2, "x")], [])
    assert [e for e in stored if type(e) is EventsReused]
    run = Run(run_aggregate_id(RUN), clock())
    for event in stored:
        run.apply(event)
    ended = run.abandon("the process is gone")
    assert ended.originator_version == stored[-1].originator_version + 1
    projected = list(expand_blocks([*stored, ended], lambda _: source))
    assert not Run.replay(projected).violations
