"""Runs at `--jobs 64` against the fake LLM server with every directory-handle cache at
size 1 and at its default (issue #25 defect 1: `operation on a closed FsRoot`; docs/
internals.md "Objects shared between threads").

Each of RJ_STRESS_RUNS iterations (default 4) is a cold run of RJ_STRESS_DOCS documents
(default 200) x 2 chunks, one `llm.json` call per chunk at 200 ms, then a `--resume` of it
that calls nothing and reads every checkpoint back; both must succeed and `journal audit`
must find both in order. The issue's figure is RJ_STRESS_RUNS=20 RJ_STRESS_DOCS=500.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI
from support.llm_servers import ServerProcess, fake_key_env, start_fake, write_chunked_project

RUNS = int(os.environ.get("RJ_STRESS_RUNS", "4"))
DOCS = int(os.environ.get("RJ_STRESS_DOCS", "200"))
CHUNKS = 2
JOBS = 64
LATENCY = 0.2
DIR_HANDLES = "RJ_TEST_DIR_HANDLES"  # cli/compose.py, test-only


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(latency=LATENCY) as server:
        yield server


def audited(cli: CLI, run_id: str, out: Path) -> dict[str, Any]:
    proc, doc = cli.json("journal", "audit", run_id, "--output-root", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert doc["differences"] == [] and doc["chain"]["status"] == "verified", doc
    return doc


@pytest.mark.parametrize("handles", ["1", ""], ids=["handles-1", "handles-default"])
def test_runs_at_64_jobs_never_use_a_closed_handle(
    cli: CLI, fake: ServerProcess, tmp_path: Path, handles: str
) -> None:
    calls = DOCS * CHUNKS
    base = write_chunked_project(tmp_path / "project", fake.url, docs=DOCS, chunks=CHUNKS)
    env = {**fake_key_env(), DIR_HANDLES: handles}  # "" is the default size
    out = tmp_path / "out"
    # a hang guard, not a timing claim: 64 calls overlap, each waits LATENCY
    timeout = 120 + calls * LATENCY
    failures: list[str] = []
    for i in range(RUNS):
        cache = tmp_path / f"cache-{i}"
        args = [*base, "--output-root", str(out), "--cache-root", str(cache)]
        args += ["--jobs", str(JOBS), "--no-progress"]
        for extra, expected_calls in (((), calls), (("--resume",), 0)):
            proc, doc = cli.json(*args, *extra, env=env, timeout=timeout)
            if proc.returncode != 0:
                failures.append(f"run {i} {extra}: exit {proc.returncode}: {proc.stderr[-500:]}")
                continue
            assert doc["llm"]["spent"]["calls"] == expected_calls
            assert doc["decisions"] and not doc["failures"] and not doc["persistence_errors"]
            audited(cli, doc["run_id"], out)
    assert failures == [], f"{len(failures)} of {2 * RUNS} runs failed"
