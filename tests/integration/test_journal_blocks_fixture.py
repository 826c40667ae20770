"""A journal with block summaries written by `main` before they were applied as a count
(docs/internals.md "A summary applied as a count") reads as it did: the same stored and
expanded events, the same manifest fold, and every rule of the `Run` aggregate holds on
its stored events and on its expanded ones (`fixtures/make_blocks_main.py`)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from runjournal.adapters.journal import open_journal
from runjournal.domain.events import EventsReused
from runjournal.domain.run import Run
from support.paths import FIXTURES


def _maker():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "make_blocks_main", FIXTURES / "make_blocks_main.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_journal_of_blocks_written_before_reads_and_replays_as_it_did(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    shutil.copyfile(FIXTURES / "journal-blocks-main.sqlite3", path)
    expected = json.loads((FIXTURES / "journal-blocks-main.expected.json").read_text())
    assert _maker().reading(str(path)) == expected
    blocks = 0
    with open_journal(str(path)) as journal:
        for summary in journal.list_runs():
            stored = list(journal.events(summary.run_id))
            blocks += sum(1 for e in stored if type(e) is EventsReused)
            assert not Run.replay(stored).violations
            assert not Run.replay(journal.projected_events(summary.run_id)).violations
    assert blocks >= 4  # both resumes journaled their units as blocks
