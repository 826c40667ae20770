"""docs/modules.md: every Python block runs, and the complete example runs as a pipeline.

Markers (an HTML comment on the line before the block):

- `plugin: PATH`: the block is a plugin file; it is imported, and written to PATH in a
  project directory for the pipeline block;
- `fragment`: compiled only (not meant to run on its own);
- no marker: run in a copy of the namespace of the nearest plugin block above it (or a
  fresh one), so its `assert`s are checked.

The `pipeline` TOML block is run with the plugin (and a `--set` the plugin reads), then
resumed, then run with another value of that key: the documented behaviour of the
example, checked end to end through the CLI in-process.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.cli.main import cli
from support.paths import DOCS

DOC = DOCS / "modules.md"
BLOCK = re.compile(
    r"(?:<!-- (?P<mark>[^\n]*?) -->\n)?```(?P<lang>python|toml)\n(?P<body>.*?)```", re.S
)
DOCS_TEXT = {
    "docs/a.md": "Checkpoints make reruns cheap.\n\nEvery checkpoint records facts.\n",
    "docs/b.md": "Journals record every decision.\n\nDecisions explain reruns.\n",
}


def _blocks() -> list[tuple[str, str, str, int]]:
    text = DOC.read_text(encoding="utf-8")
    return [
        (
            m.group("mark") or "",
            m.group("lang"),
            m.group("body"),
            text.count("\n", 0, m.start()) + 1,
        )
        for m in BLOCK.finditer(text)
    ]


BLOCKS = _blocks()
PYTHON = [(mark, body, line) for mark, lang, body, line in BLOCKS if lang == "python"]


def _load_plugin(body: str, line: int) -> dict:
    """Exec a plugin block as a module registered in sys.modules (msgspec needs that)."""
    name = f"_modules_docs_plugin_{line}"
    module = types.ModuleType(name)
    module.__file__ = str(DOC)
    sys.modules[name] = module
    exec(compile(body, f"{DOC}:{line}", "exec"), module.__dict__)
    return module.__dict__


def test_the_page_has_every_kind_of_block() -> None:
    marks = [mark.split(":")[0] for mark, _, _ in PYTHON]
    assert "plugin" in marks and "fragment" in marks and "" in marks
    assert set(marks) <= {"plugin", "fragment", ""}
    text = DOC.read_text(encoding="utf-8")
    assert text.count("```python") == len(PYTHON), "a python block the pattern missed"
    toml_marks = [mark for mark, lang, _, _ in BLOCKS if lang == "toml"]
    assert toml_marks.count("pipeline") == 1 and set(toml_marks) <= {"pipeline", "fragment"}


def test_toml_fragments_parse() -> None:
    fragments = [body for mark, lang, body, _ in BLOCKS if lang == "toml" and mark == "fragment"]
    assert fragments
    for body in fragments:
        tomllib.loads(body)


@pytest.mark.parametrize(
    ("mark", "body", "line"),
    PYTHON,
    ids=[f"line{line}-{m.split(':')[0] or 'plain'}" for m, _, line in PYTHON],
)
def test_python_block_runs(mark: str, body: str, line: int) -> None:
    if mark == "fragment":
        compile(body, f"{DOC}:{line}", "exec")
        return
    if mark.startswith("plugin:"):
        namespace = _load_plugin(body, line)
        assert any(isinstance(v, type) for v in namespace.values())
        return
    above = [(m, b, ln) for m, b, ln in PYTHON if ln < line and m.startswith("plugin:")]
    namespace = dict(_load_plugin(above[-1][1], above[-1][2])) if above else {}
    exec(compile(body, f"{DOC}:{line}", "exec"), namespace)


def test_the_documented_types_are_the_api() -> None:
    import runjournal.domain.modules as api

    text = DOC.read_text(encoding="utf-8")
    for name in api.__all__:
        assert f"### `{name}`" in text or f"`{name}`" in text, name
    fields = {
        "Chunk": api.Chunk.__struct_fields__,
        "StageContext": api.StageContext.__struct_fields__,
        "Normalized": api.Normalized.__struct_fields__,
        "OutputFile": api.OutputFile.__struct_fields__,
    }
    for type_name, names in fields.items():
        section = text.split(f"### `{type_name}`")[1].split("\n### ")[0]
        for field in names:
            assert f"`{field}`" in section, (type_name, field)
    module_section = text.split("### `Module`")[1].split("\n### ")[0]
    for attr in ("name", "fingerprint", "artifact_kind", "schema", "media_type", "override_keys"):
        assert f"`{attr}`" in module_section, attr
    for method in ("extract", "merge", "normalize", "outputs"):
        assert f"`{method}(" in module_section, method


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    for mark, _lang, body, _line in BLOCKS:
        if mark.startswith("plugin:"):
            path = tmp_path / mark.split(":", 1)[1].strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        elif mark == "pipeline":
            (tmp_path / "pipeline.toml").write_text(body)
    for name, text in DOCS_TEXT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(*extra: str) -> dict:
    result = CliRunner().invoke(
        cli,
        ["run", "pipeline.toml", "--output-root", "out", "--cache-root", "cache", "--json", *extra],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_complete_example_runs_resumes_and_honours_its_override(project: Path) -> None:
    first = _run("--set", "audience=operators")
    page = (Path(first["run_dir"]) / "index.md").read_text()
    assert page.startswith("# Word index for operators\n")
    assert (
        "- **checkpoints** (1): docs/a.md" in page
        and "**reruns** (2): docs/a.md, docs/b.md" in page
    )
    words = json.loads(next((Path(first["run_dir"]) / "artifacts" / "words").iterdir()).read_text())
    assert all(len(w["word"]) >= 5 for w in words)  # params.min_length = 5
    again = _run("--set", "audience=operators", "--resume")
    assert set(again["decisions"]) == {"reused"}
    other = _run("--set", "audience=writers", "--resume")
    # the decisions as `explain` gives them (a fully reused lane is one reuse summary in
    # the journal: docs/internals.md "Reuse summaries")
    explained = json.loads(
        CliRunner()
        .invoke(cli, ["explain", other["run_id"], "--output-root", "out", "--json"])
        .stdout
    )
    codes: dict[str, set[str]] = {}
    for step in explained["steps"]:
        for lane in step["lanes"]:
            codes.setdefault(step["step"], set()).update(d["code"] for d in lane["decisions"])
    assert codes == {"words": {"reused"}, "index": {"overrides_changed"}}
    assert (Path(other["run_dir"]) / "index.md").read_text().startswith("# Word index for writers")


def test_a_key_the_example_does_not_read_is_refused(project: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", "pipeline.toml", "--output-root", "out", "--set", "audiense=x"]
    )
    assert result.exit_code == 2
    assert "did you mean 'audience'?" in result.stderr
    assert "words: none; index: audience" in result.stderr
