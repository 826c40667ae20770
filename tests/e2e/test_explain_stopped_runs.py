"""End-to-end: `explain` and `runs show` of a run that stopped tell what really ran.

docs/operations.md "`explain`": a decision to execute is journaled before its stage runs,
so a run that is interrupted, abandoned or stopped by a failure holds decisions whose
stage never ran. They are counted apart (`not_started`), never under the reason code as
if they ran, and each decision carries its `outcome`.

The plugin logs every extract it starts (lane and chunk), so "executed" is checked
against what the module was really called for, not against the journal alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI, console_script
from support.sleepy_project import write_sleepy_project


class Project:
    def __init__(self, cli: CLI, root: Path, docs: int, delay: float, failing: str = "") -> None:
        self.cli, self.root = cli, root
        self.env = write_sleepy_project(
            root, name="stopped", docs=docs, delay=delay, failing=failing
        )
        self.log = root / "calls.log"

    def where(self) -> list[str]:
        return ["--output-root", str(self.root / "out")]

    def argv(self, *extra: str) -> list[str]:
        return [*console_script(), *self.run_args(*extra)]

    def run_args(self, *extra: str) -> list[str]:
        return [
            "run",
            str(self.root / "pipeline.toml"),
            *self.where(),
            "--cache-root",
            str(self.root / "cache"),
            "--no-progress",
            *extra,
        ]

    def calls(self) -> set[tuple[str, str]]:
        if not self.log.exists():
            return set()
        return {tuple(line.split("\t")) for line in self.log.read_text().splitlines()}  # type: ignore[misc]

    def started_then(self, sig: int, calls: int) -> subprocess.Popen[str]:
        """Start a run, wait until `calls` extracts started, send `sig`, wait for the end."""
        env = {**self.cli.env, **self.env}
        proc = subprocess.Popen(
            self.argv(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(self.calls()) < calls:
                time.sleep(0.02)
            assert len(self.calls()) >= calls
            os.kill(proc.pid, sig)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        return proc

    def json(self, *args: str) -> dict[str, Any]:
        proc, doc = self.cli.json(*args, *self.where())
        assert proc.returncode == 0, proc.stderr
        return doc

    def text(self, *args: str) -> str:
        proc = self.cli(*args, *self.where())
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def executed_events(self, run_id: str) -> set[tuple[str, str, str, str]]:
        events = self.json("journal", "show", run_id)["events"]
        return {
            tuple(e["data"][k] for k in ("step", "lane", "stage", "chunk"))  # type: ignore[misc]
            for e in events
            if e["type"] == "StageExecuted"
        }


def flat(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"step": s["step"], "lane": lane["lane"], **d}
        for s in doc["steps"]
        for lane in s["lanes"]
        for d in lane["decisions"]
    ]


def by_code(decisions: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in decisions:
        counts[d["code"]] = counts.get(d["code"], 0) + 1
    return dict(sorted(counts.items()))


def check_honest(project: Project, run_id: str, status: str) -> list[dict[str, Any]]:
    """explain --json and runs show --json count only what ran; not-started never ran."""
    doc = project.json("explain", run_id)
    assert doc["status"] == status
    decisions = flat(doc)
    executed = [d for d in decisions if d["outcome"] == "executed"]
    never = [d for d in decisions if d["outcome"] == "not_started"]
    # executed means a StageExecuted was journaled for that very stage ...
    assert {(d["step"], d["lane"], d["stage"], d["chunk"] or "") for d in executed} == (
        project.executed_events(run_id)
    )
    # ... and a not-started extract was never called by the module
    called = project.calls()
    extracts = {(d["lane"], d["chunk"]) for d in executed if d["stage"] == "extract"}
    assert extracts <= called
    assert not {(d["lane"], d["chunk"]) for d in never if d["stage"] == "extract"} & called
    effective = [d for d in decisions if d["outcome"] != "not_started"]
    assert doc["totals"] == by_code(effective)
    assert doc["not_started"] == by_code(never)
    assert doc["outcomes"].get("executed", 0) == len(executed)
    assert doc["outcomes"].get("not_started", 0) == len(never)
    shown = project.json("runs", "show", run_id)
    assert shown["status"] == status
    assert shown["decisions"] == doc["totals"] and shown["not_started"] == doc["not_started"]
    return never


def test_an_interrupted_run_says_so_and_lists_never_started_stages_apart(
    cli: CLI, tmp_path: Path
) -> None:
    project = Project(cli, tmp_path / "p", docs=6, delay=0.4)
    proc = project.started_then(signal.SIGINT, calls=3)
    assert proc.returncode == 130, proc.stderr
    run_id = project.json("runs", "list")["runs"][-1]["run_id"]
    never = check_honest(project, run_id, "interrupted")
    assert never, "the interrupt came before every extract was called"
    executed = len(project.executed_events(run_id))

    text = project.text("explain", run_id)
    lines = text.splitlines()
    assert lines[0].startswith(f"run {run_id} (interrupted): not_resumed {executed}")
    assert lines[1].startswith(f"stages: {executed} executed, {len(never)} not started")
    assert "(interrupted: stopped by a signal)" in lines[1]
    assert "not started (decided, never executed: the run stopped before them):" in lines
    shown = project.text("runs", "show", run_id)
    assert f"{run_id}  interrupted" in shown
    assert f"decisions: not_resumed {executed}\n" in shown
    assert f"not started: not_resumed {len(never)} (decided, never executed" in shown

    # the drill-down flags see the same outcomes
    listed = project.text("explain", run_id, "--code", "not_resumed", "--limit", "100")
    assert listed.count("(not started)") == len(never)
    only = project.json("explain", run_id, "--executed")
    assert {d["outcome"] for d in flat(only)} == {"executed"}


def test_an_abandoned_run_says_so_and_counts_only_what_was_journaled_as_run(
    cli: CLI, tmp_path: Path
) -> None:
    project = Project(cli, tmp_path / "p", docs=6, delay=0.3)
    proc = project.started_then(signal.SIGKILL, calls=5)
    assert proc.returncode == -signal.SIGKILL
    recovered = project.json("recover")
    [run_id] = [row["run_id"] for row in recovered["abandoned"]]
    check_honest(project, run_id, "abandoned")
    text = project.text("explain", run_id)
    assert text.startswith(f"run {run_id} (abandoned): ")
    assert "(abandoned: its process died; `recover` recorded it abandoned)" in text
    assert f"{run_id}  abandoned" in project.text("runs", "show", run_id)


@pytest.mark.parametrize(
    ("policy", "never_started"),
    [
        # the first failure stops: only lanes started were decided, and a lane starts only
        # while few calls wait for a slot, see
        # docs/internals.md "The scheduler (`scheduler.py`)": the failed lane's second
        # extract was decided, never started
        ([], 1),
        (["--keep-going"], 1),  # the failed lane's second extract never starts
    ],
)
def test_a_failed_run_counts_the_failed_stage_once_and_what_never_started_apart(
    cli: CLI, tmp_path: Path, policy: list[str], never_started: int
) -> None:
    project = Project(cli, tmp_path / "p", docs=6, delay=0.0, failing="d0.md")
    proc, doc = cli.json(*project.run_args(*policy), env=project.env)
    assert proc.returncode == 1, proc.stderr
    assert doc["not_started"] == {"not_resumed": never_started}
    assert doc["decisions"]["stage_failed"] == 1
    assert sum(doc["decisions"].values()) - 1 == doc["module_calls"] + 1  # + the failed call
    never = check_honest(project, doc["run_id"], "failed")
    assert len(never) == never_started
    explained = project.json("explain", doc["run_id"])
    assert explained["outcomes"]["failed"] == 1
    text = project.text("explain", doc["run_id"])
    assert f"1 failed, {never_started} not started (failed: a stage failed)" in text
