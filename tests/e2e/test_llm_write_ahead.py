"""Paid replies are kept and spend is exact across interrupts, kills and resumes (#26).

A stage asks three sequential questions of the fake server (each takes `LATENCY`).
SIGINT or SIGKILL lands while calls are in flight; then `recover` and `--resume`
finish the run. Checked against the server's own counters (docs/operations.md "LLM
call log"):

- every request the server received is exactly one `LLMCallAttempted` over all runs;
- after a SIGINT nothing is asked twice (requests == distinct requests);
- after a SIGKILL only the requests in flight whose reply never arrived are asked again,
  and each is journaled `in_doubt` (counted at its upper bound);
- the tokens of `ok` attempts equal what the server billed for replies that arrived;
  "saved" counts only replies really reused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI, console_script
from support.llm_servers import ServerProcess, start_fake

LATENCY = 0.6
CALLS_PER_STAGE = 3

PLUGIN = """
from runjournal.domain.modules import Module, Normalized


class Thrice(Module):
    fingerprint = "test.thrice/1"
    artifact_kind = "answers"
    schema = "test.answers/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = dict[str, list[str]]

    def extract(self, chunk, ctx):
        return [ctx.llm.complete(f"{chunk.text.strip()} part {i}") for i in range(1, 4)]

    def merge(self, parts, ctx):
        return [a for p in parts for a in p]

    def normalize(self, merged, ctx):
        return Normalized({"answers": merged})
"""

PIPELINE = """
name = "thrice"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 400
[[steps]]
id = "ask"
module = "plugins/thrice.py:Thrice"
scope = "document"
"""

PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 10
max_retries = 0
prices = {{ input_per_million = 1.0, output_per_million = 2.0 }}
"""


@pytest.fixture
def fake() -> Iterator[ServerProcess]:
    with start_fake(latency=LATENCY) as server:
        yield server


