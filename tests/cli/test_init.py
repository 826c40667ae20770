"""`init --output-root X` and `init --journal J` take effect: written into the starter's
[runjournal] table, so `config show` and every run of it use them."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.adapters.starter import PIPELINE
from runjournal.cli.main import cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    root = Path(os.path.realpath(tmp_path))
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "home" / ".cache"))
    (root / "work").mkdir()
    monkeypatch.chdir(root / "work")
    return root


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def effective(pipeline: Path) -> dict[str, dict]:
    result = invoke("config", "show", str(pipeline), "--json")
    assert result.exit_code == 0, result.output
    return {row["name"]: row for row in json.loads(result.stdout)["settings"]}


# (flags given to init, run from <root>/work) -> what the pipeline file holds, and the
# effective value `config show` finds from anywhere.
CASES = {
    "output-relative": (
        ["--output-root", "out"],
        {"output_root": "../out"},
        {"output_root": "work/out"},
    ),
    "output-inside": (
        ["--output-root", "demo/out"],
        {"output_root": "out"},
        {"output_root": "work/demo/out"},
    ),
    "output-absolute": (
        ["--output-root", "{root}/abs/runs"],
        {"output_root": "{root}/abs/runs"},
        {"output_root": "abs/runs"},
    ),
    "output-home": (
        ["--output-root", "~/runs"],
        {"output_root": "{root}/home/runs"},
        {"output_root": "home/runs"},
    ),
    "journal-path": (
        ["--journal", "j/journal.sqlite3"],
        {"output_root": "runs", "journal": "../j/journal.sqlite3"},
        {"output_root": "work/demo/runs", "journal": "work/j/journal.sqlite3"},
    ),
    "journal-sqlite-url": (
        ["--journal", "sqlite:///{root}/db/rj.sqlite3"],
        {"output_root": "runs", "journal": "{root}/db/rj.sqlite3"},
        {"output_root": "work/demo/runs", "journal": "db/rj.sqlite3"},
    ),
    "journal-postgres": (
        ["--journal", "postgresql://rj@db.example/runjournal"],
        {"output_root": "runs", "journal": "postgresql://rj@db.example/runjournal"},
        {"output_root": "work/demo/runs"},
    ),
    "both": (
        ["--output-root", "o", "--journal", "o/j.sqlite3"],
        {"output_root": "../o", "journal": "../o/j.sqlite3"},
        {"output_root": "work/o", "journal": "work/o/j.sqlite3"},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_init_writes_its_settings_and_they_take_effect(home: Path, case: str) -> None:
    flags, written, resolved = CASES[case]
    flags = [f.format(root=home) for f in flags]
    result = invoke("init", "demo", *flags, "--json")
    assert result.exit_code == 0, result.output
    pipeline = home / "work" / "demo" / "pipeline.toml"
    table = tomllib.loads(pipeline.read_text(encoding="utf-8"))["runjournal"]
    expected_table = {k: v.format(root=home) for k, v in written.items()}
    assert table == expected_table
    assert json.loads(result.stdout)["settings"] == expected_table
    os.chdir(home)  # the values mean the same place from anywhere
    rows = effective(pipeline)
    for name in table:
        assert rows[name]["origin"] == "pipeline"
        if name in resolved:
            assert rows[name]["value"] == str(home / resolved[name])
        else:
            assert rows[name]["value"] == table[name]


def test_init_without_settings_writes_output_root_runs(home: Path) -> None:
    assert invoke("init", "demo").exit_code == 0
    text = (home / "work" / "demo" / "pipeline.toml").read_text()
    assert tomllib.loads(text)["runjournal"] == {"output_root": "runs"}
    assert tomllib.loads(text)["steps"] == tomllib.loads(PIPELINE)["steps"]
    os.chdir(home)  # relative to the pipeline's directory, not the current one
    assert effective(home / "work" / "demo" / "pipeline.toml")["output_root"]["value"] == str(
        home / "work" / "demo" / "runs"
    )


def test_a_default_starter_is_found_from_a_subdirectory_without_flags(home: Path) -> None:
    """Issue 16: discovery works for every starter project, `init` with no flags too."""
    assert invoke("init", "demo").exit_code == 0
    os.chdir(home / "work" / "demo")
    result = invoke("run", "pipeline.toml", "--cache-root", str(home / "c"), "--json")
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    assert (home / "work" / "demo" / "runs" / "journal.sqlite3").is_file()
    os.chdir(home / "work" / "demo" / "docs")
    listed = invoke("runs", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [run_id]
    assert not (home / "work" / "demo" / "docs" / "runs").exists()


def test_a_run_of_the_initialised_pipeline_uses_the_output_root(home: Path) -> None:
    assert invoke("init", "demo", "--output-root", "results").exit_code == 0
    result = invoke("run", "demo/pipeline.toml", "--cache-root", str(home / "c"), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["run_dir"].startswith(str(home / "work" / "results") + os.sep)
    assert (home / "work" / "results" / "journal.sqlite3").is_file()
    assert not (home / "work" / "runs").exists()
    listed = invoke("runs", "list", "--output-root", "results", "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [doc["run_id"]]


def test_text_output_names_what_was_written(home: Path) -> None:
    result = invoke("init", "demo", "--output-root", "out")
    assert result.exit_code == 0
    assert "output_root = ../out" in result.stdout


REFUSED = {
    "password-in-url": (
        ["--journal", "postgresql://rj:hunter2@db/rj"],
        "init --journal: the URL holds a password",
    ),
    "bad-scheme": (
        ["--journal", "ftp://h/j"],
        "invalid journal 'ftp://h/j' from flag (--journal)",
    ),
    "empty-output": (["--output-root", " "], "invalid output_root ' ' from flag (--output-root)"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unusable_settings_are_refused_and_nothing_is_written(home: Path, case: str) -> None:
    flags, needle = REFUSED[case]
    result = invoke("init", "demo", *flags)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert "hunter2" not in result.stderr
    assert not (home / "work" / "demo").exists()


@pytest.mark.parametrize("option", ["--jobs", "--cache-root", "--cache-mode"])
def test_init_takes_no_other_setting(home: Path, option: str) -> None:
    result = CliRunner().invoke(cli, ["init", "demo", option, "x"])
    assert result.exit_code == 2 and "No such option" in result.output
    assert not (home / "work" / "demo").exists()
