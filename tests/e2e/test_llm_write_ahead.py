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

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import CLI
from support.llm_servers import ServerProcess, start_fake
from support.llm_wal import Project, account, distinct

LATENCY = 0.6


@pytest.fixture
def fake() -> Iterator[ServerProcess]:
    with start_fake(latency=LATENCY) as server:
        yield server


@pytest.mark.parametrize("after", [1, 5])
def test_sigint_keeps_every_paid_reply_and_resume_asks_nothing_twice(
    cli: CLI, fake: ServerProcess, tmp_path: Path, after: int
) -> None:
    project = Project(cli, tmp_path, fake.url, docs=4, latency=LATENCY)
    code = project.interrupted(fake, signal.SIGINT, after=after, jobs=4)
    assert code == 130
    first = fake.usage()
    got = account(project, fake)
    # every request of the interrupted run is journaled before its terminal event
    assert len(got["attempts"]) == first["requests"] >= after
    assert not got["in_doubt"]  # the grace let every call in flight finish
    # no request started after the signal: at most one per stage in flight then
    assert first["requests"] < distinct(project)

    doc = project.resume()
    got = account(project, fake)
    usage = got["usage"]
    assert usage["requests"] == distinct(project)  # 0 extra for SIGINT
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
    project = Project(cli, tmp_path, fake.url, docs=4, latency=LATENCY)
    n = distinct(project)
    code = project.interrupted(fake, signal.SIGKILL, after=after, jobs=4)
    assert code == -signal.SIGKILL
    killed = fake.usage()["requests"]
    proc = cli("recover", "--dry-run", *project.where(), "--cache-root", str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert "would journal" in proc.stdout and "LLM attempt(s) from its call log" in proc.stdout
    doc = project.recover()
    [row] = doc["abandoned"]
    got = account(project, fake)
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
    got = account(project, fake)
    usage = got["usage"]
    # the resume asks exactly what had no reply; nothing answered is asked again
    assert usage["requests"] - killed == n - answered
    assert len(got["ok"]) == n
    # requests received == distinct + those in flight at the kill whose reply never came
    assert usage["requests"] == n + in_doubt - never_left
    assert len(got["attempts"]) - never_left == usage["requests"]
    billed = usage["prompt_tokens"] + usage["completion_tokens"]
    bound = sum(a["prompt_tokens"] + a["completion_tokens"] for a in got["in_doubt"])
    assert got["ok_tokens"] <= billed <= got["ok_tokens"] + bound
    assert got["saved_calls"] == answered  # saved: only replies really reused
