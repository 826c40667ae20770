"""`fingerprint = "source"` for plugin classes (issue 32): the class's own code and prompt
strings are its fingerprint, so an edited prompt re-executes its steps on `--resume`
(before, an edit without a bump kept stale results), and an edit of another class of the
same file changes nothing for this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLUGIN = """
from runjournal.domain.modules import Module, Normalized

PREFIX = "{prefix}"


class Tagged(Module):
    name = "test.tagged"
    fingerprint = "source"
    artifact_kind = "tagged"
    schema = "test.tagged/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]
    override_keys = ()
    llm_stages = ()
    prompt = "{prompt}"

    def extract(self, chunk, ctx):
        return [PREFIX + self.prompt + w for w in chunk.text.split()[:2]]

    def merge(self, parts, ctx):
        return [w for p in parts for w in p]

    def normalize(self, merged, ctx):
        return Normalized(merged, [])


class Other(Tagged):
    name = "test.other"
    fingerprint = "other/{other}"
"""

PIPELINE = """\
name = "src"
inputs = ["docs/*.md"]

[[steps]]
id = "tagged"
module = "plugins/tagged.py:Tagged"
"""


def _write(root: Path, *, prompt: str = "p1", prefix: str = "x", other: int = 1) -> None:
    (root / "plugins" / "tagged.py").write_text(
        PLUGIN.format(prompt=prompt, prefix=prefix, other=other)
    )


def _run(root: Path, *extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    env["HOME"] = str(root / "home")
    done = subprocess.run(
        [sys.executable, "-c", "from runjournal.cli.entry import main; main()", "run",
         "pipeline.toml", "--output-root", "out", "--cache-root", "cache", "--json", *extra],
        cwd=root, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_edited_prompt_re_executes_a_source_fingerprinted_class(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "docs" / "a.md").write_text("alpha beta gamma\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    _write(tmp_path)
    assert set(_run(tmp_path)["decisions"]) == {"not_resumed"}
    assert set(_run(tmp_path, "--resume")["decisions"]) == {"reused"}
    _write(tmp_path, other=2)  # another class of the same file: nothing changes here
    again = _run(tmp_path, "--resume")
    assert set(again["decisions"]) == {"reused"} and again["warnings"] == []
    _write(tmp_path, other=2, prompt="p2")  # the class's own prompt
    edited = _run(tmp_path, "--resume")
    assert "reused" not in edited["decisions"], edited["decisions"]
    _write(tmp_path, other=2, prompt="p2", prefix="y")  # a module string its code reads
    assert "reused" not in _run(tmp_path, "--resume")["decisions"]
    [glossary] = (Path(edited["run_dir"]) / "artifacts" / "tagged").glob("*.json")
    assert json.loads(glossary.read_text()) == ["xp2alpha", "xp2beta"]
