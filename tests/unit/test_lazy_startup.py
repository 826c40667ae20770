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
    "runjournal.cli.plan_cmd",
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


def _entry(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script's entry point, as `runjournal ARGS` runs it."""
    code = "import sys; from runjournal.cli.entry import main; sys.argv[0] = 'runjournal'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


def test_version_is_answered_before_click_loads() -> None:
    probe = (
        "import sys\nsys.argv = ['runjournal', '--version']\n"
        "from runjournal.cli.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    loaded = loaded_after(probe)
    assert "click" not in loaded and "runjournal.cli.main" not in loaded


def test_the_early_version_is_what_click_prints() -> None:
    early = _entry("--version")
    group = subprocess.run(
        [sys.executable, "-m", "runjournal.cli.main", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert early.returncode == group.returncode == 0
    assert early.stdout == group.stdout.replace("main.py", "runjournal") and early.stderr == ""
    assert early.stdout.startswith("runjournal, version ")


def test_other_command_lines_reach_the_command_group() -> None:
    proc = _entry("--versio")  # click's own error and exit code, not the early answer
    assert proc.returncode == 2 and "No such option '--versio'" in proc.stderr
    assert proc.stdout == ""
    assert _entry("reasons", "--json").returncode == 0
