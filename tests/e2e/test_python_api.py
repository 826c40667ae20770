"""The Python API (docs/python-api.md) and the command line share one journal, one
cache and the same identities: a run from Python resumes from the CLI with every stage
reused, and the other way round; errors are typed exceptions, never SystemExit."""

from __future__ import annotations

from pathlib import Path

import pytest
import runjournal
from support.python_api_project import cli_json, glossary_copy


@pytest.fixture
def glossary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return glossary_copy(tmp_path, monkeypatch)


def test_a_python_run_resumes_from_the_cli_with_every_stage_reused(glossary: Path) -> None:
    project = runjournal.Project.open(glossary / "pipeline.toml", jobs=2)
    first = project.run()
    assert first.succeeded and first.end is runjournal.RunEnd.OK
    assert set(first.decisions) == {"checkpoint_missing"}
    glossary_md = first.outputs["glossary.md"]
    assert Path(glossary_md.path).is_file() and glossary_md.bytes.startswith(b"#")
    assert glossary_md.size == len(glossary_md.bytes)

    doc = cli_json("run", "pipeline.toml", "--resume")
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
    doc = cli_json("run", "pipeline.toml")
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
