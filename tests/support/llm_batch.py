"""A project whose `llm.json` step asks one structured question per chunk, run online and
in batch mode against the fake servers (tests of docs/operations.md "Batch runs")."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from support.console import CLI, console_script
from support.llm_servers import ASK_SCHEMA, FAKE_KEY_ENV, ServerProcess, fake_key_env

PIPELINE = """
name = "ask"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "ask"
module = "llm.json"
params = {{ prompt = "{{text}}", schema = {schema}, temperature = 0, seed = 7, max_tokens = 40 }}
"""

PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "{key_env}"
read_timeout = 30
max_retries = 2
backoff_initial = 0.05
backoff_max = 0.2
batch_poll_interval = 0.01
prices = {{ input_per_million = 1.0, output_per_million = 2.0 }}
"""


class BatchProject:
    """`docs` documents of `chunks` one-paragraph chunks; `faulty` chunks (index into the
    first document) carry a `BATCH: error` line: that request errors in its first batch."""

    def __init__(
        self, cli: CLI, root: Path, *, docs: int, chunks: int, faulty: tuple[int, ...] = ()
    ) -> None:
        self.cli, self.root = cli, root
        (root / "docs").mkdir(parents=True, exist_ok=True)
        for d in range(docs):
            paras = []
            for c in range(chunks):
                text = f"Document {d} paragraph {c} about topic {d * chunks + c}."
                if d == 0 and c in faulty:
                    text += "\nBATCH: error"
                paras.append(text)
            (root / "docs" / f"d{d:04d}.md").write_text("\n\n".join(paras) + "\n")
        (root / "pipeline.toml").write_text(PIPELINE.format(schema=ASK_SCHEMA))
        self.requests = docs * chunks
        self.env = {**cli.env, **fake_key_env()}

    def profiles(self, name: str, url: str, extra: str = "") -> Path:
        """The profiles file of the runs called `name` (`extra`: more profile keys)."""
        path = self.root / f"{name}.toml"
        path.write_text(PROFILE.format(url=url, key_env=FAKE_KEY_ENV) + extra)
        return path

    def run_args(self, name: str, url: str, *extra: str, keys: str = "") -> list[str]:
        """`run` with its own output and cache roots (`name`) against the server at `url`
        (`keys`: more keys of its profile)."""
        return [
            "run",
            str(self.root / "pipeline.toml"),
            "--output-root",
            str(self.root / name / "out"),
            "--cache-root",
            str(self.root / name / "cache"),
            "--profile",
            "fake",
            "--profiles-file",
            str(self.profiles(name, url, keys)),
            "--no-progress",
            *extra,
        ]

    def run(self, name: str, url: str, *extra: str) -> tuple[subprocess.CompletedProcess, Any]:
        return self.cli.json(*self.run_args(name, url, *extra), env=self.env)

    def recover(self, name: str) -> Any:
        proc, doc = self.cli.json(
            "recover",
            "--output-root",
            str(self.root / name / "out"),
            "--cache-root",
            str(self.root / name / "cache"),
        )
        assert proc.returncode == 0, proc.stderr
        return doc

    def artifacts(self, name: str) -> dict[str, bytes]:
        """Every artifact file of the run `latest-ok` points at, by relative path."""
        base = self.root / name / "out" / "latest-ok" / "artifacts"
        return {
            str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
        }

    def interrupted_polling(self, fake: ServerProcess, name: str, polls: int) -> int:
        """Start a batch run, SIGINT it once the server answered `polls` batch polls; its
        exit code."""
        proc = subprocess.Popen(
            [*console_script(), *self.run_args(name, fake.url, "--llm-mode", "batch")],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while fake.control("/_control/hung")["seen"].get("retrieve", 0) < polls:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.02)
            os.kill(proc.pid, 2)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        return proc.returncode

    def killed_at(self, fake: ServerProcess, what: str, after: int, name: str, *extra: str) -> int:
        """Start a batch run, SIGKILL it while the server holds its request of kind
        `what` (the one after the first `after`) unanswered; its exit code."""
        fake.control("/_control/hang", {"what": what, "after": after})
        proc = subprocess.Popen(
            [*console_script(), *self.run_args(name, fake.url, "--llm-mode", "batch", *extra)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not fake.control("/_control/hung")["hanging"].get(what):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.02)
            os.kill(proc.pid, 9)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            fake.control("/_control/hang", {"what": what})  # lifted: later requests answer
        return proc.returncode


def batches(fake: ServerProcess) -> list[dict[str, Any]]:
    return fake.control("/_control/batches")["batches"]


def per_set(fake: ServerProcess) -> dict[str, int]:
    """How many batches were created for each request set (their metadata names it)."""
    out: dict[str, int] = {}
    for batch in batches(fake):
        key = (batch["metadata"] or {}).get("runjournal_set", "?")
        out[key] = out.get(key, 0) + 1
    return out


def billed(fake: ServerProcess) -> dict[str, int]:
    """How often each request body was completed (online or in a batch)."""
    return fake.control("/_control/billed")["billed"]
