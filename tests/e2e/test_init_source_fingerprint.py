"""A project made by `runjournal init` has `fingerprint = "source"` as the default for
its plugin classes (issue 32; docs/pipeline.md "`plugin_fingerprint`"): a class that
declares no `fingerprint` is fingerprinted by its own code, so an edited prompt
re-executes its steps on `--resume`, on the coordinator and on worker processes alike.
A pipeline without `plugin_fingerprint` still refuses such a class before the run, and a
class that declares a fingerprint keeps it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

PLUGIN = """
from runjournal.domain.modules import Module, Normalized


class Tagged(Module):
    name = "test.tagged"
    artifact_kind = "tagged"
    schema = "test.tagged/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]
    prompt = "{prompt}"

    def extract(self, chunk, ctx):
        return [self.prompt + w for w in chunk.text.split()[:2]]

    def merge(self, parts, ctx):
        return [w for p in parts for w in p]

    def normalize(self, merged, ctx):
        return Normalized(merged, [])


class Pinned(Tagged):
    name = "test.pinned"
    fingerprint = "test.pinned/1"
"""

STEP = """
[[steps]]
id = "tagged"
module = "plugins/tagged.py:{cls}"
"""


def _init(cli: Any, root: Path, cls: str = "Tagged") -> Path:
    proc = cli("init", str(root / "demo"))
    assert proc.returncode == 0, proc.stderr
    project = root / "demo"
    (project / "plugins").mkdir()
    _plugin(project, "p1")
    pipeline = project / "pipeline.toml"
    pipeline.write_text(pipeline.read_text() + STEP.format(cls=cls))
    return project


def _plugin(project: Path, prompt: str) -> None:
    (project / "plugins" / "tagged.py").write_text(PLUGIN.format(prompt=prompt))


def _run(cli: Any, project: Path, *args: str) -> dict:
    proc, doc = cli.json("run", "pipeline.toml", "--no-progress", *args, cwd=project)
    assert proc.returncode == 0, proc.stderr
    return doc


def test_init_makes_source_the_default_fingerprint_of_plugin_classes(
    cli: Any, tmp_path: Path
) -> None:
    project = _init(cli, tmp_path)
    spec = tomllib.loads((project / "pipeline.toml").read_text())
    assert spec["plugin_fingerprint"] == "source"
    check = cli("check", "pipeline.toml", cwd=project)
    assert check.returncode == 0, check.stderr  # no fingerprint needed
    _run(cli, project)
    resumed = _run(cli, project, "--resume")
    assert set(resumed["decisions"]) == {"reused"}
    _plugin(project, "p2")  # an edited prompt, no fingerprint to bump
    edited = _run(cli, project, "--resume")
    assert "module_changed" in edited["decisions"], edited["decisions"]
    artifacts = sorted((Path(edited["run_dir"]) / "artifacts" / "tagged").glob("*.json"))
    assert len(artifacts) == 2  # the starter's two notes
    for artifact in artifacts:
        assert all(w.startswith("p2") for w in json.loads(artifact.read_text()))


def test_worker_processes_resolve_the_default_as_the_coordinator(cli: Any, tmp_path: Path) -> None:
    project = _init(cli, tmp_path)
    threads = _run(cli, project)
    processes = _run(cli, project, "--executor", "processes", "--jobs", "2")
    assert processes["status"] == "succeeded"
    name = "artifacts/tagged"
    digests = [
        sorted((o["name"], o["sha256"]) for o in doc["outputs"] if o["name"].startswith(name))
        for doc in (threads, processes)
    ]
    assert digests[0] == digests[1] and digests[0]


def test_without_plugin_fingerprint_a_class_must_declare_one(cli: Any, tmp_path: Path) -> None:
    project = _init(cli, tmp_path)
    pipeline = project / "pipeline.toml"
    pipeline.write_text(pipeline.read_text().replace('plugin_fingerprint = "source"\n', ""))
    proc = cli("run", "pipeline.toml", "--no-progress", cwd=project)
    assert proc.returncode == 2
    assert "fingerprint" in proc.stderr and "Traceback" not in proc.stderr


def test_a_declared_fingerprint_is_kept(cli: Any, tmp_path: Path) -> None:
    project = _init(cli, tmp_path, cls="Pinned")
    _run(cli, project)
    _plugin(project, "p2")  # no bump: the declared fingerprint is trusted (and warned about)
    doc = _run(cli, project, "--resume")
    assert set(doc["decisions"]) == {"reused"}
    assert any("fingerprint 'test.pinned/1' did not" in w["message"] for w in doc["warnings"])


@pytest.mark.parametrize("value", ['"sauce"', "true"])
def test_plugin_fingerprint_takes_only_source(cli: Any, tmp_path: Path, value: str) -> None:
    project = _init(cli, tmp_path)
    pipeline = project / "pipeline.toml"
    text = pipeline.read_text().replace('"source"', value, 1)
    pipeline.write_text(text)
    proc = cli("check", "pipeline.toml", cwd=project)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert "plugin_fingerprint" in line
