"""The run's in-memory intent and outcome lines are let go once the journal holds their
attempts (issue 29: peak RSS), and what the run's end finds missing is the same."""

from __future__ import annotations

import pytest
from runjournal.adapters.llm import calllog
from runjournal.adapters.llm.calllog import WriteAhead
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import AttemptStatus, CallScope, LLMAttempt
from runjournal.projections.llm_usage import DigestSet

CALLS = 1_000


def _attempt(wal: WriteAhead, chunk: int, *, ends: bool = True) -> None:
    scope = CallScope(step="ask", lane="doc.md", stage=Stage.EXTRACT, chunk=f"c{chunk:04d}")
    fields = {"profile_id": "p", "provider": "openai", "model": "m"}
    seq = wal.begin(
        scope,
        call=1,
        attempt=1,
        **fields,
        endpoint="http://127.0.0.1",
        request_sha256="a" * 64,
        key=f"k{chunk}",
        prompt_tokens=3,
        max_tokens=5,
        bound_cost=0.0,
    )
    if ends:
        attempt = LLMAttempt(
            call=1, attempt=1, **fields, status=AttemptStatus.OK, request_sha256="a" * 64
        )
        wal.end(seq, attempt, None)


def test_lines_of_journaled_attempts_are_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calllog, "PRUNE_LINES", 64)
    journaled = DigestSet()
    wal = WriteAhead(None, None)
    wal.journaled = lambda: journaled
    for chunk in range(CALLS):
        _attempt(wal, chunk, ends=chunk % 100 != 7)  # some never hear back
        if chunk % 10 != 3:  # most are journaled as they end
            journaled.add(("ask", "doc.md", "extract", f"c{chunk:04d}", 1, 1))
    # bounded: about twice what is not journaled, not every line of the run
    assert len(wal._lines) < 2 * CALLS / 10 + 64
    missing = {p.chunk for p in wal.pending(journaled)}
    assert missing == {f"c{c:04d}" for c in range(CALLS) if c % 10 == 3}
    in_doubt = [p for p in wal.pending(journaled) if p.chunk == "c0007"]
    assert in_doubt == []  # journaled: not pending
    never = [p for p in wal.pending(journaled) if p.chunk == "c0103"]
    assert len(never) == 1 and never[0].attempt.status is AttemptStatus.OK


def test_without_what_the_journal_holds_every_line_is_kept() -> None:
    wal = WriteAhead(None, None)
    for chunk in range(100):
        _attempt(wal, chunk)
    assert len(wal._lines) == 200
    assert len(wal.pending(set())) == 100
