"""The Python API (docs/python-api.md) and the command line share one journal, one
cache and the same identities: a run from Python resumes from the CLI with every stage
reused, and the other way round; errors are typed exceptions, never SystemExit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import runjournal
from support.paths import EXAMPLE


@pytest.fixture
def glossary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    dest = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    monkeypatch.chdir(dest)
    return dest


def _cli(*args: str) -> dict:
    """`runjournal ARGS --json` in a fresh process: its exit code must be 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "runjournal.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_python_run_resumes_from_the_cli_with_every_stage_reused(glossary: Path) -> None:
    project = runjournal.Project.open(glossary / "pipeline.toml", jobs=2)
    first = project.run()
    assert first.succeeded and first.end is runjournal.RunEnd.OK
    assert set(first.decisions) == {"checkpoint_missing"}
    glossary_md = first.outputs["glossary.md"]
    assert Path(glossary_md.path).is_file() and glossary_md.bytes.startswith(b"#")
    assert glossary_md.size == len(glossary_md.bytes)

    doc = _cli("run", "pipeline.toml", "--resume")
    assert doc["status"] == "succeeded" and set(doc["decisions"]) == {"reused"}
    assert doc["decisions"]["reused"] == first.decisions["checkpoint_missing"]
    assert {o["name"]: o["sha256"] for o in doc["outputs"]} == {
        name: o.sha256 for name, o in first.outputs.items()
    }

    again = project.run()  # and from the CLI's run back to Python
    assert set(again.decisions) == {"reused"}
    assert [r["run_id"] for r in project.runs()] == [first.run_id, doc["run_id"], again.run_id]
    assert project.audit(doc["run_id"])["verdict"] == "ok"
    assert project.explain(again.run_id)["run_id"] == again.run_id
    assert project.plan().decisions == {"reused": first.decisions["checkpoint_missing"]}


def test_a_cli_run_resumes_from_python(glossary: Path) -> None:
    doc = _cli("run", "pipeline.toml")
    result = runjournal.Project.open(glossary).run(resume=True)
    assert set(result.decisions) == {"reused"}
    assert result.run_id != doc["run_id"] and result.status == "succeeded"


def test_errors_are_typed_exceptions(glossary: Path) -> None:
    with pytest.raises(runjournal.UsageError, match="cannot read pipeline file"):
        runjournal.Project.open(glossary / "missing.toml")
    with pytest.raises(runjournal.UsageError, match="not settings: colour"):
        runjournal.Project.open(glossary, colour="red")
    project = runjournal.Project.open(glossary)
    with pytest.raises(runjournal.UsageError, match="unknown step 'nope'"):
        project.run(recompute=["nope"])
    with pytest.raises(runjournal.UsageError, match="--max-cost"):
        project.run(max_cost=-1)
    assert project.runs() == []  # nothing was allocated by a refused run
