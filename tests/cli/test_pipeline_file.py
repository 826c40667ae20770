"""The pipeline file from the command line: steps in any order, did you mean for every key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.cli.main import cli

STEPS_REVERSED = """\
name = "rev"
inputs = ["docs/*.md"]

[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms", "definitions"]

[[steps]]
id = "definitions"
module = "builtin.definitions"
consumes = ["terms"]

[[steps]]
id = "terms"
module = "builtin.terms"
"""

DOC = "A **checkpoint** is a saved result.\n\nEvery **checkpoint** records its facts.\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(DOC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str):
    return CliRunner().invoke(
        cli, ["run", "pipeline.toml", "--output-root", "out", "--cache-root", "cache", *args]
    )


def test_steps_listed_in_any_order_run_in_dependency_order(project: Path) -> None:
    (project / "pipeline.toml").write_text(STEPS_REVERSED)
    first = run("--json")
    assert first.exit_code == 0, first.output
    events = CliRunner().invoke(
        cli, ["journal", "show", "latest", "--output-root", "out", "--json"]
    )
    lanes = [
        e["data"]["step"]
        for e in json.loads(events.stdout)["events"]
        if e["type"] == "LaneResolved"
    ]
    assert lanes == ["terms", "definitions", "glossary"]
    assert (Path(json.loads(first.stdout)["run_dir"]) / "glossary.md").is_file()
    again = run("--resume", "--json")
    assert again.exit_code == 0
    assert set(json.loads(again.stdout)["decisions"]) == {"reused"}
    recompute = run("--recompute", "definitions", "--json")
    doc = json.loads(recompute.stdout)
    assert recompute.exit_code == 0, recompute.output
    assert doc["recompute"] == {"selected": ["definitions"], "forced": ["definitions", "glossary"]}


BAD = {
    "step-key": (
        STEPS_REVERSED.replace('module = "builtin.terms"', 'modul = "builtin.terms"'),
        "unknown key 'modul' in steps[2]; did you mean 'module'?",
    ),
    "step-scope-key": (
        STEPS_REVERSED.replace('scope = "corpus"', 'scop = "corpus"'),
        "unknown key 'scop' in steps[0]; did you mean 'scope'?",
    ),
    "top-key": (
        STEPS_REVERSED.replace("inputs =", "input ="),
        "unknown key 'input'; did you mean 'inputs'?",
    ),
    "chunking-key": (
        STEPS_REVERSED.replace("[[steps]]", "[chunking]\nmax_char = 3\n\n[[steps]]", 1),
        "unknown key 'max_char' in chunking; did you mean 'max_chars'?",
    ),
    "consumes-typo": (
        STEPS_REVERSED.replace('consumes = ["terms"]', 'consumes = ["trems"]'),
        "steps[1].consumes: 'trems' is not a step; did you mean 'terms'?",
    ),
    "cycle": (
        STEPS_REVERSED.replace(
            'id = "terms"\nmodule = "builtin.terms"',
            'id = "terms"\nmodule = "builtin.terms"\nconsumes = ["glossary"]',
        ),
        "steps: dependency cycle: 'glossary' consumes 'definitions' consumes 'terms' "
        "consumes 'glossary'",
    ),
    "settings-key": (
        STEPS_REVERSED.replace("[[steps]]", "[runjournal]\ncache_mod = 'use'\n\n[[steps]]", 1),
        "did you mean 'cache_mode'?",
    ),
}


@pytest.mark.parametrize("command", [["run"], ["config", "show"]], ids=" ".join)
@pytest.mark.parametrize("case", sorted(BAD))
def test_pipeline_mistakes_are_one_line_with_a_suggestion(project, command, case) -> None:
    text, message = BAD[case]
    (project / "pipeline.toml").write_text(text)
    result = CliRunner().invoke(cli, [*command, "pipeline.toml", "--output-root", "out"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("runjournal: error: ")
    assert lines[0].endswith(message)
    assert not (project / "out").exists()


def test_recompute_typo_gets_a_suggestion(project: Path) -> None:
    (project / "pipeline.toml").write_text(STEPS_REVERSED)
    result = run("--recompute", "glosary")
    assert result.exit_code == 2
    assert result.stderr == (
        "runjournal: error: --recompute names an unknown step 'glosary'; did you mean 'glossary'?\n"
    )
    assert not (project / "out").exists()


def test_resolution_errors_name_the_steps_place_in_the_file(project: Path) -> None:
    (project / "pipeline.toml").write_text(
        STEPS_REVERSED.replace('module = "builtin.terms"', 'module = "builtin.nope"')
    )
    result = run()
    assert result.exit_code == 2
    assert "steps[2].module: cannot load module 'builtin.nope'" in result.stderr
