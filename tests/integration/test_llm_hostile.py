"""Hostile and broken servers end as one typed failure, bounded in time and memory.

Issue 26 defects 4 and 5: a slow-loris body, a 64 MiB body, `completion_tokens = 10**30`,
a permanent 400 under `ask`, and a reply cut at `max_tokens` (docs/operations.md
"Hostile servers").
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from runjournal.adapters.llm.client_options import parse_client_options
from runjournal.adapters.llm.runtime import LLMServices
from runjournal.adapters.profiles import Profile
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import CallOptions, CallScope, FailureCause, LLMCallFailed
from support.llm_servers import ServerProcess, start_fake

SCOPE = CallScope("ask", "docs/a.md", Stage.EXTRACT, "c" * 64)


class Fields(msgspec.Struct):
    owner: str
    area: str


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(hang=30.0) as server:
        yield server


def call_for(url: str, **client: Any) -> Any:
    options = {"read_timeout": 2, "connect_timeout": 1, "backoff_initial": 0.05}
    options["backoff_max"] = 0.1
    profile = Profile(
        id="fake",
        provider="openai",
        model="fake-model",
        base_url=url,
        params={"temperature": 0},
        client=parse_client_options({**options, **client}),
    )
    return LLMServices(environ={}).runtime_for(profile).for_call(SCOPE)


def failure(call: Any, prompt: str, **kw: Any) -> LLMCallFailed:
    with pytest.raises(LLMCallFailed) as info:
        call.ask(prompt, Fields, **kw)
    assert "\n" not in info.value.message
    return info.value


def test_slow_loris_ends_at_the_attempt_deadline(fake: ServerProcess) -> None:
    call = call_for(fake.url, attempt_timeout=1.5, max_retries=0)
    started = time.monotonic()
    exc = failure(call, "FAULTS: slowloris\nAna books the venue")
    took = time.monotonic() - started
    assert exc.cause is FailureCause.TIMEOUT and "attempt_timeout 1.5 s" in exc.message
    assert took < 10  # the server would dribble for 30 s, each byte inside read_timeout


def test_a_huge_body_is_refused_while_it_streams(fake: ServerProcess) -> None:
    call = call_for(fake.url, max_reply_bytes=1024 * 1024)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    exc = failure(call, "FAULTS: huge\nAna books the venue")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert exc.cause is FailureCause.REPLY_TOO_LARGE and "max_reply_bytes 1048576" in exc.message
    assert len(call.attempts) == 1  # not retried: the same request would send it again
    assert grown_kib < 32 * 1024  # never the 64 MiB body


def test_absurd_token_counts_are_an_invalid_reply(fake: ServerProcess) -> None:
    call = call_for(fake.url)
    exc = failure(call, "FAULTS: tokens30\nAna books the venue")
    assert exc.cause is FailureCause.REPLY_INVALID and "completion_tokens" in exc.message
    (attempt,) = call.attempts
    assert attempt.completion_tokens == 0 and attempt.status.value == "reply_invalid"


def test_a_permanent_400_is_sent_once(fake: ServerProcess) -> None:
    before = len(fake.requests())
    call = call_for(fake.url)
    exc = failure(call, "FAULTS: 400, 400\nthe model does not exist")
    assert exc.cause is FailureCause.REQUEST_REFUSED
    assert len(fake.requests()) - before == 1  # no json_object fallback for it


def test_a_cut_reply_is_typed_and_names_max_tokens(fake: ServerProcess) -> None:
    call = call_for(fake.url)
    exc = failure(
        call, "FAULTS: length, length, length\nAna books", options=CallOptions(max_tokens=20)
    )
    assert exc.cause is FailureCause.REPLY_TRUNCATED and "max_tokens 20" in exc.message
    assert [a.status.value for a in call.attempts] == ["reply_truncated"]  # not re-asked


def test_max_tokens_retry_asks_once_at_the_larger_limit(fake: ServerProcess) -> None:
    before = len(fake.requests())
    call = call_for(fake.url, max_tokens_retry=200)
    value = call.ask("FAULTS: length\nTom books", Fields, options=CallOptions(max_tokens=20))
    assert isinstance(value, Fields)
    assert [a.status.value for a in call.attempts] == ["reply_truncated", "ok"]
    assert [r["max_tokens"] for r in fake.requests()[before:]] == [20, 200]
    again = call_for(fake.url, max_tokens_retry=200)
    exc = failure(again, "FAULTS: length, length\nPriya books", options=CallOptions(max_tokens=20))
    assert exc.cause is FailureCause.REPLY_TRUNCATED and "max_tokens 200" in exc.message


def test_a_429_holds_only_the_request_that_got_it(fake: ServerProcess) -> None:
    """Issue 26 defect 3: `Retry-After` is waited by its own request, not the endpoint."""
    runtime_call = call_for(fake.url)
    runtime = runtime_call.runtime
    before = len(fake.requests())
    limited = runtime.for_call(SCOPE)
    thread = threading.Thread(target=limited.complete, args=("FAULTS: 429@3\nwait for me",))
    thread.start()
    deadline = time.monotonic() + 30
    while not limited.attempts and time.monotonic() < deadline:
        time.sleep(0.01)
    assert limited.attempts and limited.attempts[0].status.value == "rate_limited"
    other = runtime.for_call(SCOPE)
    other.complete("another document")
    assert thread.is_alive()  # still waiting its own Retry-After
    assert runtime.endpoint.limiter.waited < 1.5  # the endpoint was never paused for 3 s
    thread.join(timeout=30)
    prompts = [r["prompt"].splitlines()[-1] for r in fake.requests()[before:]]
    assert prompts == ["wait for me", "another document", "wait for me"]
    assert runtime.endpoint.limiter.rate_limited == 1
