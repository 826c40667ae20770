"""End-to-end: the scheduler across lanes and steps, and the failure policy.

docs/operations.md "`--jobs N`": every ready lane's module calls share one bound, so
16 one-chunk documents run their extracts concurrently; outputs, decisions and the
journal's event order are the same whatever N; the first failure stops new work, and
`--keep-going` lets every lane not downstream of a failure finish, after which
`--resume` executes only the failed document's stages and its dependents.

The plugin's extract sleeps and logs how many extracts were running when it started
(in this process), so concurrency is asserted without timing.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PLUGIN = '''
import os
import threading
import time

from runjournal.domain.modules import Module, Normalized

_lock = threading.Lock()
_running = 0


class Sleepy(Module):
    """Counts words per chunk, sleeping like an LLM call; fails on FAIL when asked."""

    fingerprint = "test.sleepy/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        global _running
        with _lock:
            _running += 1
            now = _running
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"{ctx.step}\\t{ctx.lane}\\textract\\t{now}\\n")
        try:
            time.sleep(float(ctx.params.get("delay", 0.0)))
            if "FAIL" in chunk.text and os.environ.get("PROBE_FAIL") == "1":
                raise RuntimeError(f"refused {ctx.lane}")
            return len(chunk.text.split())
        finally:
            with _lock:
                _running -= 1

    def merge(self, parts, ctx):
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"{ctx.step}\\t{ctx.lane}\\tmerge\\t0\\n")
        return sum(parts)

    def normalize(self, merged, ctx):
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"{ctx.step}\\t{ctx.lane}\\tnormalize\\t0\\n")
        seen = sum(v["words"] for lanes in ctx.consumed.values() for v in lanes.values())
        return Normalized({"words": merged, "consumed": seen})
'''

PIPELINE = """
name = "sched"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 4000

[[steps]]
id = "count"
module = "plugins/sleepy.py:Sleepy"
scope = "document"
params = {{ delay = {delay} }}

[[steps]]
id = "again"
module = "plugins/sleepy.py:Sleepy"
scope = "document"
consumes = ["count"]

