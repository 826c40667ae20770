"""Reading a run never imports a module named in the journal's `topic` column.

A database writer sets one row's topic to `this:s`; every command that reads the run
must report the unknown event type in one line (exit 1) and must not import `this`
(which would print "The Zen of Python").
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support import synthetic as syn
from support.inprocess import one_error_line

ZEN = "The Zen of Python"


def _run(cli, example: Path, where: list[str]) -> str:
    proc, doc = cli.json("run", str(example), *where)
    assert proc.returncode == 0, proc.stderr
    return doc["run_id"]


def _readers(run_id: str, tmp_path: Path) -> list[list[str]]:
    return [
        ["journal", "audit", run_id],
        ["journal", "audit", run_id, "--json"],
        ["runs", "show", run_id],
        ["runs", "show", run_id, "--json"],
        ["explain", run_id],
        ["journal", "show", run_id],
        ["journal", "show", run_id, "--json"],
        ["journal", "export", run_id, "-o", str(tmp_path / "run.rjx")],
        ["report", run_id, "-o", str(tmp_path / "report.html")],
        ["projections", "rebuild"],
        ["projections", "rebuild", "manifest", "--run", run_id],
    ]


def _check_every_reader(cli, run_id: str, where: list[str], tmp_path: Path) -> None:
    for args in _readers(run_id, tmp_path):
        proc = cli(*args, *where)
        assert ZEN not in proc.stdout and ZEN not in proc.stderr, args
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        line = one_error_line(proc.stderr)
        assert "event 6" in line and "unknown event type 'this:s'" in line, (args, line)
        if "--json" in args:
            doc = json.loads(proc.stdout)
            assert doc["exit_code"] == 1 and "unknown event type" in doc["error"]["message"]
    assert not (tmp_path / "run.rjx").exists() and not (tmp_path / "report.html").exists()
    # Listing reads only allocations and terminations: unaffected.
    proc = cli("runs", "list", *where)
    assert proc.returncode == 0 and run_id in proc.stdout and ZEN not in proc.stdout


def test_sqlite_topic_is_looked_up_never_imported(cli, example: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    where = ["--output-root", str(out)]
    run_id = _run(cli, example, where)
    with sqlite3.connect(out / "journal.sqlite3") as db:
        changed = db.execute(
            "UPDATE stored_events SET topic = 'this:s' WHERE originator_version = 6"
        ).rowcount
    assert changed == 1
    _check_every_reader(cli, run_id, where, tmp_path)


def test_postgres_topic_is_looked_up_never_imported(cli, example: Path, tmp_path: Path) -> None:
    with syn.backend("postgres", tmp_path) as url:
        where = ["--journal", url, "--output-root", str(tmp_path / "out")]
        run_id = _run(cli, example, where)
        syn.pg_execute(
            url, "UPDATE runjournal_events SET topic = 'this:s' WHERE originator_version = 6"
        )
        _check_every_reader(cli, run_id, where, tmp_path)


@pytest.mark.parametrize("topic", ["os:path", "runjournal.domain.events:NoSuchEvent", "x" * 300])
def test_other_unknown_topics_are_one_line(cli, example: Path, tmp_path: Path, topic: str) -> None:
    out = tmp_path / "out"
    where = ["--output-root", str(out)]
    run_id = _run(cli, example, where)
    with sqlite3.connect(out / "journal.sqlite3") as db:
        db.execute("UPDATE stored_events SET topic = ? WHERE originator_version = 3", (topic,))
    proc = cli("journal", "show", run_id, *where)
    assert proc.returncode == 1
    line = one_error_line(proc.stderr)
    assert "event 3" in line and "unknown event type" in line and len(line) < 600
