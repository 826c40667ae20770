"""`run`'s manifest self-check from the batches its journal committed (app/manifest_check.py
`CommittedFold`, docs/operations.md "A manifest that disagrees with its journal").

The journal session hands each batch it committed to the fold, with the events each
reuse summary in it stands for as the session applied them; the check then compares that
fold with the live manifest instead of reading the run back. It reads the journal back
whenever the fold cannot stand for it: a reuse summary without its events or whose events
do not match its digest (issue 29, "Resume at the floor"), a fold that raised, or a
journal whose last version is not the last one folded.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from runjournal.adapters.journal import session as session_module
from runjournal.adapters.journal.journal_errors import JournalUnavailable
from runjournal.adapters.journal.session import RunSession
from runjournal.app.manifest_check import CommittedFold, check_run_manifest
from runjournal.domain.block_reuse import SingleUnit, block_digest, single_digest
from runjournal.domain.decisions import Stage
from runjournal.domain.events import (
    BlockKind,
    EventsReused,
    LaneReused,
    OutputWritten,
    RunEvent,
    StageDecided,
)
from runjournal.domain.lane_reuse import ReusedStage, SourceLane, expand, reuse_digest
from runjournal.domain.reasons import ReasonCode
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from unit.test_run_recorder import RUN_ID, Journal


def _run_events() -> list[RunEvent]:
    journal = Journal()
    journal.lane()
    journal.decide(ReasonCode.NOT_RESUMED)
    journal.session.flush()
    return journal.stored


def test_batches_fold_to_the_fold_of_the_whole_run() -> None:
    events = _run_events()
    committed = CommittedFold()
    for start in range(0, len(events), 2):
        committed.committed(events[start : start + 2])
    assert committed.usable
    assert committed.view() == fold(ManifestProjection(), events).view()
    assert committed.journaled == {"not_resumed": 1}
    assert committed.last_version == events[-1].originator_version


def test_a_reuse_summary_without_its_events_makes_it_give_up() -> None:
    events = _run_events()
    summary = LaneReused(
        originator_id=events[0].originator_id,
        originator_version=events[-1].originator_version + 1,
        timestamp=events[-1].timestamp,
        step="s",
        lane="l2",
        count=1,
        digest="d",
        source_run="earlier",
    )
    committed = CommittedFold()
    committed.committed(events)
    committed.committed([summary])
    committed.committed(events)  # later batches are ignored
    assert not committed.usable
    assert committed.gave_up == f"LaneReused {summary.originator_version} came without its events"
    with pytest.raises(RuntimeError):
        committed.view()


def test_a_fold_that_raises_gives_up_and_never_fails_the_commit() -> None:
    committed = CommittedFold()
    committed.committed([object()])  # type: ignore[list-item]
    assert not committed.usable


def test_the_session_hands_over_only_committed_batches_in_order() -> None:
    """A batch whose commit failed is handed over only once a later commit stored it."""
    batches: list[list[RunEvent]] = []
    stored: list[RunEvent] = []
    commits = [0]

    def commit(events: Any) -> None:
        commits[0] += 1
        if commits[0] == 2:
            raise JournalUnavailable("down for a moment")
        stored.extend(events)

    journal = Journal()  # its `RunAllocated` is pending in its run
    session = RunSession(
        commit, journal.session.run, committed=lambda events, _: batches.append(list(events))
    )
    assert batches == [stored] and len(stored) == 1
    journal.session = session
    journal.lane()
    with pytest.raises(JournalUnavailable):
        session.flush()
    assert [e for batch in batches for e in batch] == stored and len(stored) == 1
    journal.decide(ReasonCode.NOT_RESUMED)
    session.flush()
    assert [e for batch in batches for e in batch] == stored and len(stored) == 3
    assert [e.originator_version for e in stored] == [1, 2, 3]


class _Journal:
    """The two reads `check_run_manifest` may make."""

    def __init__(self, events: list[RunEvent], last: int) -> None:
        self.events, self.last, self.read_back = events, last, 0

    def last_version(self, run_id: str) -> int:
        return self.last

    def projected_events(self, run_id: str) -> list[RunEvent]:
        self.read_back += 1
        return self.events


class _Lossy(ManifestProjection):
    def decided(self, event: Any) -> None:
        return  # a live fold that drops every decision


@pytest.mark.parametrize("behind", [0, 1])
def test_the_check_reads_back_only_when_the_fold_is_behind_the_journal(behind: int) -> None:
    events = _run_events()
    committed = CommittedFold()
    committed.committed(events)
    journal = _Journal(events, events[-1].originator_version + behind)
    good = fold(ManifestProjection(), events)
    assert check_run_manifest(journal, RUN_ID, good, False, None, committed) is None
    assert journal.read_back == behind
    line = check_run_manifest(journal, RUN_ID, fold(_Lossy(), events), False, None, committed)
    assert line is not None and line.startswith("internal error: ")
    assert "manifest.json was not written" in line
    assert journal.read_back == 2 * behind


# --- reuse summaries folded from the events the session applied for them


def _origin(events: list[RunEvent]) -> dict[str, Any]:
    last = events[-1]
    return {
        "originator_id": last.originator_id,
        "originator_version": last.originator_version + 1,
        "timestamp": last.timestamp,
    }


def _outputs_block(events: list[RunEvent]) -> tuple[EventsReused, list[Any], list[RunEvent]]:
    """A block of two output files after `events`, the units the session hands over for
    it and the events it stands for."""
    origin = _origin(events)
    files = [
        OutputWritten(**origin, name=f"artifacts/{n}.json", sha256=f"{n}" * 64, size=n)
        for n in (1, 2)
    ]
    summary = EventsReused(
        **origin,
        kind=BlockKind.OUTPUTS,
        step="",
        first=0,
        units=2,
        count=2,
        digest=block_digest(single_digest(f) for f in files),
        source_run="earlier",
    )
    drafts = [msgspec.structs.replace(f, originator_version=0) for f in files]
    return summary, [SingleUnit(d) for d in drafts], list(files)


def _lane_summary(events: list[RunEvent]) -> tuple[LaneReused, list[Any], list[RunEvent]]:
    """A `LaneReused` of two decisions of the lane `events` resolved, and its decisions
    (handed over as they are)."""
    stages = [ReusedStage(Stage.EXTRACT, c, "i", "") for c in ("c1", "c2")]
    summary = LaneReused(
        **_origin(events),
        step="s",
        lane="l",
        count=2,
        digest=reuse_digest(stages),
        source_run="earlier",
    )
    decisions = expand(summary, list(stages))
    return summary, decisions, decisions


def _lane_events() -> list[RunEvent]:
    journal = Journal()
    journal.lane()
    journal.session.flush()
    return journal.stored


@pytest.mark.parametrize("make", [_outputs_block, _lane_summary], ids=["block", "lane"])
def test_a_summary_is_folded_from_its_applied_events_when_they_match_its_digest(make) -> None:
    events = _lane_events()
    summary, handed, applied = make(events)
    committed = CommittedFold()
    committed.committed(events)
    committed.committed([summary], {summary.originator_version: handed})
    assert committed.usable and committed.summaries == 1
    # what the read-back folds: the summary, then the events a reader expands it into
    assert committed.view() == fold(ManifestProjection(), [*events, summary, *applied]).view()
    decided = sum(1 for e in applied if type(e) is StageDecided)
    assert committed.journaled == ({"reused": decided} if decided else {})
    assert committed.last_version == summary.originator_version
    journal = _Journal([*events, summary, *applied], summary.originator_version)
    live = fold(ManifestProjection(), [*events, summary, *applied])
    assert check_run_manifest(journal, RUN_ID, live, False, None, committed) is None
    assert journal.read_back == 0


def _tampered(applied: list[Any]) -> list[list[Any]]:
    """`applied` with one event (or unit) changed, one left out, a decision not a plain
    reuse or not as one is journaled."""
    if type(applied[0]) is SingleUnit:
        first_unit = applied[0].event
        changed_unit = SingleUnit(msgspec.structs.replace(first_unit, size=first_unit.size + 1))
        return [[changed_unit, *applied[1:]], applied[1:]]
    first = applied[0]
    changed = (
        msgspec.structs.replace(first, size=first.size + 1)  # type: ignore[attr-defined]
        if type(first) is OutputWritten
        else msgspec.structs.replace(first, chunk="c9")  # type: ignore[attr-defined]
    )
    out = [[changed, *applied[1:]], applied[1:]]
    if type(first) is StageDecided:
        out.append([msgspec.structs.replace(first, forced=True), *applied[1:]])
        out.append([msgspec.structs.replace(first, detail="other"), *applied[1:]])
    return out


@pytest.mark.parametrize("make", [_outputs_block, _lane_summary], ids=["block", "lane"])
def test_a_summary_whose_applied_events_do_not_match_its_digest_reads_the_journal_back(
    make,
) -> None:
    events = _lane_events()
    summary, handed, applied = make(events)
    what = "units" if type(summary) is EventsReused else "events"
    for wrong in _tampered(handed):
        committed = CommittedFold()
        committed.committed(events)
        committed.committed([summary], {summary.originator_version: wrong})
        assert not committed.usable
        assert committed.gave_up == (
            f"{type(summary).__name__} {summary.originator_version}: its {what} do not match"
        )
        # the check falls back to the journal's events, expanded from the run they name
        stored = [*events, summary, *applied]
        journal = _Journal(stored, summary.originator_version)
        live = fold(ManifestProjection(), stored)
        assert check_run_manifest(journal, RUN_ID, live, False, None, committed) is None
        assert journal.read_back == 1
        without = fold(ManifestProjection(), events)  # a live view that missed the summary
        line = check_run_manifest(journal, RUN_ID, without, False, None, committed)
        assert line is not None and line.startswith("internal error: ")


class _Sources:
    """An earlier run that journaled every lane's decisions as given."""

    def __init__(self, digest: str, count: int) -> None:
        self.lane = SourceLane("earlier", digest, count)

    def find(self, step: str, lane: str) -> SourceLane | None:
        return self.lane


