"""Start-up stays lean: the command group imports no command module and no heavy library.

`runjournal --version`, `--help` and shell completion load only cli/main.py and what its
option declarations need; each command's module (and eventsourcing, the journal, the
adapters, the redaction shapes) is imported when that command runs
(docs/performance.md "Start-up").
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "eventsourcing",
    "openai",
    "httpx",
    "zstandard",
    "sqlite3",
    "runjournal.adapters",
    "runjournal.domain.redaction",
    "runjournal.domain.events",
    "runjournal.cli.run_cmd",
    "runjournal.cli.journal_cmds",
    "runjournal.cli.query_cmds",
    "runjournal.cli.maintenance_cmds",
    "runjournal.cli.projection_cmds",
    "runjournal.cli.report_cmds",
    "runjournal.cli.progress",
)


def loaded_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_importing_the_command_group_loads_nothing_heavy() -> None:
    assert heavy_in(loaded_after("import runjournal.cli.main")) == []


def test_the_probe_sees_a_heavy_import_when_there_is_one() -> None:
    # The check can fail: importing a command module drags the journal in.
    assert "runjournal.cli.run_cmd" in heavy_in(loaded_after("import runjournal.cli.run_cmd"))
