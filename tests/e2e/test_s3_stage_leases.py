"""Stage leases across machines on an `s3://` cache root (issue 31): two coordinators
with separate HOMEs (separate mirrors, so separate lock files) sharing a bucket compute a
stage once; the second waits for the first's lease object, then reuses what it wrote
(docs/operations.md "Object-storage cache").
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI

pytest.importorskip("obstore")
pytest.importorskip("boto3")  # the fixture inspects the bucket through it

TIMEOUT = 300

SLOW = '''
import os, time, uuid
from runjournal.domain.modules import Module, Normalized


class Slow(Module):
    """Records each extract it computes, then waits for the test's go file."""

    fingerprint = "test.slow-s3/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        probe = ctx.params["probe_dir"]
        open(os.path.join(probe, f"{chunk.id[:16]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"), "w")
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(probe, "go")) and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
'''


def _run_leases(server: Any, bucket: str) -> list[str]:
    return server.keys(bucket, "team/meta/leases/")


def _wait_until(check: Any, procs: list[Any]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        for proc in procs:
            assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_two_machines_sharing_a_bucket_compute_a_stage_once(tmp_path: Path, seaweedfs: Any) -> None:
    root = tmp_path / "project"
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "slow.py").write_text(SLOW)
    (root / "docs").mkdir()
    for i in range(2):
        (root / "docs" / f"d{i}.md").write_text(f"Document {i} has {'word ' * (i + 1)}here.\n")
    probe = root / "probe"
    probe.mkdir()
    (root / "pipeline.toml").write_text(
        'name = "slow"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "count"\n'
        'module = "plugins/slow.py:Slow"\nscope = "document"\n'
        f'params = {{ probe_dir = "{probe}" }}\n'
    )
    bucket = seaweedfs.bucket()
    env = seaweedfs.env()

    def start(machine: str) -> Any:
        cli = CLI(tmp_path / "homes" / machine)
        out = tmp_path / "runs" / machine
        return cli.start(
            "run",
            str(root / "pipeline.toml"),
            "--output-root",
            str(out),
            "--cache-root",
            f"s3://{bucket}/team",
            "--resume",
            "--json",
            env=env,
        )

    first = start("a")
    # the first machine is inside an extract: it holds that stage's lease
    _wait_until(lambda: any(p.name != "go" for p in probe.iterdir()), [first])
    second = start("b")
    # the second machine has started its run (its run lease is in the bucket) ...
    _wait_until(lambda: sum("/runs/" in k for k in _run_leases(seaweedfs, bucket)) >= 2, [first])
    time.sleep(5)  # ... and had time to reach the stage the first one holds
    (probe / "go").write_text("")
    results = []
    for proc in (first, second):
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        results.append(json.loads(out))

    computed = Counter(p.name.split("-")[0] for p in probe.iterdir() if p.name != "go")
    assert len(computed) == 2 and set(computed.values()) == {1}, computed  # each once
    # the second machine waited for the first's extracts and reused them (a merge or
    # normalize it reaches first, it computes: the first machine may then compute it too
    # if it looked before that write and leased after it, as two runs on one machine)
    assert results[1]["decisions"].get("reused", 0) >= 2, results[1]["decisions"]
    leases = [k for k in _run_leases(seaweedfs, bucket) if "/stages/" in k]
    assert leases == []  # released, none left behind
