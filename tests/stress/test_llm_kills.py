"""Repeated SIGKILLs and SIGINTs of a run with many LLM calls in flight, each followed by
`recover` and `--resume`: the accounting holds for the whole sequence (docs/operations.md
"LLM call log").

Size: RJ_STRESS_LLM_KILLS interruptions (default 4, alternating SIGKILL and SIGINT at
random moments), RJ_STRESS_LLM_DOCS documents of three sequential calls (default 16), at
`--jobs 16` against a fake server answering in 50 ms.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import CLI
from support.llm_servers import ServerProcess, start_fake
from support.llm_wal import Project, account, distinct

LATENCY = 0.05
KILLS = int(os.environ.get("RJ_STRESS_LLM_KILLS", "4"))
DOCS = int(os.environ.get("RJ_STRESS_LLM_DOCS", "16"))


@pytest.fixture
def fake() -> Iterator[ServerProcess]:
    with start_fake(latency=LATENCY) as server:
        yield server


def test_every_request_is_one_attempt_through_kills_interrupts_and_resumes(
    cli: CLI, fake: ServerProcess, tmp_path: Path
) -> None:
    rng = random.Random(2026)
    project = Project(cli, tmp_path, fake.url, docs=DOCS, latency=LATENCY)
    n = distinct(project)
    resume: tuple[str, ...] = ()
    kills = 0
    for i in range(KILLS):
        sig = signal.SIGKILL if i % 2 == 0 else signal.SIGINT
        after = rng.randint(1, max(1, n // (KILLS + 1)))
        code = project.interrupted(fake, sig, after, 16, *resume)
        resume = ("--resume",)
        if code is None:
            break  # the run finished before the moment came
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL
            kills += 1
            project.recover()
        else:
            assert code == 130
    project.resume()
    got = account(project, fake)
    usage = got["usage"]
    attempts, in_doubt, ok = len(got["attempts"]), len(got["in_doubt"]), len(got["ok"])
    # each distinct request answered exactly once, and never asked again once answered
    assert ok == n
    assert attempts == ok + in_doubt
    assert kills >= 1 and in_doubt >= 1  # the kills did land with calls in flight
    # every request received is an attempt; an in-doubt attempt may be a request killed
    # after its intent was durable and before it left (the upper bound)
    assert n <= usage["requests"] <= attempts
    assert usage["requests"] - n <= in_doubt
    billed = usage["prompt_tokens"] + usage["completion_tokens"]
    bound = sum(a["prompt_tokens"] + a["completion_tokens"] for a in got["in_doubt"])
    assert got["ok_tokens"] <= billed <= got["ok_tokens"] + bound
    # an interrupted run's calls finish within the grace: only kills leave attempts in doubt
    statuses = {e["run_id"]: e["data"]["status"] for e in got["terminated"]}
    assert all(statuses[a["run_id"]] == "abandoned" for a in got["in_doubt"])
