"""Runs racing for the same lanes, with a lease per lane (domain/leases.py `lane_lease`,
docs/operations.md "Concurrent runs").

Every stage of a lane takes the lane's one lease, and the lane holds it from its first
executed stage to its end. Here, round after round, a few `run --resume` processes of one
small LLM pipeline start at once on one cache root, against the fake OpenAI server with a
little latency (so that they overlap), with the smallest settings (`--jobs 1` and 2, lanes
of one and of several chunks): every request reaches the server exactly once, every run
succeeds, and the runs' spent calls add up to the requests made. Every subprocess is
bounded in time; no bound is asserted on the wall.

Size: RUNJOURNAL_STRESS_LANE_LEASE_ROUNDS (default 6) rounds of
RUNJOURNAL_STRESS_LANE_LEASE_RUNS (default 3) runs.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import CLI
from support.llm_servers import CHUNKED_PIPELINE, FAKE_PROFILE, ServerProcess, start_fake

ROUNDS = int(os.environ.get("RUNJOURNAL_STRESS_LANE_LEASE_ROUNDS", "6"))
RUNS = int(os.environ.get("RUNJOURNAL_STRESS_LANE_LEASE_RUNS", "3"))
TIMEOUT = 240
# documents and their chunks: a lane of one chunk, lanes of several
DOCS = {"a.md": 1, "b.md": 3, "c.md": 2}


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(latency=0.03) as server:
        yield server


def _project(root: Path, url: str, round_: int) -> list[str]:
    (root / "docs").mkdir(parents=True)
    for name, chunks in DOCS.items():
        paras = [f"Round {round_} document {name} paragraph {i}." for i in range(chunks)]
        (root / "docs" / name).write_text("\n\n".join(paras) + "\n")
    (root / "pipeline.toml").write_text(CHUNKED_PIPELINE)
    (root / "profiles.toml").write_text(FAKE_PROFILE.format(url=url))
    return [
        "run",
        str(root / "pipeline.toml"),
        "--cache-root",
        str(root / "cache"),
        "--profile",
        "fake",
        "--profiles-file",
        str(root / "profiles.toml"),
        "--resume",
        "--json",
        "--no-progress",
    ]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_runs_at_once_ask_each_request_once(
    cli: CLI, fake: ServerProcess, tmp_path: Path, round_: int
) -> None:
    args = _project(tmp_path / "p", fake.url, round_)
    before = len(fake.requests())
    procs = [
        cli.start(*args, "--output-root", str(tmp_path / f"out{i}"), "--jobs", str(1 + i % 2))
        for i in range(RUNS)
    ]
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        docs.append(json.loads(out))
    asked = collections.Counter(r["prompt"] for r in fake.requests()[before:])
    assert len(asked) == sum(DOCS.values())
    assert set(asked.values()) == {1}, asked  # no stage was executed by two runs
    assert sum(doc["llm"]["spent"]["calls"] for doc in docs) == sum(DOCS.values())
