"""`explain RUN --json` streams the reasons view a lane at a time: byte for byte the
document `emit_json` prints for the whole view, also when lanes interleave in the journal
(`--jobs N`) and the run spans many pages (docs/performance.md "Reading commands on a
large run")."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from runjournal.adapters.journal import open_journal
from runjournal.adapters.journal import store as journal_store
from runjournal.cli.output import emit_json
from runjournal.projections.base import fold
from runjournal.projections.reasons_report import ReasonReportProjection
from support import synthetic as syn
from support.inprocess import InProcess


def _journal(out: Path, run: syn.SyntheticRun) -> None:
    with open_journal(str(out / "journal.sqlite3")) as store:
        store.append_events(run.run_id, run.events)


def _whole(run: syn.SyntheticRun) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        emit_json(fold(ReasonReportProjection(), run.events).view())
    return printed.getvalue()


def _lane_runs(run: syn.SyntheticRun) -> int:
    """How many stretches of consecutive events of one lane the journal holds."""
    lanes = [e.lane for e in run.events if hasattr(e, "lane") and e.lane]  # type: ignore[attr-defined]
    return sum(1 for i, lane in enumerate(lanes) if i == 0 or lanes[i - 1] != lane)


@pytest.mark.parametrize(("lanes", "chunks", "jobs"), [(1, 1, 1), (5, 4, 1), (5, 4, 3), (7, 9, 4)])
def test_streamed_explain_json_is_the_whole_view(
    tmp_path: Path,
    invoke: InProcess,
    monkeypatch: pytest.MonkeyPatch,
    lanes: int,
    chunks: int,
    jobs: int,
) -> None:
    contiguous = syn.synthetic_run(syn.run_id_for(lanes * 7 + jobs), lanes=lanes, chunks=chunks)
    run = syn.interleave_lanes(contiguous, jobs)
    if jobs > 1:
        assert _lane_runs(run) > _lane_runs(contiguous) == lanes
    out = tmp_path / "out"
    _journal(out, run)
    monkeypatch.setattr(journal_store, "EVENT_PAGE", 5)  # pages smaller than a lane
    result = invoke("explain", run.run_id, "--json", "--output-root", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == _whole(run)
    # Interleaving changes neither the order of lanes nor any lane's decisions.
    assert result.stdout == _whole(contiguous)
    doc = json.loads(result.stdout)
    listed = [d for s in doc["steps"] for lane in s["lanes"] for d in lane["decisions"]]
    assert len(listed) == len(contiguous.decisions) == lanes * (chunks + 2)
