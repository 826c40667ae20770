"""A project whose stage asks the fake server three sequential questions per document,
run, interrupted or killed, recovered and resumed (tests of docs/operations.md "LLM
call log"), and the accounting of every run against the server's own counters.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from support.console import CLI, console_script
from support.llm_servers import ServerProcess

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


class Project:
    def __init__(self, cli: CLI, root: Path, url: str, docs: int, latency: float) -> None:
        self.cli, self.root = cli, root
        (root / "plugins").mkdir(parents=True)
        (root / "plugins" / "thrice.py").write_text(PLUGIN)
        (root / "docs").mkdir()
        for i in range(docs):
            (root / "docs" / f"d{i:02}.md").write_text(f"Document {i} asks its questions.\n")
        (root / "pipeline.toml").write_text(PIPELINE)
        (root / "profiles.toml").write_text(PROFILE.format(url=url))
        self.docs = docs
        self.latency = latency
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

    def interrupted(
        self, fake: ServerProcess, sig: int, after: int, jobs: int, *extra: str
    ) -> int | None:
        """Start a run, send `sig` once the server received `after` requests; its exit code."""
        before = fake.usage()["requests"]
        proc = subprocess.Popen(
            [*console_script(), *self.run_args("--jobs", str(jobs), *extra)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while fake.usage()["requests"] - before < after:
                if proc.poll() is not None:  # it finished first
                    proc.communicate()
                    return None
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(self.latency / 3)  # the requests just sent are now in the server
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


def account(project: Project, fake: ServerProcess) -> dict[str, Any]:
    events = project.events()
    attempts = [
        {**e["data"], "run_id": e["run_id"]} for e in events if e["type"] == "LLMCallAttempted"
    ]
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
        "terminated": [e for e in events if e["type"] == "RunTerminated"],
        "statuses": {e["data"]["status"] for e in events if e["type"] == "RunTerminated"},
    }


def distinct(project: Project) -> int:
    return project.docs * CALLS_PER_STAGE