class Project:
    def __init__(self, cli: CLI, root: Path, url: str, docs: int) -> None:
        self.cli, self.root = cli, root
        (root / "plugins").mkdir(parents=True)
        (root / "plugins" / "thrice.py").write_text(PLUGIN)
        (root / "docs").mkdir()
        for i in range(docs):
            (root / "docs" / f"d{i:02}.md").write_text(f"Document {i} asks its questions.\n")
        (root / "pipeline.toml").write_text(PIPELINE)
        (root / "profiles.toml").write_text(PROFILE.format(url=url))
        self.docs = docs
        self.env = {**cli.env, "RJ_FAKE_KEY": "sk-local-" + "y" * 24}

    def where(self) -> list[str]:
        return ["--output-root", str(self.root / "out")]

    def run_args(self, *extra: str) -> list[str]:
        return [
            "run",
            str(self.root / "pipeline.toml"),
            *self.where(),
            "--cache-root",
            str(self.root / "cache"),
            "--profile",
            "fake",
            "--profiles-file",
            str(self.root / "profiles.toml"),
            "--no-progress",
            *extra,
        ]

    def interrupted(self, fake: ServerProcess, sig: int, after: int, jobs: int) -> int:
        """Start a run, send `sig` once the server received `after` requests; its exit code."""
        before = fake.usage()["requests"]
        proc = subprocess.Popen(
            [*console_script(), *self.run_args("--jobs", str(jobs))],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while fake.usage()["requests"] - before < after:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(LATENCY / 3)  # the requests just sent are now in the server
            os.kill(proc.pid, sig)
            proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        return proc.returncode

    def resume(self) -> dict[str, Any]:
        proc, doc = self.cli.json(*self.run_args("--resume", "--jobs", "4"), env=self.env)
        assert proc.returncode == 0, proc.stderr
        return doc

    def recover(self) -> dict[str, Any]:
        proc, doc = self.cli.json(
            "recover", *self.where(), "--cache-root", str(self.root / "cache")
        )
        assert proc.returncode == 0, proc.stderr
        return doc

    def events(self) -> list[dict[str, Any]]:
        """Every event of every run in the journal."""
        proc, runs = self.cli.json("runs", "list", *self.where())
        assert proc.returncode == 0, proc.stderr
        out: list[dict[str, Any]] = []
        for run in runs["runs"]:
            proc, doc = self.cli.json("journal", "show", run["run_id"], *self.where())
            assert proc.returncode == 0, proc.stderr
            out += [{**e, "run_id": run["run_id"]} for e in doc["events"]]
        return out


def _account(project: Project, fake: ServerProcess) -> dict[str, Any]:
    events = project.events()
    attempts = [e["data"] for e in events if e["type"] == "LLMCallAttempted"]
    reused = [
        e["data"]
        for e in events
        if e["type"] == "LLMUsageReused" and e["data"].get("request_sha256")
    ]
    ok = [a for a in attempts if a["status"] == "ok"]
    return {
        "usage": fake.usage(),
        "attempts": attempts,
        "ok": ok,
        "in_doubt": [a for a in attempts if a["status"] == "in_doubt"],
        "ok_tokens": sum(a["prompt_tokens"] + a["completion_tokens"] for a in ok),
        "reused": reused,
        # calls not asked again: stored replies, and checkpoints of stages that finished
        "saved_calls": sum(
            e["data"]["usage"].get("calls", 0) for e in events if e["type"] == "LLMUsageReused"
        ),
        "statuses": {e["data"]["status"] for e in events if e["type"] == "RunTerminated"},
    }


def _distinct(project: Project) -> int:
    return project.docs * CALLS_PER_STAGE


@pytest.mark.parametrize("after", [1, 5])
def test_sigint_keeps_every_paid_reply_and_resume_asks_nothing_twice(
    cli: CLI, fake: ServerProcess, tmp_path: Path, after: int
) -> None:
    project = Project(cli, tmp_path, fake.url, docs=4)
    code = project.interrupted(fake, signal.SIGINT, after=after, jobs=4)
    assert code == 130
    first = fake.usage()
    got = _account(project, fake)
    # every request of the interrupted run is journaled before its terminal event
    assert len(got["attempts"]) == first["requests"] >= after
    assert not got["in_doubt"]  # the grace let every call in flight finish
    # no request started after the signal: at most one per stage in flight then
    assert first["requests"] < _distinct(project)

    doc = project.resume()
    got = _account(project, fake)
    usage = got["usage"]
    assert usage["requests"] == _distinct(project)  # 0 extra for SIGINT
    assert len(got["attempts"]) == usage["requests"]
    assert got["ok_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert got["saved_calls"] == first["requests"]  # each paid reply reused once
    assert got["reused"]  # stages cut short by the interrupt reuse their replies
    assert doc["llm"]["saved"]["attempts"] == first["requests"]
    assert doc["llm"]["spent"]["attempts"] == usage["requests"] - first["requests"]


@pytest.mark.parametrize("after", [2, 7])
def test_sigkill_then_recover_accounts_for_every_request(
    cli: CLI, fake: ServerProcess, tmp_path: Path, after: int
) -> None:
    project = Project(cli, tmp_path, fake.url, docs=4)
    distinct = _distinct(project)
    code = project.interrupted(fake, signal.SIGKILL, after=after, jobs=4)
    assert code == -signal.SIGKILL
    killed = fake.usage()["requests"]
    doc = project.recover()
    [row] = doc["abandoned"]
    got = _account(project, fake)
    assert got["statuses"] == {"abandoned"}
    attempts, in_doubt, answered = len(got["attempts"]), len(got["in_doubt"]), len(got["ok"])
    assert row["llm_in_doubt"] == in_doubt >= 1  # calls were in flight at the kill
    assert 1 <= row["llm_attempts"] <= attempts
    # recover journaled what the killed run's journal lacked: one attempt per request
    # received. An intent is durable before its request leaves, so an in-doubt attempt
    # may also be a request killed before it left: an upper bound, never an omission.
    never_left = attempts - killed
    assert 0 <= never_left <= in_doubt
    assert answered == attempts - in_doubt

    project.resume()
    got = _account(project, fake)
    usage = got["usage"]
    # the resume asks exactly what had no reply; nothing answered is asked again
    assert usage["requests"] - killed == distinct - answered
    assert len(got["ok"]) == distinct
    # requests received == distinct + those in flight at the kill whose reply never came
    assert usage["requests"] == distinct + in_doubt - never_left
    assert len(got["attempts"]) - never_left == usage["requests"]
    billed = usage["prompt_tokens"] + usage["completion_tokens"]
    bound = sum(a["prompt_tokens"] + a["completion_tokens"] for a in got["in_doubt"])
    assert got["ok_tokens"] <= billed <= got["ok_tokens"] + bound
    assert got["saved_calls"] == answered  # saved: only replies really reused
