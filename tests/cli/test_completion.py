"""Shell completion of values: step ids, run ids, profiles and choices."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner
from runjournal.cli.main import cli

PIPELINE = """\
name = "p"
inputs = ["docs/*.md"]

[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms"]

[[steps]]
id = "terms"
module = "builtin.terms"

[[steps]]
id = "headings"
module = "builtin.headings"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("A **checkpoint** is a **checkpoint**.\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def complete(args: list[str], incomplete: str) -> list[str]:
    comp = ShellComplete(cli, {}, "runjournal", "_RUNJOURNAL_COMPLETE")
    return [item.value for item in comp.get_completions(args, incomplete)]


def _run(out: str = "out") -> str:
    result = CliRunner().invoke(
        cli, ["run", "pipeline.toml", "--output-root", out, "--cache-root", "cache", "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["run_id"]


# --- step ids ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("incomplete", "expected"),
    [("", ["terms", "glossary", "headings"]), ("g", ["glossary"]), ("te", ["terms"]), ("x", [])],
)
def test_recompute_completes_the_pipelines_step_ids(project, incomplete, expected) -> None:
    assert complete(["run", "pipeline.toml", "--recompute"], incomplete) == expected


def test_recompute_after_other_options(project) -> None:
    args = ["run", "pipeline.toml", "--jobs", "2", "--recompute", "terms", "--recompute"]
    assert complete(args, "") == ["terms", "glossary", "headings"]


@pytest.mark.parametrize(
    "pipeline",
    ["missing.toml", "docs", "broken.toml"],
    ids=["missing", "directory", "invalid"],
)
def test_recompute_offers_nothing_when_the_pipeline_is_unreadable(project, pipeline) -> None:
    (project / "broken.toml").write_text("name = = 1\n")
    assert complete(["run", pipeline, "--recompute"], "") == []


# --- run ids -----------------------------------------------------------------------------

RUN_ARGS = [
    ["runs", "show"],
    ["explain"],
    ["journal", "show"],
    ["journal", "audit"],
    ["journal", "export"],
    ["projections", "rebuild", "--run"],
]


def _line(command: list[str]) -> list[str]:
    """The command with --output-root out, ready to complete a run id."""
    if command[-1] == "--run":
        return [*command[:-1], "--output-root", "out", "--run"]
    return [*command, "--output-root", "out"]


@pytest.mark.parametrize("command", RUN_ARGS, ids=" ".join)
def test_run_arguments_complete_run_ids_newest_first(project, command) -> None:
    first, second = _run(), _run()
    assert complete(_line(command), "") == [
        "latest",
        "latest-ok",
        "latest-failed",
        "previous",
        second,
        first,
    ]
    assert complete(_line(command), first[:-3]) == [first]
    assert complete(_line(command), "lat") == ["latest", "latest-ok", "latest-failed"]


def test_run_ids_follow_the_journal_of_the_line(project) -> None:
    here = _run("out")
    there = _run("elsewhere")
    assert complete(["explain", "--output-root", "out"], "2") == [here]
    assert complete(["explain", "--output-root", "elsewhere"], "2") == [there]
    assert complete(["explain", "--journal", "elsewhere/journal.sqlite3"], "2") == [there]


def test_run_ids_from_the_environment(project, monkeypatch) -> None:
    run_id = _run("out")
    monkeypatch.setenv("RUNJOURNAL_OUTPUT_ROOT", "out")
    assert complete(["runs", "show"], "") == [
        "latest",
        "latest-ok",
        "latest-failed",
        "previous",
        run_id,
    ]


def test_explain_step_completes_the_runs_steps(project) -> None:
    run_id = _run()
    args = ["explain", "latest", "--output-root", "out", "--step"]
    assert complete(args, "") == ["terms", "glossary", "headings"]
    assert complete(["explain", run_id, "--output-root", "out", "--step"], "h") == ["headings"]
    assert complete(["explain", "nope", "--output-root", "out", "--step"], "") == []
    assert complete(["explain", "--step"], "") == []


def test_no_journal_no_run_ids(project) -> None:
    assert complete(["explain", "--output-root", "nowhere"], "") == []
    assert complete(["explain", "--jobs"], "") == []  # not an option there: nothing breaks


# --- profiles and choices ----------------------------------------------------------------


def test_profile_completes_builtin_user_config_and_profiles_file(project) -> None:
    config = project / "home" / ".config" / "runjournal"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        '[profiles.mine]\nprovider = "offline"\nmodel = "m"\n', encoding="utf-8"
    )
    (project / "p.toml").write_text(
        '[profiles.team]\nprovider = "offline"\nmodel = "m"\n', encoding="utf-8"
    )
    assert complete(["run", "pipeline.toml", "--profile"], "") == ["mine", "offline"]
    args = ["run", "pipeline.toml", "--profiles-file", "p.toml", "--profile"]
    assert complete(args, "") == ["mine", "offline", "team"]
    assert complete(args, "t") == ["team"]
    shown = ["config", "show", "pipeline.toml", "--profiles-file", "p.toml", "--profile"]
    assert complete(shown, "o") == ["offline"]


def test_profile_with_an_unreadable_profiles_file_offers_nothing(project) -> None:
    (project / "p.toml").write_text("[profiles\n")
    assert complete(["run", "pipeline.toml", "--profiles-file", "p.toml", "--profile"], "") == []


@pytest.mark.parametrize(
    ("option", "incomplete", "expected"),
    [
        ("--cache-mode", "", ["use", "refresh", "read-only", "bypass"]),
        ("--cache-mode", "re", ["refresh", "read-only"]),
        ("--debug", "", ["off", "summary", "trace"]),
        ("--debug", "t", ["trace"]),
    ],
)
@pytest.mark.parametrize("command", [["run"], ["config", "show"]], ids=" ".join)
def test_choices_complete(project, command, option, incomplete, expected) -> None:
    assert complete([*command, "pipeline.toml", option], incomplete) == expected


def test_the_shell_protocol_end_to_end(project) -> None:
    """What `eval "$(_RUNJOURNAL_COMPLETE=bash_source runjournal)"` asks for at each TAB."""
    env = {
        "_RUNJOURNAL_COMPLETE": "bash_complete",
        "COMP_WORDS": "runjournal run pipeline.toml --recompute ",
        "COMP_CWORD": "4",
    }
    result = CliRunner().invoke(cli, [], prog_name="runjournal", env=env)
    assert result.exit_code == 0
    assert result.stdout.split() == ["plain,terms", "plain,glossary", "plain,headings"]
    source = CliRunner().invoke(
        cli, [], prog_name="runjournal", env={"_RUNJOURNAL_COMPLETE": "bash_source"}
    )
    assert "_RUNJOURNAL_COMPLETE=bash_complete" in source.stdout
