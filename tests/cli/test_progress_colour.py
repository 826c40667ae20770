"""Progress at start-up and for reused runs; TERM=dumb; colour only on a terminal.

CliRunner's streams are not terminals, so "a terminal" is simulated by replacing the one
terminal check (`is_terminal`); tests/e2e/test_terminal_pty.py does it for real.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.cli import keys_cmds  # noqa: F401 - see below
from runjournal.cli import progress as progress_mod
from runjournal.cli import style as style_mod
from runjournal.cli.main import cli

# `keys_cmds` binds `style.is_terminal` by name when it is first imported. The command
# line imports it lazily, so without the import above the first run of this file, made
# under the `terminal` fixture's patch, bound the patched one for the rest of the
# session, and later runs printed the signing hint on a stderr that is not a terminal.

PIPELINE = """\
name = "p"
inputs = ["docs/*.md"]

[[steps]]
id = "terms"
module = "builtin.terms"

[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms"]
"""
DOC = "A **checkpoint** is a saved result.\n\nEvery **checkpoint** records its facts.\n"
SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    (tmp_path / "docs").mkdir()
    for name in ("a.md", "b.md"):
        (tmp_path / "docs" / name).write_text(DOC)
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    monkeypatch.chdir(tmp_path)
    # Every update is shown, however quick the run.
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)
    monkeypatch.setattr(progress_mod, "DUMB_INTERVAL_S", 0.0)
    monkeypatch.setattr(progress_mod, "MAX_WIDTH", 300)  # whole lines, whatever the width
    monkeypatch.setenv("COLUMNS", "300")
    return tmp_path


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(style_mod, "is_terminal", lambda stream: True)
    monkeypatch.setattr(progress_mod, "is_terminal", lambda stream: True)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env, color=True, catch_exceptions=False)


def run(*extra: str, env: dict[str, str] | None = None):
    return invoke(
        "run", "pipeline.toml", "--output-root", "out", "--cache-root", "cache", *extra, env=env
    )


# --- progress ---------------------------------------------------------------------------


def test_progress_at_start_up_and_for_a_fully_reused_run(project, terminal) -> None:
    assert run().exit_code == 0
    result = run("--resume")
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "\r\x1b[2Kopening the journal" in err
    assert "\r\x1b[2Kresolving pipeline 'p'" in err
    assert "\r\x1b[2Kplanning chunks · docs/a.md" in err
    updates = [u for u in err.split("\r\x1b[2K") if u]
    reused = [u for u in updates if " │ " in u and u.endswith(" reused")]
    # One update per stage decision of the fully reused run: 2 lanes of terms (extract per
    # chunk, merge, normalize) and the glossary's corpus lane.
    decided = json.loads(run("--resume", "--json").stdout)["decisions"]
    n = sum(decided.values())
    assert len(reused) == n and set(decided) == {"reused"}
    assert reused[-1].startswith(f"stages {n}/{n} ({n} reused, 0 executed) · 0 in flight · ")
    assert reused[0].startswith(f"stages 1/{n} (1 reused, 0 executed)")
    assert reused[-1].endswith(" │ glossary · corpus · normalize reused")
    assert err.endswith("\r\x1b[2K")  # cleared before the summary
    assert result.stdout.startswith("run ")


def test_progress_of_a_computing_run_shows_chunks(project, terminal) -> None:
    err = run().stderr
    assert "terms · docs/a.md · chunk 1/2" in err or "terms · docs/a.md · chunk 1/1" in err
    assert " executed) · " in err and " · merge not_resumed" in err


def test_dumb_terminal_gets_plain_lines(project, terminal) -> None:
    run()
    result = run("--resume", env={"TERM": "dumb"})
    assert result.exit_code == 0
    err = result.stderr
    assert "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    assert lines[0] == "runjournal: opening the journal"
    assert "runjournal: resolving pipeline 'p'" in lines
    assert all(line.startswith("runjournal: ") for line in lines)
    assert any(line.endswith(" reused") and " reused, " in line for line in lines)
    assert not SGR.search(result.stdout)  # and no colour


@pytest.mark.parametrize(
    "extra", [["--no-progress"], ["--json"], ["-q"]], ids=["no-progress", "json", "quiet"]
)
def test_no_progress_when_switched_off(project, terminal, extra) -> None:
    result = run(*extra)
    assert result.exit_code == 0
    assert result.stderr == ""


def test_progress_setting_from_the_environment(project, terminal) -> None:
    assert run(env={"RUNJOURNAL_PROGRESS": "off"}).stderr == ""


def test_no_progress_when_stderr_is_not_a_terminal(project) -> None:
    assert run().stderr == ""


def test_an_error_clears_the_progress_line_first(project, terminal) -> None:
    # An input that matches no file is found while resolving (an unknown module is found
    # before the progress line starts, since issue 32).
    (project / "pipeline.toml").write_text(PIPELINE.replace('"docs/*.md"', '"nothing/*.md"'))
    result = run()
    assert result.exit_code == 2
    err = result.stderr
    assert "resolving pipeline 'p'\r\x1b[2Krunjournal: error: " in err
    assert err.endswith("\n")


# --- colour -----------------------------------------------------------------------------


def _plain(text: str) -> str:
    return SGR.sub("", text)


def test_run_summary_colours_status_and_reason_categories(project, terminal) -> None:
    first = run()
    assert "\x1b[32m\x1b[1msucceeded\x1b[0m" in first.stdout  # green, bold
    assert "\x1b[34mnot_resumed\x1b[0m" in first.stdout  # execution: blue
    again = run("--resume")
    assert "\x1b[32mreused\x1b[0m" in again.stdout  # reuse: green
    assert _plain(again.stdout).splitlines()[0].endswith(" succeeded")


@pytest.mark.parametrize(
    "command",
    [["reasons"], ["runs", "list"], ["runs", "show", "latest"], ["explain", "latest"]],
    ids=" ".join,
)
def test_query_commands_are_coloured_on_a_terminal(project, terminal, command) -> None:
    run()
    extra = [] if command == ["reasons"] else ["--output-root", "out"]
    coloured = invoke(*command, *extra)
    assert coloured.exit_code == 0
    assert SGR.search(coloured.stdout)
    for env in ({"NO_COLOR": "1"}, {"TERM": "dumb"}):
        plain = invoke(*command, *extra, env=env)
        assert plain.stdout == _plain(coloured.stdout), env
    assert not SGR.search(invoke(*command, *extra, "--json").stdout)


def test_empty_no_color_does_not_switch_colour_off(project, terminal) -> None:
    assert SGR.search(invoke("reasons", env={"NO_COLOR": ""}).stdout)


@pytest.mark.parametrize(
    "command",
    [["reasons"], ["runs", "list"], ["explain", "latest"]],
    ids=" ".join,
)
def test_no_colour_when_stdout_is_not_a_terminal(project, command) -> None:
    run()
    extra = [] if command == ["reasons"] else ["--output-root", "out"]
    assert not SGR.search(invoke(*command, *extra).stdout)


def test_reason_categories_each_have_a_colour() -> None:
    from runjournal.domain.events import RunStatus
    from runjournal.domain.reasons import Category

    assert set(style_mod.CATEGORY_COLOURS) == set(Category)
    assert set(style_mod.STATUS_COLOURS) == set(RunStatus)
    painted = style_mod.Styler(True)
    assert painted.code("reused", "reused") == "\x1b[32mreused\x1b[0m"
    assert painted.code("x", "not-a-code") == "x"
    assert style_mod.Styler(False).status("failed", "failed") == "failed"