def _summarizing_session(
    batches: list[tuple[list[RunEvent], dict[int, Any]]],
) -> tuple[Journal, list[ReusedStage]]:
    stages = [ReusedStage(Stage.EXTRACT, c, "i", "") for c in ("c1", "c2")]
    journal = Journal()
    journal.session = RunSession(
        journal.stored.extend,
        journal.session.run,
        reuse_sources=_Sources(reuse_digest(stages), len(stages)),  # type: ignore[arg-type]
        committed=lambda events, expanded: batches.append((list(events), dict(expanded))),
    )
    journal.lane()
    return journal, stages


def test_the_session_hands_over_each_summarys_events_with_its_batch_and_then_drops_them() -> None:
    batches: list[tuple[list[RunEvent], dict[int, Any]]] = []
    journal, stages = _summarizing_session(batches)
    journal.session.lane_reused(step="s", lane="l", stages=list(stages))
    journal.session.flush()
    summary = journal.stored[-1]
    assert type(summary) is LaneReused
    events, expanded = batches[-1]
    assert events[-1] is summary and list(expanded) == [summary.originator_version]
    assert [e.chunk for e in expanded[summary.originator_version]] == ["c1", "c2"]  # type: ignore[attr-defined]
    assert journal.session._expansions == {}  # nothing held once committed
    committed = CommittedFold()
    for events, expanded in batches:
        committed.committed(events, expanded)
    assert committed.usable and committed.journaled == {"reused": 2}


def test_summaries_standing_for_many_events_commit_before_the_batch_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session holds a summary's events until its batch commits: bounded."""
    monkeypatch.setattr(session_module, "EXPANSIONS_HELD", 2)
    batches: list[tuple[list[RunEvent], dict[int, Any]]] = []
    journal, stages = _summarizing_session(batches)
    journal.session.lane_reused(step="s", lane="l", stages=list(stages))
    assert type(journal.stored[-1]) is LaneReused  # committed without a flush
    assert journal.session._expansions == {}
