"""The metered runtime against the fault-injecting fake server (a subprocess on loopback).

Each fault is scripted in the prompt (`FAULTS: 429@0.3, 500, ok`), so every test
knows exactly which attempt meets which fault.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.adapters.llm.budget import Budget
from runjournal.adapters.llm.cassette import Cassette
from runjournal.adapters.llm.client_options import parse_client_options
from runjournal.adapters.llm.runtime import LLMServices
from runjournal.adapters.profiles import Profile
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import (
    AttemptStatus,
    CallOptions,
    CallScope,
    FailureCause,
    LLMCallFailed,
)
from support.llm_servers import ServerProcess, start_fake

KEY_ENV = "RJ_FAKE_KEY"
KEY = "sk-" + "test-" + "Q7" * 20  # built at run time: no secret-shaped literal
SCOPE = CallScope("ask", "docs/a.md", Stage.EXTRACT, "c" * 64)


class Fields(msgspec.Struct):
    owner: str
    area: str


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(hang=3.0, api_key_env=KEY_ENV, env={KEY_ENV: KEY}) as server:
        yield server


def profile(url: str, **client: Any) -> Profile:
    options = {
        "read_timeout": 0.6,
        "connect_timeout": 1,
        "backoff_initial": 0.05,
        "backoff_max": 0.2,
    }
    prices = client.pop("prices", {"input_per_million": 2.0, "output_per_million": 4.0})
    return Profile(
        id="fake",
        provider="openai",
        model="fake-model",
        base_url=url,
        api_key_env=KEY_ENV,
        params={"temperature": 0},
        client=parse_client_options({**options, **client, "prices": prices}),
    )


def services(**kw: Any) -> LLMServices:
    return LLMServices(environ={KEY_ENV: KEY}, **kw)


def statuses(call: Any) -> list[str]:
    return [a.status.value for a in call.attempts]


def new_requests(fake: ServerProcess, before: int) -> list[dict[str, Any]]:
    return fake.requests()[before:]


class TestSuccess:
    def test_a_reply_with_tokens_cost_and_the_key_sent(self, fake: ServerProcess) -> None:
        before = len(fake.requests())
        call = services().runtime_for(profile(fake.url)).for_call(SCOPE)
        assert call.complete("hello there", system="be brief") == '{"echo": 2}'
        (attempt,) = call.attempts
        assert attempt.status is AttemptStatus.OK and attempt.http_status == 200
        assert attempt.prompt_tokens == 4 and attempt.completion_tokens > 0
        expected = (attempt.prompt_tokens * 2 + attempt.completion_tokens * 4) / 1e6
        assert attempt.cost == pytest.approx(expected)
        assert len(attempt.request_sha256) == 64 and len(attempt.reply_sha256 or "") == 64
        (seen,) = new_requests(fake, before)
        assert seen["authorization"] and seen["temperature"] == 0 and seen["model"] == "fake-model"

    def test_structured_output_sends_the_schema_and_decodes(self, fake: ServerProcess) -> None:
        before = len(fake.requests())
        call = services().runtime_for(profile(fake.url)).for_call(SCOPE)
        value = call.ask("Priya books the venue", Fields)
        assert isinstance(value, Fields) and value.owner
        (seen,) = new_requests(fake, before)
        fmt = seen["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Fields"
        assert set(fmt["json_schema"]["schema"]["required"]) == {"owner", "area"}

    def test_json_object_mode_puts_the_schema_in_the_system_message(
        self, fake: ServerProcess
    ) -> None:
        before = len(fake.requests())
        runtime = services().runtime_for(profile(fake.url, structured_output="json_object"))
        call = runtime.for_call(SCOPE)
        reply = '{"owner": "Tom", "area": "events"}'
        assert call.ask(f"REPLY: {reply}", Fields) == Fields("Tom", "events")
        (seen,) = new_requests(fake, before)
        assert seen["response_format"] == {"type": "json_object"} and seen["messages"] == 2

    def test_a_server_refusing_json_schema_is_asked_in_json_object_mode(self) -> None:
        with start_fake() as server:
            runtime = services().runtime_for(profile(server.url))
            first = runtime.for_call(SCOPE)
            assert first.ask("FAULTS: 400schema\nAna refused", Fields).owner
            assert statuses(first) == ["request_refused", "ok"]
            assert [a.attempt for a in first.attempts] == [1, 2]
            second = runtime.for_call(SCOPE)
            assert second.ask("Tom books the venue", Fields).owner
            kinds = [r["response_format"]["type"] for r in server.requests()]
        assert kinds == ["json_schema", "json_object", "json_object"]  # remembered

    def test_connections_are_reused(self) -> None:
        with start_fake() as server:
            runtime = services().runtime_for(profile(server.url))
            for i in range(3):
                runtime.for_call(SCOPE).complete(f"request {i}")
            ports = {r["client_port"] for r in server.requests()}
        assert len(ports) == 1  # three requests, one connection


class TestRetries:
    def test_429_with_retry_after_is_honoured_then_success(self, fake: ServerProcess) -> None:
        call = services().runtime_for(profile(fake.url)).for_call(SCOPE)
        started = time.monotonic()
        assert call.complete("FAULTS: 429@0.4\nfirst").startswith('{"echo"')
        assert time.monotonic() - started >= 0.4
        assert statuses(call) == ["rate_limited", "ok"]
        assert call.attempts[0].http_status == 429 and call.attempts[0].wait_ms == 400.0

    @pytest.mark.parametrize(
        ("faults", "first"),
        [
            ("500", "server_error"),
            ("503", "server_error"),
            ("timeout", "timeout"),
            ("malformed", "malformed_response"),
            ("nocontent", "malformed_response"),
            ("reset", "connection_error"),
        ],
    )
    def test_transient_faults_are_retried(
        self, fake: ServerProcess, faults: str, first: str
    ) -> None:
        call = services().runtime_for(profile(fake.url)).for_call(SCOPE)
        call.complete(f"FAULTS: {faults}\n{faults} then fine")
        assert statuses(call) == [first, "ok"]
        assert 0 < call.attempts[0].wait_ms <= 200  # backoff with jitter, capped

    def test_connection_refused_is_a_connection_error(self) -> None:
        dead = profile("http://127.0.0.1:9/v1", max_retries=1)
        call = services().runtime_for(dead).for_call(SCOPE)
        with pytest.raises(LLMCallFailed) as info:
            call.complete("anyone there?")
        assert info.value.cause is FailureCause.CONNECTION_ERROR
        assert statuses(call) == ["connection_error", "connection_error"]


class TestPermanentFailures:
    def test_retries_are_bounded(self, fake: ServerProcess) -> None:
        call = services().runtime_for(profile(fake.url, max_retries=2)).for_call(SCOPE)
        with pytest.raises(LLMCallFailed) as info:
            call.complete("FAULTS: 500, 500, 500, 500\nalways down")
        assert info.value.cause is FailureCause.SERVER_ERROR
        assert "after 3 attempt(s)" in info.value.message and "HTTP 500" in info.value.message
        assert statuses(call) == ["server_error"] * 3

    @pytest.mark.parametrize(
        ("fault", "cause"),
        [
            ("401", FailureCause.AUTH_FAILED),
            ("403", FailureCause.AUTH_FAILED),
            ("400", FailureCause.REQUEST_REFUSED),
        ],
    )
    def test_auth_and_bad_requests_fail_fast(
        self, fake: ServerProcess, fault: str, cause: FailureCause
    ) -> None:
        call = services().runtime_for(profile(fake.url)).for_call(SCOPE)
        with pytest.raises(LLMCallFailed) as info:
            call.complete(f"FAULTS: {fault}\nrefused")
        assert info.value.cause is cause and len(call.attempts) == 1

    def test_a_wrong_key_fails_fast_and_the_echoed_key_is_scrubbed(self) -> None:
        wrong = "sk-" + "wrong-" + "Z9" * 20
        with start_fake(api_key_env=KEY_ENV, env={KEY_ENV: KEY}, echo_auth=True) as server:
            svc = LLMServices(environ={KEY_ENV: wrong})
            call = svc.runtime_for(profile(server.url)).for_call(SCOPE)
            with pytest.raises(LLMCallFailed) as info:
                call.complete("let me in")
            assert info.value.cause is FailureCause.AUTH_FAILED and len(call.attempts) == 1
            assert "invalid api key" in info.value.message
            assert wrong not in info.value.message and "Z9Z9" not in info.value.message

    def test_no_key_for_the_hosted_api_fails_before_any_request(self) -> None:
        hosted = Profile(id="mini", provider="openai", model="gpt-4o-mini")
        call = LLMServices(environ={}).runtime_for(hosted).for_call(SCOPE)
        with pytest.raises(LLMCallFailed) as info:
            call.complete("hi")
        assert info.value.cause is FailureCause.AUTH_FAILED
        assert "OPENAI_API_KEY is not set" in info.value.message and call.attempts == []

    def test_a_retry_after_beyond_the_maximum_is_not_waited_for(self, fake: ServerProcess) -> None:
        call = services().runtime_for(profile(fake.url, retry_after_max=1)).for_call(SCOPE)
        started = time.monotonic()
        with pytest.raises(LLMCallFailed) as info:
            call.complete("FAULTS: 429@30\nlater")
        assert time.monotonic() - started < 5
        assert info.value.cause is FailureCause.RATE_LIMITED and "asked to wait 30 s" in str(
            info.value
        )

    def test_invalid_replies_are_asked_again_then_fail_typed(self, fake: ServerProcess) -> None:
        call = services().runtime_for(profile(fake.url, reply_retries=1)).for_call(SCOPE)
        assert call.ask("FAULTS: badjson\nAna again", Fields).owner
        assert statuses(call) == ["reply_invalid", "ok"]
        assert [a.attempt for a in call.attempts] == [1, 2] and {a.call for a in call.attempts} == {
            1
        }
        before = len(fake.requests())
        with pytest.raises(LLMCallFailed) as info:
            call.ask("FAULTS: badjson, badshape\nTom again", Fields)
        assert info.value.cause is FailureCause.REPLY_INVALID
        assert "after 2 ask(s)" in info.value.message
        reasked = new_requests(fake, before)
        assert [r["messages"] for r in reasked] == [1, 3]  # the re-ask carries the error


class TestSharedLimits:
    def test_max_concurrency_is_shared_by_every_call_of_the_endpoint(self) -> None:
        with start_fake(latency=0.2) as server:
            svc = LLMServices(environ={})
            a = svc.runtime_for(profile(server.url, max_concurrency=1))
            b = svc.runtime_for(profile(server.url, max_concurrency=1))
            calls = [rt.for_call(SCOPE) for rt in (a, b, a, b)]
            threads = [
                threading.Thread(target=c.complete, args=(f"parallel {i}",))
                for i, c in enumerate(calls)
            ]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
        assert all(statuses(c) == ["ok"] for c in calls)
        assert elapsed >= 0.75  # four requests of 0.2 s, one at a time

    def test_the_budget_stops_new_calls(self, fake: ServerProcess) -> None:
        budget = Budget(max_tokens=40)
        runtime = services(budget=budget).runtime_for(profile(fake.url))
        first = runtime.for_call(SCOPE)
        first.complete("one two three four", options=CallOptions(max_tokens=20))
        spent, _ = budget.spent()
        before = len(fake.requests())
        second = runtime.for_call(SCOPE)
        with pytest.raises(LLMCallFailed) as info:  # it might take 40 - spent or more
            second.complete("one more", options=CallOptions(max_tokens=40 - spent))
        assert info.value.cause is FailureCause.BUDGET_EXHAUSTED
        assert "may take" in info.value.message and "--max-tokens 40" in info.value.message
        assert second.attempts == [] and len(fake.requests()) == before


class TestRecordReplay:
    def test_record_then_replay_without_network(self, fake: ServerProcess, tmp_path: Path) -> None:
        path = str(tmp_path / "cassette.json")
        record = Cassette.load(path, missing_ok=True)
        svc = services(record=record)
        call = svc.runtime_for(profile(fake.url)).for_call(SCOPE)
        answers = [call.ask("Priya books the venue", Fields), call.complete("plain text")]
        assert svc.close() == [] and Path(path).exists()
        text = Path(path).read_text()
        assert KEY not in text and "Authorization" not in text and fake.url not in text

        before = len(fake.requests())
        replay = Cassette.load(path, missing_ok=False)
        dead = profile("http://127.0.0.1:9/v1")  # replay never connects: the port is shut
        call = services(replay=replay).runtime_for(dead).for_call(SCOPE)
        assert [call.ask("Priya books the venue", Fields), call.complete("plain text")] == answers
        assert all(a.replayed and a.latency_ms == 0.0 for a in call.attempts)
        assert call.attempts[0].prompt_tokens > 0 and len(fake.requests()) == before

        with pytest.raises(LLMCallFailed) as info:
            call.complete("never recorded")
        assert info.value.cause is FailureCause.REPLAY_MISS
        assert "step 'ask' lane 'docs/a.md' extract chunk cccccccccccc" in info.value.message
