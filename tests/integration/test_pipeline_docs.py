"""docs/pipeline.md: every TOML block parses with the real parser, runnable ones run.

Markers (an HTML comment on the line before the block): `runnable` (parse, then
`runjournal run` it in a directory holding docs/notes.md, docs/more.md and style.md),
`fragment` (parsed inside a minimal pipeline), `error: <text>` (must fail with <text>).
An unmarked block must parse as a complete pipeline.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.adapters.starter import MORE, NOTES
from runjournal.cli.main import cli
from runjournal.domain.pipeline_spec import PipelineSpecError, parse_pipeline_text
from support.paths import DOCS

DOC = DOCS / "pipeline.md"
BLOCK = re.compile(r"(?:<!-- (?P<mark>[^\n]*?) -->\n)?```toml\n(?P<body>.*?)```", re.S)


def _blocks() -> list[tuple[str, str, int]]:
    text = DOC.read_text(encoding="utf-8")
    return [
        (m.group("mark") or "", m.group("body"), text.count("\n", 0, m.start()) + 1)
        for m in BLOCK.finditer(text)
    ]


BLOCKS = _blocks()
IDS = [f"line{line}-{mark.split(':')[0] or 'plain'}" for mark, _, line in BLOCKS]


def _complete(fragment: str) -> str:
    """A fragment inside the smallest pipeline that has what it lacks."""
    head = ""
    if not re.search(r"(?m)^name\s*=", fragment):
        head += 'name = "fragment"\n'
    if not re.search(r"(?m)^inputs\s*=", fragment):
        head += 'inputs = ["docs/*.md"]\n'
    tail = "" if "[[steps]]" in fragment else '\n[[steps]]\nid = "t"\nmodule = "builtin.terms"\n'
    return head + fragment + tail


def test_the_page_has_blocks_of_every_kind() -> None:
    marks = [mark.split(":")[0] for mark, _, _ in BLOCKS]
    assert marks.count("runnable") >= 3
    assert "fragment" in marks and "error" in marks
    text = DOC.read_text(encoding="utf-8")
    assert text.count("```toml") == len(BLOCKS), "a toml block without a recognised marker"
    assert set(marks) <= {"runnable", "fragment", "error", ""}


@pytest.mark.parametrize(("mark", "body", "line"), BLOCKS, ids=IDS)
def test_block_parses_as_documented(mark: str, body: str, line: int) -> None:
    if mark.startswith("error:"):
        expected = mark.split(":", 1)[1].strip()
        with pytest.raises(PipelineSpecError) as caught:
            parse_pipeline_text(body, file="pipeline.toml")
        assert str(caught.value) == f"pipeline.toml: {expected}"
        return
    text = _complete(body) if mark == "fragment" else body
    spec = parse_pipeline_text(text, file="pipeline.toml")
    assert spec.steps


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "notes.md").write_text(NOTES, encoding="utf-8")
    (root / "docs" / "more.md").write_text(MORE, encoding="utf-8")
    (root / "style.md").write_text("Write plain words.\n", encoding="utf-8")
    monkeypatch.chdir(root)
    return root


RUNNABLE = [(body, line) for mark, body, line in BLOCKS if mark == "runnable"]


@pytest.mark.parametrize(("body", "line"), RUNNABLE, ids=[f"line{ln}" for _, ln in RUNNABLE])
def test_runnable_block_runs(project: Path, body: str, line: int) -> None:
    pipeline = project / "pipeline.toml"
    pipeline.write_text(body, encoding="utf-8")
    out = project.parent / "out"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(pipeline),
            "--output-root",
            str(out),
            "--cache-root",
            str(project.parent / "c"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    run = CliRunner().invoke(
        cli, ["runs", "show", "latest", "--output-root", str(out), "--json"], catch_exceptions=False
    )
    view = json.loads(run.stdout)
    assert view["status"] == "succeeded"
    spec = parse_pipeline_text(body, file="pipeline.toml")
    assert set(view["decisions"]) == {"not_resumed"}
    assert view["pipeline"] == spec.name
