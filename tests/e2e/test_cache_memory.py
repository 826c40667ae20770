"""A cache that remembers: checkpoints are found by what the stage is, not where it is.

The glossary example (terms -> definitions -> glossary, so a switched producer parameter
changes its consumers' D) run through the console script: a parameter switched A -> B -> A
reuses every stage the third time, with the reasons of the second run still honest and
`runs diff` still naming what changed; `plan` predicts the third run exactly; two pipeline
files that share a `name` alternate without evicting each other's checkpoints.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from support.cache_entries import cache_entries, checkpoints
from support.paths import EXAMPLE


class Project:
    def __init__(self, cli, root: Path, shared: Path, name: str = "p") -> None:
        self.cli = cli
        self.dir = root / name
        shutil.copytree(EXAMPLE, self.dir)
        self.pipeline = self.dir / "pipeline.toml"
        self.roots = ("--output-root", str(shared / "out"), "--cache-root", str(shared / "cache"))

    def set_min_count(self, value: int) -> None:
        text = self.pipeline.read_text()
        start = text.index("min_count = ") + len("min_count = ")
        end = text.index(",", start)
        self.pipeline.write_text(text[:start] + str(value) + text[end:])

    def run(self, *extra: str) -> dict:
        proc, doc = self.cli.json("run", str(self.pipeline), *self.roots, *extra, timeout=180)
        assert proc.returncode == 0, proc.stderr
        return doc

    def plan(self, *extra: str) -> dict:
        proc, doc = self.cli.json("plan", str(self.pipeline), *self.roots, *extra, timeout=180)
        assert proc.returncode == 0, proc.stderr
        return doc


def _codes_by_step(cli, roots: tuple[str, ...], run_id: str) -> dict[str, set[str]]:
    """Each step's decision codes, as `explain` gives them (a fully reused lane is one
    reuse summary in the journal: docs/internals.md "Reuse summaries")."""
    proc, doc = cli.json("explain", run_id, *roots[:2])
    assert proc.returncode == 0, proc.stderr
    out: dict[str, set[str]] = {}
    for step in doc["steps"]:
        for lane in step["lanes"]:
            out.setdefault(step["step"], set()).update(d["code"] for d in lane["decisions"])
    return out


def test_a_b_a_parameter_switch_reuses_every_stage_the_third_time(cli, tmp_path):
    project = Project(cli, tmp_path, tmp_path)
    first = project.run()
    total = sum(first["decisions"].values())
    project.set_min_count(3)
    second = project.run("--resume")
    codes = _codes_by_step(cli, project.roots, second["run_id"])
    # the second run's reasons are what changed: the switched step's config, its consumers' D
    assert codes["terms"] == {"config_changed"}
    assert "dependency_invalidated" in codes["definitions"]
    assert codes["headings"] == {"reused"}
    project.set_min_count(2)
    plan = project.plan("--resume")
    third = project.run("--resume")
    assert third["decisions"] == {"reused": total}
    assert plan["decisions"] == third["decisions"]
    assert {o["name"]: o["sha256"] for o in third["outputs"]} == {
        o["name"]: o["sha256"] for o in first["outputs"]
    }
    # and what changed between the second and third runs is still visible
    proc, diff = cli.json("runs", "diff", second["run_id"], third["run_id"], *project.roots[:2])
    assert proc.returncode == 0, proc.stderr
    changed = {s["step"]: s["components"] for s in diff["steps"] if s["components"]}
    assert changed == {"terms": ["config"]}, diff["steps"]


def test_two_pipelines_sharing_a_name_alternate_without_evicting_each_other(cli, tmp_path):
    one = Project(cli, tmp_path, tmp_path, "one")
    two = Project(cli, tmp_path, tmp_path, "two")
    two.set_min_count(3)
    # the same lane names, different bytes in one of them: merge and normalize differ too
    doc = two.dir / "docs" / "01-overview.md"
    doc.write_text(doc.read_text() + "\nAn appended paragraph about the **Journal**.\n")
    totals = {}
    for project in (one, two):
        totals[project] = sum(project.run().get("decisions", {}).values())
    for _ in range(2):
        for project in (one, two):
            assert project.plan("--resume")["decisions"] == {"reused": totals[project]}
            doc = project.run("--resume")
            assert doc["decisions"] == {"reused": totals[project]}, doc["decisions"]


def _to_old_layout(workspace: Path) -> int:
    """Move every checkpoint to where the layout before scopes and before the packed store
    kept it (a workspace written by an older runjournal): the files
    `<lane>/extract/<chunk>.ckpt` and `<lane>/<stage>.ckpt`, no pointers."""
    cache = workspace.parents[1]
    prefix = f"workspaces/{workspace.name}/"
    moved = 0
    for entry in checkpoints(cache, prefix + "steps/*/*/*/*/*.ckpt"):
        parts = entry.rel[len(prefix) :].split("/")  # steps, step, lane, sid, D, ...
        lane = workspace.joinpath(*parts[:3])
        target = lane / "extract" / parts[-1] if parts[-2] == "extract" else lane / parts[-1]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(entry.read_bytes())
        entry.unlink()
        moved += 1
    for pointer in cache_entries(cache, prefix + "steps/*/*/latest.*"):
        pointer.unlink()
    for lane in workspace.glob("steps/*/*"):
        for scope in lane.iterdir():
            if scope.is_dir() and scope.name != "extract":
                shutil.rmtree(scope)
    return moved


def test_a_workspace_of_the_old_layout_keeps_working(cli, tmp_path):
    project = Project(cli, tmp_path, tmp_path)
    first = project.run()
    total = sum(first["decisions"].values())
    workspace = tmp_path / "cache" / "workspaces" / "glossary"
    assert _to_old_layout(workspace) > 0
    assert not checkpoints(workspace.parents[1], "workspaces/glossary/steps/*/*/*/*/*.ckpt")
    assert project.plan("--resume")["decisions"] == {"reused": total}
    doc = project.run("--resume")
    assert doc["decisions"] == {"reused": total}
    # a change is still named against the old files, and written in the new layout
    project.set_min_count(3)
    changed = project.run("--resume")
    assert "config_changed" in changed["decisions"]
    assert checkpoints(workspace.parents[1], "workspaces/glossary/steps/terms/*/*/0/extract/*.ckpt")
    # gc keeps the old files the kept runs reused; nothing is lost for them
    proc, _doc = cli.json("gc", "--cache", *project.roots, timeout=180)
    assert proc.returncode == 0, proc.stderr
    project.set_min_count(2)
    assert project.run("--resume")["decisions"] == {"reused": total}
