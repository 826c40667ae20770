"""Runs of one pipeline on the same roots at once, and `gc --cache` while a run runs.

Concurrent runs share the workspace: every checkpoint file is written atomically and a
file of a scope holds the same stage result whoever writes it, so each run completes with
its own right manifest (docs/operations.md "Concurrent runs"). A run holds the cache
root's lock shared for its whole life; `gc --cache` needs it alone, so it never collects
a checkpoint a running run uses. Every subprocess is bounded in time.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support.paths import EXAMPLE

SLOW = """
import time
from runjournal.domain.modules import Module, Normalized

class Slow(Module):
    name = "test.slow"
    fingerprint = "test.slow/1"
    artifact_kind = "words"
    schema = "test.slow/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]

    def extract(self, chunk, ctx):
        time.sleep(ctx.params["delay"])
        return sorted({w.lower() for w in chunk.text.split() if len(w) > 6})

    def merge(self, parts, ctx):
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""

TIMEOUT = 240


def _project(tmp_path: Path, delay: float = 0.0) -> Path:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    (project / "plugins" / "slow.py").write_text(SLOW)
    with (project / "pipeline.toml").open("a") as fh:
        fh.write(
            '\n[[steps]]\nid = "slow"\nmodule = "plugins/slow.py:Slow"\n'
            f'scope = "document"\nparams = {{ delay = {delay} }}\n'
        )
    return project


def _roots(tmp_path: Path) -> list[str]:
    return ["--output-root", str(tmp_path / "out"), "--cache-root", str(tmp_path / "cache")]


def _finish(proc: subprocess.Popen[str]) -> tuple[int, dict, str]:
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, json.loads(out) if out.strip() else {}, err


def _audit_clean(cli, tmp_path: Path, run_id: str) -> None:
    proc = cli("journal", "audit", run_id, *_roots(tmp_path)[:2], timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _outputs(run_dir: Path) -> dict[str, str]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for output in manifest["outputs"]:
        data = (run_dir / output["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == output["sha256"], output["name"]
    return {o["name"]: o["sha256"] for o in manifest["outputs"]}


@pytest.mark.parametrize("count", [2, 4])
def test_concurrent_runs_on_the_same_roots_are_all_right(cli, tmp_path, count):
    project = _project(tmp_path)
    pipeline = str(project / "pipeline.toml")
    procs = [
        cli.start("run", pipeline, *_roots(tmp_path), "--resume", "--json") for _ in range(count)
    ]
    results = [_finish(p) for p in procs]
    for code, _doc, err in results:
        assert code == 0, err
    docs = [doc for _code, doc, _err in results]
    assert len({d["run_id"] for d in docs}) == count
    outputs = []
    for doc in docs:
        _audit_clean(cli, tmp_path, doc["run_id"])
        outputs.append(_outputs(tmp_path / "out" / doc["run_id"]))
    assert all(o == outputs[0] for o in outputs)
    # the workspace they shared is whole: a later resume reuses every stage
    proc, again = cli.json("run", pipeline, *_roots(tmp_path), "--resume", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert set(again["decisions"]) == {"reused"}, again["decisions"]
    assert _outputs(tmp_path / "out" / again["run_id"]) == outputs[0]


def test_gc_during_a_run_never_collects_what_the_run_uses(cli, tmp_path):
    project = _project(tmp_path, delay=0.05)
    pipeline = project / "pipeline.toml"
    proc, _first = cli.json("run", str(pipeline), *_roots(tmp_path), timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    # a new scope for the slow step: the run writes checkpoints the journal does not
    # reference until its events are committed, while it reuses the other steps' ones
    pipeline.write_text(pipeline.read_text().replace("delay = 0.05", "delay = 0.06"))
    run = cli.start("run", str(pipeline), *_roots(tmp_path), "--resume", "--json")
    skipped = 0
    deadline = time.monotonic() + TIMEOUT
    try:
        while run.poll() is None and time.monotonic() < deadline:
            gc, doc = cli.json("gc", "--cache", *_roots(tmp_path), timeout=60)
            assert gc.returncode == 0, gc.stderr
            skipped += bool(doc["cache"]["skipped"])
    finally:
        code, second, err = _finish(run)
    assert code == 0, err
    assert skipped > 0, "no gc ran while the run held the cache"
    assert "reused" in second["decisions"] and "config_changed" in second["decisions"]
    _audit_clean(cli, tmp_path, second["run_id"])
    # what it used and wrote is still there: a resume straight after reuses every stage
    proc, third = cli.json("run", str(pipeline), *_roots(tmp_path), "--resume", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert set(third["decisions"]) == {"reused"}, third["decisions"]
    assert _outputs(tmp_path / "out" / third["run_id"])
