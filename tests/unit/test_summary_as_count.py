"""A block summary applied as a count (docs/internals.md "A summary applied as a count").

The `Run` aggregate records an `EventsReused` and sets the state its events would leave
at once, without applying them one by one; the committed fold of `run`'s manifest check
takes the block's units (each with its digest, computed once where it was held) and
builds the events from them, without hashing them again. Both must give what the
events applied one by one give: the aggregate's state is the replay's, the fold's
events are a reader's expansion.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from runjournal.adapters.journal.reuse import BlockIndex, expand_blocks, expand_summaries
from runjournal.adapters.journal.session import RunSession
from runjournal.app.manifest_check import CommittedFold
from runjournal.domain import block_reuse
from runjournal.domain.block_reuse import LaneUnit, SingleUnit, units_events, units_match
from runjournal.domain.decisions import Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    BlockKind,
    EventsReused,
    LaneResolved,
    OutputWritten,
    RunEvent,
)
from runjournal.domain.lane_reuse import ReusedStage
from runjournal.domain.run import JournalInvariantError, Run, run_aggregate_id
from unit.test_block_reuse import RUN, SOURCE, Lane, _record, _session, lanes_strategy
from unit.test_run_recorder import COMPONENTS, clock


def _state(run: Run) -> tuple[Any, ...]:
    return (run.version, run.events_seen, sorted(run._lanes), run._last_decision)


def _resume(lanes: list[Lane]) -> tuple[list[RunEvent], list[RunEvent], RunSession, int]:
    """A source run, then a resume through blocks: (source, stored, the resume's session,
    the events its `Run` applied one by one after its allocation)."""
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), lanes, ["a", "b"])
    stored: list[RunEvent] = []
    session = _session(RUN, stored, BlockIndex(lambda _: source, SOURCE))
    applied = [0]
    real = Run._apply

    def counting(self: Run, event: RunEvent, *, order: bool) -> None:
        applied[0] += 1
        real(self, event, order=order)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Run, "_apply", counting)
        _record(session, lanes, ["a", "b"])
    return source, stored, session, applied[0]


def test_the_aggregate_applies_a_block_as_a_count() -> None:
    """Each stored event is applied once; the events a block stands for are not (on the
    code before this change, every one of them went through the rules again)."""
    lanes = [("s", 3, "x"), ("s", 2, "y"), ("t", 4, "x")]
    _, stored, session, applied = _resume(lanes)
    blocks = [e for e in stored if type(e) is EventsReused]
    assert any(b.kind is BlockKind.LANES for b in blocks)
    after_allocation = len(stored) - 1  # the allocation was recorded before counting
    assert applied == after_allocation
    assert session.run.summarized_events == sum(b.count for b in blocks)


@settings(max_examples=60, deadline=None)
@given(lanes=lanes_strategy)
def test_a_block_applied_as_a_count_leaves_the_state_its_events_leave(lanes: list[Lane]) -> None:
    source, stored, session, _ = _resume(lanes)

    def read(run_id: str) -> list[RunEvent]:
        return list(expand_summaries(source if run_id == SOURCE else [], lambda _: []))

    projected = list(expand_blocks(stored, read))
    replayed = Run.replay(projected)
    assert not replayed.violations
    assert _state(session.run) == _state(replayed)


@settings(max_examples=40, deadline=None)
@given(lanes=lanes_strategy)
def test_the_committed_fold_builds_a_blocks_events_as_a_reader_expands_them(
    lanes: list[Lane],
) -> None:
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), lanes, ["a"])
    stored: list[RunEvent] = []
    handed: dict[int, Any] = {}
    session = _session(RUN, stored, BlockIndex(lambda _: source, SOURCE))
    session._expansions = handed
    _record(session, lanes, ["a"])
    projected = list(expand_blocks(stored, lambda _: source))
    for summary in (e for e in stored if type(e) is EventsReused):
        units = handed.pop(summary.originator_version)
        assert units_match(summary, units)
        version = summary.originator_version
        origin = {
            "originator_id": summary.originator_id,
            "originator_version": version,
            "timestamp": summary.timestamp,
        }
        expected = [e for e in projected if e.originator_version == version]
        assert units_events(units, origin) == expected[1:]  # after the summary itself


def test_the_committed_fold_does_not_hash_a_blocks_events_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fold takes each block's units and their carried digests: no event of a block
    is encoded or hashed again (on the code before this change, `expansion_matches` made
    the units of the events and hashed every one)."""
    lanes = [("s", 3, "x"), ("s", 2, "y"), ("t", 4, "x")]
    source: list[RunEvent] = []
    _record(_session(SOURCE, source, None), lanes, ["a", "b"])
    stored: list[RunEvent] = []
    batches: list[tuple[list[RunEvent], dict[int, Any]]] = []
    session = _session(
        RUN,
        stored,
        BlockIndex(lambda _: source, SOURCE),
        committed=lambda events, expanded: batches.append((list(events), dict(expanded))),
    )
    _record(session, lanes, ["a", "b"])
    hashed: list[object] = []
    for name in ("content", "reuse_digest", "single_digest", "lane_digest"):
        real = getattr(block_reuse, name)
        monkeypatch.setattr(
            block_reuse, name, lambda *a, _real=real, **k: hashed.append(a) or _real(*a, **k)
        )
    committed = CommittedFold()
    for events, expanded in batches:
        committed.committed(events, expanded)
    assert committed.usable, committed.gave_up
    assert committed.summaries == sum(1 for e in stored if type(e) is EventsReused) > 0
    assert hashed == []


def _lane_unit(step: str, lane: str) -> LaneUnit:
    run = Run(run_aggregate_id(RUN), clock())
    resolved = run.draft(
        LaneResolved,
        step=step,
        lane=lane,
        components=COMPONENTS,
        lane_identity="id",
        dependencies=[],
        chunks=1,
        forced=False,
        reads={},
    )
    artifact = run.draft(
        ArtifactGenerated,
        step=step,
        lane=lane,
        kind="k",
        schema="s",
        media_type="application/json",
        sha256="x",
        size=1,
        warnings=[],
        restored=False,
    )
    return LaneUnit(resolved, [ReusedStage(Stage.EXTRACT, "c", "i", "")], artifact)


def test_the_aggregate_refuses_a_block_of_units_that_are_not_of_its_kind() -> None:
    session = _session(RUN, [], None)
    run = session.run
    output = SingleUnit(
        run.draft(OutputWritten, name="a.json", sha256="x", size=1, step=None, lane=None)
    )
    cases = [
        (BlockKind.LANES, "s", [_lane_unit("t", "l0")]),  # a lane of another step
        (BlockKind.LANES, "s", [output]),  # not a lane
        (BlockKind.OUTPUTS, "", [_lane_unit("s", "l0")]),  # a lane among outputs
        (BlockKind.PLANS, "", [output]),  # an output among plans
        (BlockKind.OUTPUTS, "", []),
    ]
    for kind, step, units in cases:
        version = run.version
        with pytest.raises(JournalInvariantError, match="block summary"):
            run.record_block_reuse(kind=kind, step=step, first=0, source_run=SOURCE, units=units)
        assert run.version == version  # nothing recorded


def test_a_lane_unit_with_the_artifact_of_another_lane_cannot_be_made() -> None:
    unit = _lane_unit("s", "l0")
    with pytest.raises(ValueError, match="its artifact is of"):
        LaneUnit(unit.resolved, [], _lane_unit("s", "l1").artifact)
