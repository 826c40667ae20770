"""A message batch whose creation's answer was lost is found again (issue 30; docs/
operations.md "Batch runs"): SIGKILL while the fake Anthropic server holds the answer of
`POST /v1/messages/batches` (the batch exists), then `recover` and `--resume`: the batch
is found among those created since (by its size and its requests' ids), followed, and
never submitted twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.console import CLI, console_script
from support.llm_batch import BatchProject
from support.llm_servers import FAKE_KEY_ENV, ServerProcess, start_fake_anthropic

pytest.importorskip("anthropic")

CLAUDE = """
[profiles.claude]
provider = "anthropic"
model = "claude-fake"
base_url = "{url}"
api_key_env = "{key_env}"
read_timeout = 30
max_retries = 0
batch_poll_interval = 0.01
prices = {{ input_per_million = 3.0, output_per_million = 15.0 }}
"""


def _args(project: BatchProject, name: str, fake: ServerProcess, *extra: str) -> list[str]:
    args = project.run_args(name, fake.url, *extra)
    (project.root / f"{name}.toml").write_text(CLAUDE.format(url=fake.url, key_env=FAKE_KEY_ENV))
    args[args.index("--profile") + 1] = "claude"
    return args


def _killed_while_creating(project: BatchProject, fake: ServerProcess) -> int:
    fake.control("/_control/hang", {"what": "create", "after": 0})
    args = _args(project, "batch", fake, "--llm-mode", "batch")
    proc = subprocess.Popen(
        [*console_script(), *args],
        env=project.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not fake.control("/_control/hung")["hanging"].get("create"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        fake.control("/_control/hang", {"what": "create"})
    return proc.returncode


def test_a_message_batch_whose_creation_answer_was_lost_is_found_not_resubmitted(
    cli: CLI, tmp_path: Path
) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    with start_fake_anthropic() as online:
        proc, _ = cli.json(*_args(project, "online", online), env=project.env)
        assert proc.returncode == 0, proc.stderr
    with start_fake_anthropic() as fake:
        assert _killed_while_creating(project, fake) == -signal.SIGKILL
        project.recover("batch")
        args = _args(project, "batch", fake, "--llm-mode", "batch", "--resume")
        proc, doc = cli.json(*args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        state = fake.control("/_control/batches")
    [batch] = state["batches"]  # found and followed: created once
    assert len(batch["requests"]) == project.requests
    assert set(state["billed"].values()) == {1} and len(state["billed"]) == project.requests
    assert project.artifacts("batch") == project.artifacts("online")
    assert doc["llm"]["spent"]["attempts"] == project.requests
