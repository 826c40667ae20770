"""`journal show --jsonl` and the text form stream the run's events (docs/operations.md
"Reading a journal"); `--json` stays one document with the same events.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runjournal.adapters.journal import store as journal_store
from runjournal.adapters.journal.codec import EventMapper
from support import synthetic as syn
from support.inprocess import InProcess, one_error_line


@pytest.fixture
def many(tmp_path: Path) -> tuple[Path, syn.SyntheticRun]:
    out = tmp_path / "out"
    return out, syn.synthetic_journal(out, lanes=3, chunks=4)


def test_jsonl_is_one_object_per_event_equal_to_the_json_document(
    many: tuple[Path, syn.SyntheticRun], invoke: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, run = many
    where = ["--output-root", str(out)]
    # Pages smaller than the run, so the stream crosses several reads.
    monkeypatch.setattr(journal_store, "EVENT_PAGE", 7)
    whole = invoke("journal", "show", run.run_id, "--json", *where)
    lines = invoke("journal", "show", run.run_id, "--jsonl", *where)
    assert whole.exit_code == 0 and lines.exit_code == 0, lines.output
    events = json.loads(whole.stdout)["events"]
    assert len(events) == len(run.events) > 7 * 3
    streamed = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [e.pop("run_id") for e in streamed] == [run.run_id] * len(events)
    assert streamed == events
    assert [e["version"] for e in streamed] == list(range(1, len(events) + 1))


def test_text_lists_every_event_across_pages(
    many: tuple[Path, syn.SyntheticRun], invoke: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, run = many
    monkeypatch.setattr(journal_store, "EVENT_PAGE", 5)
    result = invoke("journal", "show", run.run_id, "--output-root", str(out))
    assert result.exit_code == 0
    versions = [int(line.split()[0]) for line in result.stdout.splitlines()]
    assert versions == list(range(1, len(run.events) + 1))


def test_json_and_jsonl_together_is_a_usage_error(
    many: tuple[Path, syn.SyntheticRun], invoke: InProcess
) -> None:
    out, run = many
    result = invoke("journal", "show", run.run_id, "--json", "--jsonl", "--output-root", str(out))
    assert result.exit_code == 2
    assert "cannot be combined" in one_error_line(result.stderr)


def test_an_undecodable_row_ends_the_stream_with_an_error_line(
    many: tuple[Path, syn.SyntheticRun], invoke: InProcess
) -> None:
    import sqlite3

    out, run = many
    with sqlite3.connect(out / "journal.sqlite3") as db:
        # the first row past version 8 (a delta row may hold several events: its first)
        (version, state) = db.execute(
            "select originator_version, state from stored_events where originator_version > 8"
            " order by originator_version limit 1"
        ).fetchone()
        db.execute(f"update stored_events set topic='nope:Nope' where originator_version={version}")
    first = version - EventMapper().event_count(bytes(state)) + 1
    result = invoke("journal", "show", run.run_id, "--jsonl", "--output-root", str(out))
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert first > 1 and [e["version"] for e in lines[:-1]] == list(range(1, first))
    assert lines[-1]["run_id"] == run.run_id and "cannot read run" in lines[-1]["error"]
    assert "cannot read run" in one_error_line(result.stderr)