[[steps]]
id = "total"
module = "plugins/sleepy.py:Sleepy"
scope = "corpus"
consumes = ["again"]
"""

OWN = {"manifest.json", "report.json", "report.html", "failure.json", "error.log"}


@dataclass
class Project:
    cli: Any
    root: Path

    @property
    def log(self) -> Path:
        return self.root / "calls.log"

    def run(self, *args: str, fail: bool = False) -> tuple[Any, dict]:
        self.log.unlink(missing_ok=True)
        return self.cli.json(
            "run",
            str(self.root / "pipeline.toml"),
            *args,
            "--output-root",
            str(self.root / "out"),
            "--cache-root",
            str(self.root / "cache"),
            "--no-progress",
            env={"PROBE_LOG": str(self.log), "PROBE_FAIL": "1" if fail else "0"},
        )

    def calls(self) -> list[tuple[str, str, str, int]]:
        if not self.log.exists():
            return []
        rows = [line.split("\t") for line in self.log.read_text().splitlines()]
        return [(s, lane, stage, int(n)) for s, lane, stage, n in rows]

    def events(self, run_id: str) -> list[dict]:
        proc, doc = self.cli.json(
            "journal", "show", run_id, "--output-root", str(self.root / "out")
        )
        assert proc.returncode == 0, proc.stderr
        return doc["events"]

    def outputs(self, run_dir: str) -> dict[str, str]:
        base = Path(run_dir)
        return {
            str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name not in OWN
        }


def _project(cli: Any, root: Path, docs: int, *, delay: float, failing: str = "") -> Project:
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "sleepy.py").write_text(PLUGIN)
    (root / "docs").mkdir()
    for i in range(docs):
        name = f"d{i:02d}.md"
        extra = " FAIL" if name == failing else ""
        (root / "docs" / name).write_text(f"Document {i} has {'word ' * (i + 1)}here{extra}.\n")
    (root / "pipeline.toml").write_text(PIPELINE.format(delay=delay))
    return Project(cli, root)


def _shape(events: list[dict]) -> list[tuple[Any, ...]]:
    """Event order with what is deterministic: no timestamps, paths or run ids."""
    return [
        (
            e["type"],
            e["data"].get("step"),
            e["data"].get("lane"),
            e["data"].get("stage"),
            e["data"].get("chunk"),
            e["data"].get("code"),
            e["data"].get("sha256"),
        )
        for e in events
        if e["type"] not in ("RunAllocated", "ConfigurationResolved", "RunTerminated")
    ]


def _decisions(events: list[dict]) -> list[tuple[str, ...]]:
    return [
        tuple(e["data"][k] for k in ("step", "lane", "stage", "chunk", "code"))
        for e in events
        if e["type"] == "StageDecided"
    ]


def test_jobs_overlap_across_lanes_and_change_nothing_else(cli: Any, tmp_path: Path) -> None:
    runs: dict[int, tuple[dict, list[dict], dict[str, str], list[tuple[str, str, str, int]]]] = {}
    for jobs in (1, 8):
        project = _project(cli, tmp_path / f"jobs{jobs}", 16, delay=0.2)
        proc, doc = project.run("--jobs", str(jobs))
        assert proc.returncode == 0, proc.stderr
        events = project.events(doc["run_id"])
        runs[jobs] = (doc, events, project.outputs(doc["run_dir"]), project.calls())
        audit, _ = cli.json(
            "journal", "audit", doc["run_id"], "--output-root", str(project.root / "out")
        )
        assert audit.returncode == 0, (audit.stdout, audit.stderr)
    serial, parallel = runs[1], runs[8]
    # one lane's extract per document; with --jobs 8 at least 4 ran at once
    assert max(n for *_, n in serial[3]) == 1
    assert max(n for s, _, stage, n in parallel[3] if s == "count") >= 4
    assert serial[2] == parallel[2] and len(serial[2]) >= 16 * 2 + 1
    assert _decisions(serial[1]) == _decisions(parallel[1])
    assert _shape(serial[1]) == _shape(parallel[1])
    assert serial[0]["module_calls"] == parallel[0]["module_calls"] == 16 * 3 * 2 + 16 + 2
    assert serial[0]["decisions"] == parallel[0]["decisions"]


def _failed_lanes(doc: dict) -> list[tuple[str, str]]:
    return [(f["step"], f["lane"]) for f in doc["failures"]]


@pytest.mark.parametrize("jobs", ["1", "4"])
def test_keep_going_finishes_every_lane_not_downstream_then_resume_runs_the_rest(
    cli: Any, tmp_path: Path, jobs: str
) -> None:
    project = _project(cli, tmp_path / "p", 6, delay=0.0, failing="d02.md")
    proc, doc = project.run("--jobs", jobs, "--keep-going", fail=True)
    assert proc.returncode == 1, proc.stderr
    assert doc["status"] == "failed"
    assert doc["error"]["step"] == "count" and doc["error"]["lane"] == "docs/d02.md"
    assert _failed_lanes(doc) == [("count", "docs/d02.md")]
    failure = doc["failures"][0]
    assert failure["stage"] == "extract" and failure["chunk"]
    assert "RuntimeError: refused docs/d02.md" in failure["message"]
    report = json.loads((Path(doc["run_dir"]) / "failure.json").read_text())
    assert report["failures"] == doc["failures"]
    lanes = {(s, lane, stage) for s, lane, stage, _ in project.calls()}
    others = [f"docs/d{i:02d}.md" for i in range(6) if i != 2]
    for lane in others:  # every lane not downstream of the failure finished
        assert ("again", lane, "normalize") in lanes
    assert not {(s, lane) for s, lane, _ in lanes if s != "count"} & {
        ("again", "docs/d02.md"),
        ("total", "corpus"),
    }
    out = str(project.root / "out")
    audit, _ = cli.json("journal", "audit", doc["run_id"], "--output-root", out)
    assert audit.returncode == 0, audit.stdout  # every decision of the failed run re-decided
    explained, edoc = cli.json("explain", doc["run_id"], "--output-root", out)
    assert explained.returncode == 0, explained.stderr
    assert "docs/d02.md" in json.dumps(edoc["failures"])

    proc, doc = project.run("--jobs", jobs, "--resume")
    assert proc.returncode == 0, proc.stderr
    executed = {(s, lane) for s, lane, _, _ in project.calls()}
    assert executed == {
        ("count", "docs/d02.md"),
        ("again", "docs/d02.md"),
        ("total", "corpus"),
    }


def test_the_first_failure_stops_new_work_and_keeps_what_finished(cli: Any, tmp_path: Path) -> None:
    project = _project(cli, tmp_path / "p", 6, delay=0.0, failing="d00.md")
    proc, doc = project.run("--jobs", "1", fail=True)
    assert proc.returncode == 1, proc.stderr
    assert _failed_lanes(doc) == [("count", "docs/d00.md")]
    # serial: the first lane fails first, and nothing after it starts
    assert {(s, lane) for s, lane, _, _ in project.calls()} == {("count", "docs/d00.md")}
    assert "failures" in json.loads((Path(doc["run_dir"]) / "failure.json").read_text())


def test_an_interrupt_lets_calls_in_flight_finish_and_keeps_them(cli: Any, tmp_path: Path) -> None:
    project = _project(cli, tmp_path / "p", 8, delay=1.5)
    argv = [
        str(Path(sys.executable).parent / "runjournal"),
        "run",
        str(project.root / "pipeline.toml"),
    ]
    argv += [
        "--output-root",
        str(project.root / "out"),
        "--cache-root",
        str(project.root / "cache"),
    ]
    argv += ["--jobs", "4", "--no-progress"]
    env = {**cli.env, "PROBE_LOG": str(project.log), "PROBE_FAIL": "0"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(project.calls()) < 4:
            time.sleep(0.05)
        assert len(project.calls()) == 4  # four extracts in flight, nothing else started
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        proc.wait(timeout=60)
        assert time.monotonic() - started < 5.0 + 3.0  # within the grace bound
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, proc.stderr.read() if proc.stderr else ""
    in_flight = {lane for _, lane, _, _ in project.calls()}
    _listed, runs = cli.json("runs", "list", "--output-root", str(project.root / "out"))
    assert runs["runs"][0]["status"] == "interrupted"
    audit, _ = cli.json(
        "journal", "audit", runs["runs"][0]["run_id"], "--output-root", str(project.root / "out")
    )
    assert audit.returncode == 0, audit.stdout

    proc2, _ = project.run("--jobs", "4", "--resume")
    assert proc2.returncode == 0, proc2.stderr
    extracted = {
        lane for step, lane, stage, _ in project.calls() if (step, stage) == ("count", "extract")
    }
    assert extracted == {f"docs/d{i:02d}.md" for i in range(8)} - in_flight
