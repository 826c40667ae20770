"""End-to-end: a module that kills its own worker process (docs/operations.md "Executors").

Issue #25, defects 5 and 6. Every call of `once` kills its worker the first time it runs
(a marker file per chunk makes the second run answer): under `processes` the calls in
flight beside it used to fail `worker_lost`, and under `dask` the run could wait for good
(the LocalCluster hard-closed the nannies of workers slow to come back, leaving no worker
and the calls queued). Now both runs finish, every call answered once. A call of
`always` on one document kills every worker that runs it: that call alone ends as
`worker_lost`, every other document's calls succeed. Each run is bounded by a timeout
(scaled by `RUNJOURNAL_TEST_TIMEOUT_SCALE` on a slow machine), never waited on for good.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI, console_script

SCALE = float(os.environ.get("RUNJOURNAL_TEST_TIMEOUT_SCALE", "1"))
TIMEOUT_S = 300 * SCALE
DOCS = 8

PLUGIN = '''
import os
import time

from runjournal.domain.modules import Module, Normalized


class Dies(Module):
    """Kills its worker: every call once (`once`), or every call on one lane (`always`)."""

    fingerprint = "test.dies/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        probe, mode = ctx.params["probe_dir"], ctx.params["die"]
        marker = os.path.join(probe, f"died-{chunk.id}")
        if mode == "always" and ctx.lane == "docs/d1.md":
            open(marker + f"-{os.getpid()}", "w").close()
            os._exit(3)
        if mode == "once" and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)
        time.sleep(0.2)
        with open(os.path.join(probe, f"done-{os.getpid()}-{chunk.id}"), "w"):
            pass
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
'''

PIPELINE = """name = "dies"
inputs = ["docs/*.md"]

[[steps]]
id = "count"
module = "plugins/dies.py:Dies"
scope = "document"
params = {{ probe_dir = "{probe}", die = "{die}" }}
"""


def _project(root: Path, die: str) -> Path:
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "dies.py").write_text(PLUGIN)
    (root / "docs").mkdir()
    for i in range(DOCS):
        (root / "docs" / f"d{i}.md").write_text(f"Document {i} has {'word ' * (i + 1)}here.\n")
    (root / "probe").mkdir()
    path = root / "pipeline.toml"
    path.write_text(PIPELINE.format(probe=root / "probe", die=die))
    return path


def _run(cli: CLI, pipeline: Path, executor: str, *args: str) -> tuple[int, dict[str, Any], str]:
    root = pipeline.parent
    argv = [*console_script(), "run", str(pipeline), "--executor", executor, "--jobs", "2"]
    argv += ["--output-root", str(root / "out"), "--cache-root", str(root / "cache")]
    argv += ["--no-progress", "--json", *args]
    proc = subprocess.Popen(
        argv,
        cwd=cli.cwd,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(f"--executor {executor}: the run hung (no answer in {TIMEOUT_S:.0f} s)")
    return proc.returncode, json.loads(out), err


def _events(cli: CLI, root: Path, run_id: str) -> list[dict[str, Any]]:
    proc, doc = cli.json("journal", "show", run_id, "--output-root", str(root / "out"))
    assert proc.returncode == 0, proc.stderr
    return doc["events"]


@pytest.fixture(params=["processes", "dask"])
def executor(request: pytest.FixtureRequest) -> str:
    if request.param == "dask":
        pytest.importorskip("distributed")
    return str(request.param)


def test_a_module_that_kills_its_worker_once_finishes_every_call_once(
    tmp_path: Path, executor: str
) -> None:
    cli = CLI(tmp_path / "home")
    pipeline = _project(tmp_path / "project", "once")
    code, doc, err = _run(cli, pipeline, executor)
    assert code == 0, err
    assert doc["status"] == "succeeded" and doc["failures"] == [], doc["error"]
    probe = tmp_path / "project" / "probe"
    died = {p.name.removeprefix("died-") for p in probe.glob("died-*")}
    answered = Counter(p.name.split("-", 2)[2] for p in probe.glob("done-*"))
    assert len(died) == DOCS  # every call killed a worker once
    assert set(answered) == died  # then answered
    if executor == "processes":
        assert set(answered.values()) == {1}  # once; Dask computes again a result lost
        # with the worker that held it before it was fetched: journaled once all the same
    events = _events(cli, tmp_path / "project", doc["run_id"])
    executed = Counter(
        (e["data"]["lane"], e["data"]["stage"]) for e in events if e["type"] == "StageExecuted"
    )
    assert set(executed.values()) == {1} and len(executed) == 3 * DOCS
    assert not [e for e in events if e["type"] == "StageFailed"]


def test_a_module_that_always_kills_its_worker_fails_only_its_own_call(
    tmp_path: Path, executor: str
) -> None:
    cli = CLI(tmp_path / "home")
    pipeline = _project(tmp_path / "project", "always")
    code, doc, err = _run(cli, pipeline, executor, "--keep-going")
    assert code == 1, err
    failures = doc["failures"]
    assert [(f["lane"], f["cause"]) for f in failures] == [("docs/d1.md", "worker_lost")], failures
    assert "WorkerLost" in doc["error"]["message"]
    probe = tmp_path / "project" / "probe"
    answered = {p.name.split("-", 2)[2] for p in probe.glob("done-*")}
    assert len(answered) == DOCS - 1  # every other document's call answered
    deaths = len(list(probe.glob("died-*")))
    assert deaths >= 2  # it was tried again, in another process
    if executor == "processes":
        assert deaths == 3  # the shared pool's death, then two of its own, run alone
