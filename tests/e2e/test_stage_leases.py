"""Two overlapping runs of one LLM pipeline pay once (issue #25, defect 4).

A run that executes a stage holds the stage's lease in the cache root; a second run that
needs the same stage waits for it, looks the checkpoint up again and reuses what the first
wrote (docs/operations.md "Concurrent runs"). Against the fake OpenAI server, each distinct
request reaches it exactly once, both runs succeed and audit clean, and `explain` of the
second names the wait. `--lease-wait fail` refuses at once with one line and exit 4.
Every subprocess is bounded in time.
"""

from __future__ import annotations

import collections
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI
from support.llm_servers import ServerProcess, start_fake

PIPELINE = """
name = "ask"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "{text}", schema = { type = "object", properties = { topic = { type = "string" } }, required = ["topic"] }, temperature = 0, seed = 7, max_tokens = 40 }
"""  # noqa: E501
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 10
max_retries = 0
"""
CHUNKS = 17  # the document: 17 chunks
LATENCY = 0.25  # seconds the fake takes per answer: the first run is still going
TIMEOUT = 240
ENV = {"RJ_FAKE_KEY": "sk-" + "local-" + "x" * 24}


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(latency=LATENCY) as server:
        yield server


def _project(root: Path, url: str) -> list[str]:
    (root / "docs").mkdir(parents=True)
    paragraphs = [f"Paragraph {i} is about fruit number {i}." for i in range(CHUNKS)]
    (root / "docs" / "a.md").write_text("\n\n".join(paragraphs) + "\n")
    (root / "pipeline.toml").write_text(PIPELINE)
    (root / "profiles.toml").write_text(PROFILE.format(url=url))
    return [
        "run",
        str(root / "pipeline.toml"),
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--profile",
        "fake",
        "--profiles-file",
        str(root / "profiles.toml"),
        "--resume",
    ]


def _finish(proc: Any) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, json.loads(out) if out.strip() else {}, err


def _first_run_asking(cli: CLI, args: list[str], fake: ServerProcess) -> Any:
    """Start a run and return once the server has its first request, at least 1 s later:
    by then it holds the leases of every chunk it is about to execute."""
    before = len(fake.requests())
    started = time.monotonic()
    proc = cli.start(*args, "--json", env=ENV)
    deadline = started + TIMEOUT
    while len(fake.requests()) == before:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return proc


def test_two_runs_a_second_apart_ask_each_request_once(
    cli: CLI, fake: ServerProcess, tmp_path: Path
) -> None:
    args = _project(tmp_path / "p", fake.url)
    before = len(fake.requests())
    first = _first_run_asking(cli, args, fake)
    second = cli.start(*args, "--json", env=ENV)
    code1, doc1, err1 = _finish(first)
    code2, doc2, err2 = _finish(second)
    assert (code1, code2) == (0, 0), (err1, err2)

    asked = collections.Counter(r["prompt"] for r in fake.requests()[before:])
    assert len(asked) == CHUNKS
    assert set(asked.values()) == {1}, asked  # no request was paid for twice
    assert doc1["llm"]["spent"]["calls"] + doc2["llm"]["spent"]["calls"] == CHUNKS
    out = str(tmp_path / "p" / "out")
    for doc in (doc1, doc2):
        audit = cli("journal", "audit", doc["run_id"], "--output-root", out, timeout=TIMEOUT)
        assert audit.returncode == 0, audit.stdout + audit.stderr

    # the second run waited for the first, then reused what it wrote
    assert doc2["llm"]["spent"]["calls"] == 0
    proc = cli("explain", doc2["run_id"], "--output-root", out, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert f"waited: for run {doc1['run_id']}, which was executing" in proc.stdout
    proc, explained = cli.json("explain", doc2["run_id"], "--output-root", out)
    waits = explained["lease_waits"]
    assert waits and {w["holder"] for w in waits} == {doc1["run_id"]}
    assert {w["outcome"] for w in waits} == {"released"}
    assert "extract" in {w["stage"] for w in waits}
    # The first run may in turn wait for a merge or normalize the second reached first
    # (no LLM call there); it never waits for an extract, which it leased from the start.
    _, explained1 = cli.json("explain", doc1["run_id"], "--output-root", out)
    assert all(w["stage"] != "extract" for w in explained1.get("lease_waits", []))


def test_lease_wait_fail_refuses_at_once_naming_the_other_run(
    cli: CLI, fake: ServerProcess, tmp_path: Path
) -> None:
    args = _project(tmp_path / "p", fake.url)
    first = _first_run_asking(cli, args, fake)
    try:
        refused = cli(*args, "--lease-wait", "fail", env=ENV, timeout=TIMEOUT)
        also = cli(*args, env={**ENV, "RUNJOURNAL_LEASE_WAIT": "fail"}, timeout=TIMEOUT)
    finally:
        code1, doc1, err1 = _finish(first)
    assert code1 == 0, err1
    for proc in (refused, also):
        assert proc.returncode == 4, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("runjournal: error")]
        assert len(lines) == 1, proc.stderr
        assert f"is being executed by run {doc1['run_id']}" in lines[0]
        assert "--lease-wait fail" in lines[0]
        assert "Traceback" not in proc.stderr


def _waiting_for_a_lock(pid: int) -> bool:
    """Whether process `pid` is blocked in the kernel on a record lock (/proc/locks marks
    a blocked request with `->`)."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return False
    return any("->" in line and str(pid) in line.split() for line in text.splitlines())


@pytest.fixture(scope="module")
def slow_fake() -> Iterator[ServerProcess]:
    with start_fake(latency=1.0) as server:
        yield server


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_ctrl_c_while_waiting_for_a_lease_stops_the_waiting_run_alone(
    cli: CLI, slow_fake: ServerProcess, tmp_path: Path
) -> None:
    """A run waiting in the kernel for another run's stage lease stops on Ctrl-C like any
    run: recorded as interrupted, the other run undisturbed, and a resume pays for nothing
    the first run already paid for."""
    args = _project(tmp_path / "p", slow_fake.url)
    first = _first_run_asking(cli, [*args, "--jobs", "2"], slow_fake)
    second = cli.start(*args, "--json", env=ENV)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not _waiting_for_a_lock(second.pid):
            assert second.poll() is None, second.communicate()
            assert first.poll() is None, "the first run ended before the second waited"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        second.send_signal(signal.SIGINT)
        code2, doc2, err2 = _finish(second)
        # it stopped while the first was still running: it did not wait for the lease
        first_running = first.poll() is None
    finally:
        code1, doc1, err1 = _finish(first)
    assert code1 == 0, err1
    assert first_running, "the interrupted run waited for the other run to end"
    assert code2 == 130, err2
    assert doc2["status"] == "interrupted", doc2
    assert "Traceback" not in err2
    out = str(tmp_path / "p" / "out")
    for run_id in (doc1["run_id"], doc2["run_id"]):
        audit = cli("journal", "audit", run_id, "--output-root", out, timeout=TIMEOUT)
        assert audit.returncode == 0, audit.stdout + audit.stderr
    before = len(slow_fake.requests())
    code3, doc3, err3 = _finish(cli.start(*args, "--json", env=ENV))
    assert code3 == 0, err3
    assert len(slow_fake.requests()) == before  # everything was paid for once, by the first
    assert doc3["llm"]["spent"]["calls"] == 0
