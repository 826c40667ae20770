"""The live journal is tamper-evident: every kind of edit is caught by `journal audit`.

Two real runs are recorded once; each test edits a copy of their journal the way a
database writer would and expects `journal audit` to exit 1 with a line naming the
edited event. "Naive" edits change rows in place (the chain links stay as they were);
"rechained" edits recompute the whole chain with runjournal's own code, which only the
run directory can expose (outputs, artifacts and manifest.json).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.domain.events import (
    ArtifactGenerated,
    InputsFingerprinted,
    LaneResolved,
    OutputWritten,
    RunEvent,
    RunStatus,
    RunTerminated,
    StageDecided,
)
from runjournal.domain.run import run_aggregate_id
from support.console import CLI
from support.journal_forgery import (
    MAPPER,
    decode_row,
    edit_in_place,
    next_row,
    rechain,
    row_at,
    row_name,
    rows_of,
    version_of,
)
from support.paths import EXAMPLE


@dataclass
class Recorded:
    cli: CLI
    out: Path
    journal: Path
    first: str  # a cold run
    second: str  # a --resume of it


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    base = tmp_path_factory.mktemp("tamper")
    home = base / "home"
    home.mkdir()
    cli = CLI(home)
    example = base / "glossary"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    out = base / "out"
    ids = []
    # The resume journals its own events: with block summaries it would name the first
    # run as their source, and a change to the first run would (rightly) fail its audit
    # too (`test_a_change_to_a_block_summarys_source_fails_the_run_that_names_it`).
    for extra in ([], ["--resume", "--no-block-summary"]):
        proc, doc = cli.json(
            "run", str(example / "pipeline.toml"), "--output-root", str(out), *extra
        )
        assert proc.returncode == 0, proc.stderr
        ids.append(doc["run_id"])
    return Recorded(cli, out, out / "journal.sqlite3", ids[0], ids[1])


@pytest.fixture(scope="module")
def summarized(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """A run and a no-op resume whose block summaries name it (docs/internals.md "Block
    summaries")."""
    base = tmp_path_factory.mktemp("summarized")
    (base / "home").mkdir()
    cli = CLI(base / "home")
    example = base / "glossary"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    out = base / "out"
    ids = []
    for extra in ([], ["--resume"]):
        proc, doc = cli.json(
            "run", str(example / "pipeline.toml"), "--output-root", str(out), *extra
        )
        assert proc.returncode == 0, proc.stderr
        ids.append(doc["run_id"])
    return Recorded(cli, out, out / "journal.sqlite3", ids[0], ids[1])


@pytest.fixture
def copy(recorded: Recorded, tmp_path: Path) -> Path:
    """A private copy of the recorded journal (the run directories stay where they are)."""
    target = tmp_path / "journal.sqlite3"
    with sqlite3.connect(recorded.journal) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    return target


def audit(recorded: Recorded, journal: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    where = ["--journal", str(journal), "--output-root", str(recorded.out)]
    return recorded.cli("journal", "audit", run_id, *where)


# --- row-level editing: tests/support/journal_forgery.py -------------------------------


def _renumber(db: sqlite3.Connection, run_id: str, start: int, delta: int) -> None:
    """Shift the versions from `start` on by `delta`, through a free range (primary key)."""
    aggregate = run_aggregate_id(run_id).hex
    db.execute(
        "UPDATE stored_events SET originator_version = originator_version + 1000000 "
        "WHERE originator_id = ? AND originator_version >= ?",
        (aggregate, start),
    )
    db.execute(
        "UPDATE stored_events SET originator_version = originator_version - 1000000 + ? "
        "WHERE originator_id = ? AND originator_version >= 1000000",
        (delta, aggregate),
    )


# --- the checks ------------------------------------------------------------------------


def assert_caught(
    proc: subprocess.CompletedProcess[str], version: int, event: str, check: str = "chain"
) -> str:
    """Exit 1, one stderr line, and a stdout line naming the event found by `check`."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("runjournal: error: audit of run "), errors
    assert " different (" in proc.stdout.splitlines()[0]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(f"  event {version}: ")]
    naming = [line for line in lines if f": {check}: {event}: " in line]
    assert naming, (version, event, proc.stdout)
    return naming[0]


def test_the_recorded_runs_audit_clean_with_a_verified_chain(recorded: Recorded) -> None:
    for run_id in (recorded.first, recorded.second):
        proc = audit(recorded, recorded.journal, run_id)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "hash chain verified" in proc.stdout and "run directory checked" in proc.stdout
        assert proc.stderr == ""
        doc = json.loads(
            recorded.cli(
                "journal", "audit", run_id, "--json", "--output-root", str(recorded.out)
            ).stdout
        )
        assert doc["chain"]["status"] == "verified" and doc["chain"]["breaks"] == []
        assert (
            doc["run_directory"]["status"] == "checked" and doc["run_directory"]["problems"] == []
        )


def _set_status(fields: dict[str, Any]) -> None:
    assert fields["status"] == "succeeded"
    fields["status"] = "failed"


def _set_sha(fields: dict[str, Any]) -> None:
    fields["sha256"] = "0" * 64


def _set_input(fields: dict[str, Any]) -> None:
    fields["sources"][0][1] = "0" * 64  # FileFingerprint is array-like: name, sha256, size


def _set_component(fields: dict[str, Any]) -> None:
    fields["components"]["config"] = "0" * 64


def _set_1999(fields: dict[str, Any]) -> None:
    fields["timestamp"] = datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cls", "change"),
    [
        (RunTerminated, _set_status),
        (OutputWritten, _set_sha),
        (ArtifactGenerated, _set_sha),
        (InputsFingerprinted, _set_input),
        (LaneResolved, _set_component),
        (StageDecided, _set_1999),
    ],
    ids=["status", "output-digest", "artifact-digest", "input-digest", "lane-component", "1999"],
)
def test_a_field_changed_in_place_breaks_the_chain_at_that_event(
    recorded: Recorded, copy: Path, cls: type[RunEvent], change: Callable[[dict[str, Any]], None]
) -> None:
    version = edit_in_place(copy, recorded.first, cls, change)
    with sqlite3.connect(copy) as db:
        name = row_name(*row_at(db, recorded.first, version)[1:])
    line = assert_caught(audit(recorded, copy, recorded.first), version, name)
    assert ": chain: " in line and "does not match its link" in line
    # The other run, untouched, still audits clean in the same journal.
    assert audit(recorded, copy, recorded.second).returncode == 0


def test_a_change_to_a_block_summarys_source_fails_the_run_that_names_it(
    summarized: Recorded, tmp_path: Path
) -> None:
    """The resume's outputs are one `EventsReused` naming the first run: an output digest
    changed in place there fails the first run's audit at that event, and the resume's in
    one line naming the summary and its source, never a clean audit."""
    copy = tmp_path / "journal.sqlite3"
    with sqlite3.connect(summarized.journal) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    assert audit(summarized, copy, summarized.second).returncode == 0
    version = edit_in_place(copy, summarized.first, OutputWritten, _set_sha)
    with sqlite3.connect(copy) as db:
        name = row_name(*row_at(db, summarized.first, version)[1:])
    assert_caught(audit(summarized, copy, summarized.first), version, name)
    proc = audit(summarized, copy, summarized.second)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1, errors
    assert "block summary" in errors[0] and summarized.first in errors[0], errors


def test_a_deleted_middle_event_with_versions_renumbered(recorded: Recorded, copy: Path) -> None:
    with sqlite3.connect(copy) as db:
        version = version_of(db, recorded.first, StageDecided, nth=3)
        count = MAPPER.event_count(row_at(db, recorded.first, version)[2])
        after, topic, state = next_row(db, recorded.first, version)
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = ?",
            (run_aggregate_id(recorded.first).hex, version),
        )
        _renumber(db, recorded.first, version + 1, -count)  # the row's events, renumbered
    line = assert_caught(
        audit(recorded, copy, recorded.first), after - count, row_name(topic, state)
    )
    assert "hash chain broken" in line and "after it do not verify either" in line


def test_the_deleted_last_event_shows_against_the_run_directory(
    recorded: Recorded, copy: Path
) -> None:
    with sqlite3.connect(copy) as db:
        last = rows_of(db, recorded.first)[-1][0]
        assert version_of(db, recorded.first, RunTerminated) == last
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = ?",
            (run_aggregate_id(recorded.first).hex, last),
        )
    proc = audit(recorded, copy, recorded.first)
    line = assert_caught(proc, last, "RunTerminated", check="run directory")
    assert "without a RunTerminated" in line


def test_an_inserted_event(recorded: Recorded, copy: Path) -> None:
    aggregate = run_aggregate_id(recorded.first)
    with sqlite3.connect(copy) as db:
        row = row_at(db, recorded.first, version_of(db, recorded.first, OutputWritten))
        event = next(e for e in decode_row(recorded.first, *row) if isinstance(e, OutputWritten))
        version = event.originator_version  # inserted before the row that holds it
        assert version == row[0] - MAPPER.event_count(row[2]) + 1
        forged = msgspec.structs.replace(event, name="extra.md", sha256="1" * 64)
        _renumber(db, recorded.first, version, +1)
        stored = MAPPER.to_stored_event(forged)
        db.execute(
            "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
            (aggregate.hex, version, stored.topic, stored.state),
        )
    assert_caught(audit(recorded, copy, recorded.first), version, "OutputWritten")


def test_reordered_events(recorded: Recorded, copy: Path) -> None:
    aggregate = run_aggregate_id(recorded.first).hex
    with sqlite3.connect(copy) as db:
        version = version_of(db, recorded.first, StageDecided, nth=1)
        after, topic, state = next_row(db, recorded.first, version)
        for a, b in ((version, -1), (after, version), (-1, after)):
            db.execute(
                "UPDATE stored_events SET originator_version = ? "
                "WHERE originator_id = ? AND originator_version = ?",
                (b, aggregate, a),
            )
    assert_caught(audit(recorded, copy, recorded.first), version, row_name(topic, state))


def test_an_event_moved_to_another_run(recorded: Recorded, copy: Path) -> None:
    source, target = recorded.first, recorded.second
    with sqlite3.connect(copy) as db:
        version = version_of(db, source, OutputWritten)
        _, topic, state = row_at(db, source, version)
        moved = target_last = rows_of(db, target)[-1][0]
        moved += MAPPER.event_count(state)  # the row's events, after the target's last
        after = next_row(db, source, version)[0]
        db.execute(
            "UPDATE stored_events SET originator_id = ?, originator_version = ? "
            "WHERE originator_id = ? AND originator_version = ?",
            (run_aggregate_id(target).hex, moved, run_aggregate_id(source).hex, version),
        )
    assert moved > target_last
    assert_caught(audit(recorded, copy, target), moved, row_name(topic, state))
    proc = audit(recorded, copy, source)
    assert proc.returncode == 1
    assert f"  event {after}: chain: " in proc.stdout  # the hole shows where it was


# --- a careful attacker who recomputes the chain: the run directory shows it --------------


def _forge(cls: type[RunEvent], **fields: Any) -> Callable[[list[RunEvent]], list[RunEvent]]:
    def forge(events: list[RunEvent]) -> list[RunEvent]:
        index = next(i for i, e in enumerate(events) if isinstance(e, cls))
        events[index] = msgspec.structs.replace(events[index], **fields)
        return events

    return forge


@pytest.mark.parametrize(
    ("cls", "fields", "needle"),
    [
        (RunTerminated, {"status": RunStatus.FAILED}, "manifest.json in the run directory"),
        (OutputWritten, {"sha256": "2" * 64}, "in the run directory has sha256"),
        (ArtifactGenerated, {"sha256": "3" * 64}, "in the run directory is"),
    ],
    ids=["status", "output-digest", "artifact-digest"],
)
def test_a_rechained_forgery_shows_against_the_run_directory(
    recorded: Recorded, copy: Path, cls: type[RunEvent], fields: dict[str, Any], needle: str
) -> None:
    rechain(copy, recorded.first, _forge(cls, **fields))
    with sqlite3.connect(copy) as db:
        row = row_at(db, recorded.first, version_of(db, recorded.first, cls))
        version = next(
            e for e in decode_row(recorded.first, *row) if isinstance(e, cls)
        ).originator_version
    proc = audit(recorded, copy, recorded.first)
    line = assert_caught(proc, version, cls.__name__, check="run directory")
    assert needle in line
    assert "hash chain verified" in proc.stdout  # consistent chain: only the directory tells


def test_a_rechained_unchanged_run_is_clean(recorded: Recorded, copy: Path) -> None:
    """The forgery helper itself writes what runjournal writes (so the tests above can fail)."""
    before = sqlite3.connect(copy).execute("SELECT state FROM stored_events").fetchall()
    rechain(copy, recorded.first, lambda events: events)
    after = sqlite3.connect(copy).execute("SELECT state FROM stored_events").fetchall()
    assert sorted(before) == sorted(after)
    assert audit(recorded, copy, recorded.first).returncode == 0
