"""`run`'s manifest self-check from the batches its journal committed (app/manifest_check.py
`CommittedFold`, docs/operations.md "A manifest that disagrees with its journal").

The journal session hands each batch it committed to the fold; the check then compares
that fold with the live manifest instead of reading the run back. It reads the journal
back whenever the fold cannot stand for it: a reuse summary, a fold that raised, or a
journal whose last version is not the last one folded.
"""

from __future__ import annotations

from typing import Any

import pytest
from runjournal.adapters.journal.journal_errors import JournalUnavailable
from runjournal.adapters.journal.session import RunSession
from runjournal.app.manifest_check import CommittedFold, check_run_manifest
from runjournal.domain.events import LaneReused, RunEvent
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


def test_a_reuse_summary_makes_it_give_up() -> None:
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
        commit, journal.session.run, committed=lambda events: batches.append(list(events))
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
