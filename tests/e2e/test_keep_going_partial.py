"""End-to-end: `--keep-going` gives a corpus step declaring `partial = true` the documents
that succeeded, and marks its output partial (issue 32; docs/pipeline.md "`partial`").

A document step fails on one document (its text says FAIL); the corpus step lists the
documents it was given. Without `partial` a failed run has no corpus output (as before);
with it the run still fails (exit 1), but the corpus output is written, and `run --json`,
`failure.json`, the warnings, the manifest's outputs and `explain` say which documents
were left out. A `--resume` once the document succeeds runs the corpus step again on
every document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

PLUGIN = '''
import os

from runjournal.domain.modules import Module, Normalized, OutputFile


class Words(Module):
    """Words per document; refuses a document that says FAIL when PROBE_FAIL=1."""

    fingerprint = "test.words/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        if "FAIL" in chunk.text and os.environ.get("PROBE_FAIL") == "1":
            raise RuntimeError(f"refused {ctx.lane}")
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)


class Index(Module):
    """The documents it was given, with their word counts, as index.md."""

    fingerprint = "test.index/1"
    artifact_kind = "index"
    schema = "test.index/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        return 0

    def merge(self, parts, ctx):
        return 0

    def normalize(self, merged, ctx):
        return Normalized(dict(sorted(ctx.consumed["words"].items())))

    def outputs(self, artifact, ctx):
        lines = [f"{name}: {n}" for name, n in artifact.items()]
        return [OutputFile("index.md", ("\\n".join(lines) + "\\n").encode())]
'''

PIPELINE = """
name = "partial"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 4000

[[steps]]
id = "words"
module = "plugins/steps.py:Words"
scope = "document"

[[steps]]
id = "index"
module = "plugins/steps.py:Index"
scope = "corpus"
consumes = ["words"]
{partial}
"""

DOCS = {"a.md": "alpha beta gamma\n", "b.md": "FAIL here\n", "c.md": "one two\n"}


def _project(root: Path, *, partial: bool) -> Path:
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "steps.py").write_text(PLUGIN, encoding="utf-8")
    (root / "docs").mkdir()
    for name, text in DOCS.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    pipeline = root / "pipeline.toml"
    pipeline.write_text(
        PIPELINE.format(partial="partial = true" if partial else ""), encoding="utf-8"
    )
    return pipeline


def _run(cli: Any, root: Path, *args: str, fail: bool) -> tuple[Any, dict]:
    return cli.json(
        "run",
        str(root / "pipeline.toml"),
        *args,
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--no-progress",
        env={"PROBE_FAIL": "1" if fail else "0"},
    )


def test_without_partial_a_failed_keep_going_run_has_no_corpus_output(
    cli: Any, tmp_path: Path
) -> None:
    _project(tmp_path, partial=False)
    proc, doc = _run(cli, tmp_path, "--keep-going", fail=True)
    assert proc.returncode == 1, proc.stderr
    assert doc["status"] == "failed"
    assert doc["outputs"] == []
    assert doc["partial"] == []
    run_dir = Path(doc["run_dir"])
    assert not (run_dir / "index.md").exists()
    assert "partial" not in json.loads((run_dir / "failure.json").read_text())
    assert "partial" not in json.loads((run_dir / "manifest.json").read_text())


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_partial_corpus_step_gets_the_documents_that_succeeded_and_says_which_were_left_out(
    cli: Any, tmp_path: Path, jobs: str
) -> None:
    _project(tmp_path, partial=True)
    proc, doc = _run(cli, tmp_path, "--keep-going", "--jobs", jobs, fail=True)
    assert proc.returncode == 1, proc.stderr
    assert doc["status"] == "failed"
    assert [(f["step"], f["lane"]) for f in doc["failures"]] == [("words", "docs/b.md")]
    run_dir = Path(doc["run_dir"])
    # the corpus output, of the documents that succeeded
    assert (run_dir / "index.md").read_text() == "docs/a.md: 3\ndocs/c.md: 2\n"
    names = sorted(o["name"] for o in doc["outputs"])
    assert names == ["artifacts/index/corpus.json", "index.md"]
    # marked partial wherever a user looks: run --json, failure.json, the warnings
    expected = [
        {
            "step": "index",
            "lane": "corpus",
            "left_out": ["docs/b.md"],
            "outputs": ["artifacts/index/corpus.json", "index.md"],
        }
    ]
    assert doc["partial"] == expected
    assert json.loads((run_dir / "failure.json").read_text())["partial"] == expected
    warnings = [w for w in doc["warnings"] if w["step"] == "index"]
    assert len(warnings) == 1 and "docs/b.md" in warnings[0]["message"]
    assert warnings[0]["message"].startswith("partial output:")
    assert "partial output" in proc.stdout + proc.stderr
    # the manifest lists the outputs the failed run kept, and says they are partial
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert sorted(o["name"] for o in manifest["outputs"]) == names
    assert manifest["partial"] == [{"step": "index", "lane": "corpus"}]
    # explain names the partial lane and what it left out
    ex, text = cli.json("explain", doc["run_id"], "--output-root", str(tmp_path / "out"))
    assert ex.returncode == 0, ex.stderr
    assert text["partial"] == [
        {"step": "index", "lane": "corpus", "message": warnings[0]["message"]}
    ]
    plain = cli("explain", doc["run_id"], "--output-root", str(tmp_path / "out"))
    assert "partial output" in plain.stdout and "docs/b.md" in plain.stdout

    # once the document succeeds, --resume runs the corpus step on every document
    proc, doc = _run(cli, tmp_path, "--resume", fail=False)
    assert proc.returncode == 0, proc.stderr
    assert doc["partial"] == []
    assert (Path(doc["run_dir"]) / "index.md").read_text() == (
        "docs/a.md: 3\ndocs/b.md: 2\ndocs/c.md: 2\n"
    )


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_partial_without_keep_going_stops_at_the_first_failure(
    cli: Any, tmp_path: Path, jobs: str
) -> None:
    _project(tmp_path, partial=True)
    proc, doc = _run(cli, tmp_path, "--jobs", jobs, fail=True)
    assert proc.returncode == 1, proc.stderr
    assert doc["outputs"] == [] and doc["partial"] == []


def test_partial_on_a_document_step_is_refused_before_the_run(cli: Any, tmp_path: Path) -> None:
    pipeline = _project(tmp_path, partial=False)
    text = pipeline.read_text().replace(
        'scope = "document"\n', 'scope = "document"\npartial = true\n', 1
    )
    pipeline.write_text(text)
    proc = cli("run", str(pipeline), "--output-root", str(tmp_path / "out"), "--no-progress")
    assert proc.returncode == 2, proc.stderr
    assert "partial" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() or not any(
        p.name.startswith("2") for p in (tmp_path / "out").iterdir()
    )
