"""The source-changed warning names only the classes whose own code changed (issue 32,
"Found" 4): two steps use two classes of one plugin file, each with an explicit
fingerprint; editing one class warns about its step alone, on every `--resume` until
its fingerprint changes, and never about the other (before, the whole file was digested,
so both steps were named)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PLUGIN = """
from runjournal.domain.modules import Module, Normalized


class First(Module):
    name = "test.first"
    fingerprint = "test.first/1"
    artifact_kind = "words"
    schema = "test.words/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        return len(chunk.text.split()) + {first}

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)


class Second(First):
    name = "test.second"
    fingerprint = "test.second/{second_fp}"

    def extract(self, chunk, ctx):
        return len(chunk.text) + {second}
"""

PIPELINE = """\
name = "two-classes"
inputs = ["docs/*.md"]

[[steps]]
id = "first"
module = "plugins/steps.py:First"

[[steps]]
id = "second"
module = "plugins/steps.py:Second"
"""


def _write(root: Path, *, first: int = 0, second: int = 0, second_fp: int = 1) -> None:
    (root / "plugins" / "steps.py").write_text(
        PLUGIN.format(first=first, second=second, second_fp=second_fp)
    )


def _run(cli: Any, root: Path, *args: str) -> dict:
    proc, doc = cli.json(
        "run",
        "pipeline.toml",
        "--output-root",
        "out",
        "--cache-root",
        "cache",
        "--no-progress",
        *args,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    return doc


def _source_warnings(doc: dict) -> list[tuple[str, str]]:
    return [
        (w["step"], w["message"]) for w in doc["warnings"] if "changed since run" in w["message"]
    ]


def test_only_the_edited_class_is_named_every_time_until_its_fingerprint_changes(
    cli: Any, tmp_path: Path
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "docs" / "a.md").write_text("alpha beta gamma\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    _write(tmp_path)
    assert _source_warnings(_run(cli, tmp_path)) == []
    _write(tmp_path, second=1)  # only Second's own code
    for _ in range(2):  # said on every run, not once
        warned = _source_warnings(_run(cli, tmp_path, "--resume"))
        assert [step for step, _ in warned] == ["second"], warned
        assert "plugins/steps.py:Second" in warned[0][1]
        assert "First" not in warned[0][1]
    _write(tmp_path, second=1, second_fp=2)  # bumped: recomputed, no warning
    doc = _run(cli, tmp_path, "--resume")
    assert _source_warnings(doc) == []
    assert "module_changed" in doc["decisions"]
