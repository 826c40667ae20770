"""`runs show` of a run the journal lists but whose events are all gone (issue #27 defect 9).

It printed an empty `running` run and exited 0; now it is one error line, exit 1, with
or without `--json` (docs/operations.md "Exit codes": a run that cannot be read).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from runjournal.domain.run import run_aggregate_id


def test_runs_show_of_a_run_without_events_is_one_line_exit_1(
    cli: Any, example: Path, tmp_path: Path
) -> None:
    out = ["--output-root", str(tmp_path / "out")]
    proc, doc = cli.json("run", str(example), *out, "--cache-root", str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    run_id = doc["run_id"]
    assert cli("runs", "show", run_id, *out).returncode == 0
    with sqlite3.connect(tmp_path / "out" / "journal.sqlite3") as db:
        gone = db.execute(
            "DELETE FROM stored_events WHERE originator_id = ?", (run_aggregate_id(run_id).hex,)
        ).rowcount
    assert gone > 0
    assert run_id in cli("runs", "list", *out).stdout  # still listed

    proc = cli("runs", "show", run_id, *out)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"runjournal: error: run {run_id} is listed but the journal holds none of its events "
        "(its rows were removed; `journal audit` checks the rest)"
    ]
    proc = cli("runs", "show", run_id, *out, "--json")
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert json.loads(proc.stdout)["error"]["message"].startswith(f"run {run_id} is listed")
    assert cli("runs", "show", run_id, *out, "--outputs").returncode == 1
