"""The LLM runtime's parts without a network: options, retries, limits, budget, cassette,
structured replies, profiles and the domain's usage types."""

from __future__ import annotations

import email.utils
import random
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.adapters.builtin_modules.llm_json import LLMJsonModule, call_options
from runjournal.adapters.builtin_modules.text import BuiltinParamError
from runjournal.adapters.llm.budget import Budget
from runjournal.adapters.llm.cassette import Cassette, CassetteError, Reply, request_digest
from runjournal.adapters.llm.client_options import (
    ClientOptions,
    OptionError,
    StructuredOutput,
    parse_client_options,
)
from runjournal.adapters.llm.ratelimit import EndpointLimiter, LimiterStopped
from runjournal.adapters.llm.reply_formats import (
    ReplyInvalid,
    check_schema,
    decode_reply,
    offline_answer,
    response_format,
    schema_for,
)
from runjournal.adapters.llm.retry import backoff_delay, next_wait, parse_retry_after
from runjournal.adapters.profiles import OFFLINE, OfflineRuntime, ProfileError, ProfileRegistry
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import (
    AttemptStatus,
    CallOptions,
    CallScope,
    FailureCause,
    LLMAttempt,
    LLMCallFailed,
    LLMUsage,
    bind_call,
    cause_of_status,
    failure_cause,
)
from runjournal.domain.modules import Chunk, StageContext


class Invoice(msgspec.Struct):
    vendor: str
    total: float
    currency: str = "EUR"


# --- options -------------------------------------------------------------------------


class TestClientOptions:
    def test_defaults(self) -> None:
        options = parse_client_options({})
        assert options == ClientOptions()
        assert (
            options.max_retries == 4 and options.structured_output is StructuredOutput.JSON_SCHEMA
        )

    def test_values(self) -> None:
        options = parse_client_options(
            {
                "connect_timeout": 2,
                "read_timeout": 30.5,
                "max_retries": 0,
                "requests_per_minute": 60,
                "tokens_per_minute": 1000,
                "max_concurrency": 2,
                "structured_output": "json_object",
                "prices": {"input_per_million": 0.15, "output_per_million": 0.6},
            }
        )
        assert options.read_timeout == 30.5 and options.max_retries == 0
        assert options.structured_output is StructuredOutput.JSON_OBJECT
        assert options.prices.cost(1_000_000, 2_000_000) == pytest.approx(1.35)

    @pytest.mark.parametrize(
        ("table", "key"),
        [
            ({"read_timeout": 0}, "read_timeout"),
            ({"read_timeout": "10"}, "read_timeout"),
            ({"max_retries": -1}, "max_retries"),
            ({"max_retries": 1.5}, "max_retries"),
            ({"max_concurrency": True}, "max_concurrency"),
            ({"structured_output": "yaml"}, "structured_output"),
            ({"prices": 3}, "prices"),
            ({"prices": {"input": 1}}, "prices.input"),
            ({"prices": {"input_per_million": -1}}, "prices.input_per_million"),
            ({"backoff_initial": 5, "backoff_max": 1}, "backoff_initial"),
            ({"mode": "later"}, "mode"),
            ({"batch_discount": 1.5}, "batch_discount"),
            ({"batch_poll_interval": 0}, "batch_poll_interval"),
            ({"batch_max_requests": 0}, "batch_max_requests"),
            ({"batch_max_requests": 50_001}, "batch_max_requests"),
            ({"batch_max_bytes": 100}, "batch_max_bytes"),
            ({"batch_max_bytes": 200 * 1024 * 1024 + 1}, "batch_max_bytes"),
            ({"batch_resubmits": 11}, "batch_resubmits"),
        ],
    )
    def test_bad_values_name_the_key(self, table: dict[str, Any], key: str) -> None:
        with pytest.raises(OptionError) as info:
            parse_client_options(table)
        assert info.value.key == key

    def test_batch_keys(self) -> None:
        """docs/configuration.md "LLM profiles": batch mode and its price, OpenAI's limits."""
        default = parse_client_options({})
        assert default.mode == "online" and default.batch_discount == 0.5
        assert (default.batch_max_requests, default.batch_max_bytes) == (50_000, 200 * 2**20)
        options = parse_client_options(
            {
                "mode": "batch",
                "batch_discount": 0.25,
                "batch_poll_interval": 0.5,
                "batch_max_requests": 100,
                "batch_resubmits": 0,
                "prices": {"input_per_million": 2.0, "output_per_million": 4.0},
            }
        )
        assert options.mode == "batch" and options.batch_poll_interval == 0.5
        assert options.batch_cost(1_000_000, 1_000_000) == pytest.approx(1.5)
        assert options.prices.cost(1_000_000, 1_000_000) == pytest.approx(6.0)


# --- retries -------------------------------------------------------------------------


class TestRetry:
    def test_backoff_doubles_is_capped_and_jittered(self) -> None:
        options = ClientOptions(backoff_initial=0.5, backoff_max=4.0)
        rng = random.Random(7)
        for attempt, base in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)):
            delays = [backoff_delay(attempt, options, rng) for _ in range(50)]
            assert all(base / 2 <= d <= base for d in delays)
            assert len(set(delays)) > 1  # jitter

    def test_retry_after_forms(self) -> None:
        assert parse_retry_after({"Retry-After": "3"}) == 3.0
        assert parse_retry_after({"retry-after": "0.25"}) == 0.25
        assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
        now = time.time()
        date = email.utils.formatdate(now + 30, usegmt=True)
        assert 28 <= parse_retry_after({"Retry-After": date}, now=now) <= 31
        assert parse_retry_after({"Retry-After": "soon"}) is None
        assert parse_retry_after({"Retry-After": "-5"}) == 0.0
        assert parse_retry_after({}) is None and parse_retry_after(None) is None

    def test_retry_after_is_honoured_up_to_its_maximum(self) -> None:
        options = ClientOptions(retry_after_max=10)
        rng = random.Random(1)
        assert next_wait(1, 2.5, options, rng) == 2.5
        assert next_wait(1, 11.0, options, rng) is None
        assert 0 < next_wait(1, None, options, rng) <= options.backoff_initial


# --- limits ----------------------------------------------------------------------------


class TestLimiter:
    def test_requests_per_window(self) -> None:
        limiter = EndpointLimiter(requests_per_minute=2, window=0.4)
        started = time.monotonic()
        for _ in range(3):
            limiter.release(limiter.acquire(1), 1)
        assert time.monotonic() - started >= 0.35  # the third waited for the window

    def test_tokens_per_window_use_actual_counts(self) -> None:
        limiter = EndpointLimiter(tokens_per_minute=100, window=0.4)
        started = time.monotonic()
        limiter.release(limiter.acquire(90), 10)  # estimate 90, actual 10
        limiter.release(limiter.acquire(80), 80)  # fits: 10 + 80 <= 100
        assert time.monotonic() - started < 0.3
        limiter.release(limiter.acquire(50), 50)  # 90 + 50 > 100: waits
        assert time.monotonic() - started >= 0.35

    def test_max_concurrency_is_shared_by_threads(self) -> None:
        limiter = EndpointLimiter(max_concurrency=2)
        lock = threading.Lock()
        state = {"now": 0, "peak": 0}

        def work() -> None:
            ticket = limiter.acquire(1)
            with lock:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
            time.sleep(0.05)
            with lock:
                state["now"] -= 1
            limiter.release(ticket, 1)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert state["peak"] == 2

    def test_a_freed_slot_wakes_one_waiting_caller(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Twelve callers waiting for a window of two: each waits once and is woken once
        when a slot is theirs (docs/performance.md "Wake-ups per call"), where a wake-up of
        every waiting caller at each release made them wait 17 to 42 times. Counted, not
        timed."""
        from runjournal.adapters.llm import ratelimit
        from support.counted_waits import count_condition_waits

        waits = count_condition_waits(monkeypatch, ratelimit)
        limiter = EndpointLimiter(max_concurrency=2)
        held = [limiter.acquire(1), limiter.acquire(1)]
        done: list[int] = []

        def work(i: int) -> None:
            ticket = limiter.acquire(1)
            time.sleep(0.01)  # the request (the other callers run meanwhile)
            limiter.release(ticket, 1, answered=True)
            done.append(i)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        while len(waits) < 12:  # every caller waits for the window
            threading.Event().wait(0.01)
        for ticket in held:
            limiter.release(ticket, 1, answered=True)
        for t in threads:
            t.join(10)
        assert sorted(done) == list(range(12))
        assert len(waits) == 12

    def test_a_window_shrunk_by_429s_and_grown_back_loses_no_waiting_caller(self) -> None:
        """Each release wakes one waiting caller (two when the window grew): with the window
        halved by 429s and grown back by replies, every caller still gets a slot and the
        window is never exceeded."""
        limiter = EndpointLimiter(max_concurrency=4)
        lock = threading.Lock()
        state = {"now": 0, "peak_over": 0}
        done: list[int] = []

        def work(i: int) -> None:
            for n in range(5):
                ticket = limiter.acquire(1)
                with lock:
                    state["now"] += 1
                    over = state["now"] - limiter.concurrency_window
                    state["peak_over"] = max(state["peak_over"], over)
                time.sleep(0.002)
                with lock:
                    state["now"] -= 1
                limiter.release(ticket, 1, answered=True, limited=(i + n) % 7 == 0)
            done.append(i)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(done) == list(range(16))
        assert limiter.rate_limited > 0

    def test_pause_holds_every_caller(self) -> None:
        limiter = EndpointLimiter()
        limiter.pause(0.3)
        started = time.monotonic()
        limiter.release(limiter.acquire(1), 1)
        assert time.monotonic() - started >= 0.25

    def test_stop_wakes_a_waiter(self) -> None:
        limiter = EndpointLimiter(max_concurrency=1)
        held = limiter.acquire(1)
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                limiter.acquire(1)
            except LimiterStopped as exc:
                errors.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.1)
        limiter.stop()
        thread.join(timeout=5)
        assert not thread.is_alive() and errors
        limiter.release(held, 1)

    def test_the_stricter_limit_holds(self) -> None:
        limiter = EndpointLimiter(requests_per_minute=100)
        limiter.tighten(rpm=10, tpm=0, max_concurrency=3)
        assert (limiter.rpm, limiter.tpm, limiter.max_concurrency) == (10, 0, 3)


# --- budget ------------------------------------------------------------------------------


class TestBudget:
    def test_tokens(self) -> None:
        budget = Budget(max_tokens=100)
        budget.check()
        budget.charge(99, 0.0)
        budget.check()
        budget.charge(1, 0.0)
        with pytest.raises(LLMCallFailed) as info:
            budget.check()
        assert info.value.cause is FailureCause.BUDGET_EXHAUSTED
        assert "--max-tokens 100" in info.value.message

    def test_cost(self) -> None:
        budget = Budget(max_cost=0.01)
        budget.charge(10, 0.02)
        with pytest.raises(LLMCallFailed, match="--max-cost"):
            budget.check()
        assert budget.spent() == (10, 0.02)

    def test_a_reservation_that_cannot_be_paid_is_refused(self) -> None:
        """Issue 26 defect 7: `--max-cost 0.05` stopped at 0.0511 (calls in flight)."""
        budget = Budget(max_cost=0.05)
        held = [budget.reserve(100, 0.02), budget.reserve(100, 0.02)]
        with pytest.raises(LLMCallFailed, match="reserved by requests in flight"):
            budget.reserve(100, 0.02)  # 0.04 held + 0.02 > 0.05
        for reservation in held:
            budget.charge(100, 0.02)
            budget.release(reservation)
        assert budget.spent() == (200, 0.04)
        budget.reserve(10, 0.01)  # 0.04 + 0.01 fits exactly

    def test_concurrent_reservations_never_pass_the_limit(self) -> None:
        budget = Budget(max_cost=0.05)
        lock = threading.Lock()
        made: list[float] = []

        def call() -> None:
            for _ in range(50):
                try:
                    reservation = budget.reserve(10, 0.003)
                except LLMCallFailed:
                    return
                budget.charge(10, 0.003)
                budget.release(reservation)
                with lock:
                    made.append(0.003)

        threads = [threading.Thread(target=call) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert budget.spent()[1] <= 0.05 and len(made) == 16  # 16 x 0.003 = 0.048

    def test_unlimited(self) -> None:
        budget = Budget()
        budget.charge(10**9, 10**6)
        budget.check()
        assert not budget.limited


# --- cassette ------------------------------------------------------------------------------


class TestCassette:
    def test_round_trip_is_canonical(self, tmp_path: Path) -> None:
        path = tmp_path / "c.json"
        cassette = Cassette.load(str(path), missing_ok=True)
        for i in (2, 1, 3):
            request = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
            cassette.put(request_digest(request), request, Reply(content=f"a{i}"))
        assert cassette.save()
        first = path.read_bytes()
        again = Cassette.load(str(path), missing_ok=False)
        assert len(again) == 3 and not again.save()  # unchanged: not rewritten
        other = Cassette(str(tmp_path / "d.json"))
        for entry in msgspec.json.decode(first)["exchanges"][::-1]:
            other.put(entry["key"], entry["request"], Reply(content=entry["reply"]["content"]))
        other.save()
        assert (tmp_path / "d.json").read_bytes() == first

    def test_the_key_is_the_canonical_request(self) -> None:
        a = {"model": "m", "messages": [], "temperature": 0}
        b = {"temperature": 0, "messages": [], "model": "m"}
        assert request_digest(a) == request_digest(b)
        assert request_digest(a) != request_digest({**a, "seed": 1})

    def test_merging_keeps_old_exchanges(self, tmp_path: Path) -> None:
        path = str(tmp_path / "c.json")
        first = Cassette.load(path, missing_ok=True)
        first.put("k1", {"q": 1}, Reply(content="1"))
        first.save()
        second = Cassette.load(path, missing_ok=True)
        second.put("k2", {"q": 2}, Reply(content="2"))
        second.save()
        third = Cassette.load(path, missing_ok=False)
        assert third.get("k1") == Reply(content="1") and third.get("k2") == Reply(content="2")

    @pytest.mark.parametrize(
        "content",
        [b"", b"{}", b"[1]", b'{"format": "x", "version": 1, "exchanges": []}'],
    )
    def test_bad_files_are_one_line_errors(self, tmp_path: Path, content: bytes) -> None:
        path = tmp_path / "bad.json"
        path.write_bytes(content)
        with pytest.raises(CassetteError) as info:
            Cassette.load(str(path), missing_ok=False)
        assert str(path) in str(info.value) and "\n" not in str(info.value)

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(CassetteError, match="no such file"):
            Cassette.load(str(tmp_path / "none.json"), missing_ok=False)


# --- structured replies ---------------------------------------------------------------------


class TestStructured:
    def test_schema_of_a_struct_is_an_object_at_the_top(self) -> None:
        schema = schema_for(Invoice, None)
        assert schema["type"] == "object" and "$ref" not in schema
        assert set(schema["required"]) == {"vendor", "total"}
        fmt = response_format(StructuredOutput.JSON_SCHEMA, Invoice, schema)
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Invoice"
        assert response_format(StructuredOutput.JSON_OBJECT, Invoice, schema) == {
            "type": "json_object"
        }

    def test_typed_decode(self) -> None:
        assert decode_reply('{"vendor": "Acme", "total": 3}', Invoice, None) == Invoice("Acme", 3.0)
        assert (
            decode_reply('```json\n{"vendor": "A", "total": 1}\n```', Invoice, None).vendor == "A"
        )
        with pytest.raises(ReplyInvalid, match="not JSON"):
            decode_reply("Sure! The vendor is Acme.", Invoice, None)
        with pytest.raises(ReplyInvalid, match=r"\$\.total"):
            decode_reply('{"vendor": "Acme", "total": "many"}', Invoice, None)

    def test_a_given_schema_is_checked_too(self) -> None:
        schema = {
            "type": "object",
            "properties": {"owner": {"enum": ["Ana", "Tom"]}, "n": {"type": "integer"}},
            "required": ["owner"],
        }

        class Fields(msgspec.Struct):
            owner: str

        assert decode_reply('{"owner": "Ana"}', Fields, schema) == Fields("Ana")
        with pytest.raises(ReplyInvalid, match="not one of"):
            decode_reply('{"owner": "Bob"}', Fields, schema)
        assert decode_reply('{"owner": "Tom", "n": 2}', Any, schema) == {"owner": "Tom", "n": 2}
        with pytest.raises(ReplyInvalid, match=r"\$\.n: expected integer"):
            decode_reply('{"owner": "Tom", "n": 2.5}', Any, schema)

    @pytest.mark.parametrize(
        ("value", "problem"),
        [
            ({"a": [1, 2]}, None),
            ({}, "missing required field 'a'"),
            ({"a": [1, "x"]}, "$.a[1]: expected integer"),
            ({"a": []}, "$.a: needs at least 1 item"),
            ({"a": [1], "b": 1}, "$: unexpected field 'b'"),
            ({"a": [1], "s": "toolong"}, "$.s: longer than 3"),
            ({"a": [1], "s": None}, None),
            ({"a": [0]}, "$.a[0]: below the minimum 1"),
        ],
    )
    def test_check_schema(self, value: Any, problem: str | None) -> None:
        schema = {
            "type": "object",
            "properties": {
                "a": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1},
                "s": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
            },
            "required": ["a"],
            "additionalProperties": False,
            "$defs": {"n": {"type": "integer", "minimum": 1}},
        }
        found = check_schema(value, schema, schema)
        if problem is None:
            assert found is None
        else:
            assert found is not None and problem in found

    def test_offline_answers_fit_the_type(self) -> None:
        assert offline_answer(Invoice, None) == Invoice(vendor="", total=0.0)
        schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]}
        assert offline_answer(Any, schema) == {"k": "a"}
        runtime = OfflineRuntime(OFFLINE)
        assert runtime.ask("p", Invoice) == Invoice(vendor="", total=0.0)


# --- profiles -----------------------------------------------------------------------------


class TestProfiles:
    def _load(self, tmp_path: Path, text: str) -> ProfileRegistry:
        path = tmp_path / "profiles.toml"
        path.write_text(text)
        return ProfileRegistry.load(str(path))

    def test_client_keys_are_not_identity(self, tmp_path: Path) -> None:
        plain = self._load(tmp_path, '[profiles.p]\nprovider = "openai"\nmodel = "m"\n').get("p")
        tuned = self._load(
            tmp_path,
            '[profiles.p]\nprovider = "openai"\nmodel = "m"\nread_timeout = 5\n'
            "requests_per_minute = 10\nmax_retries = 1\nreplay = 'c.json'\n"
            "prices = { input_per_million = 1.0 }\n",
        ).get("p")
        assert tuned.client.read_timeout == 5 and tuned.replay == str(tmp_path / "c.json")
        assert (plain.digest, plain.source_digest) == (tuned.digest, tuned.source_digest)
        json_mode = self._load(
            tmp_path,
            '[profiles.p]\nprovider = "openai"\nmodel = "m"\nstructured_output = "json_object"\n',
        ).get("p")
        assert json_mode.digest != plain.digest  # the request changes, so identity does

    def test_provider_model_strings(self, tmp_path: Path) -> None:
        registry = self._load(tmp_path, '[profiles.mini]\nmodel = "openai/gpt-4o-mini"\n')
        mini = registry.get("mini")
        assert (mini.provider, mini.model) == ("openai", "gpt-4o-mini")
        adhoc = registry.get("openai/gpt-4o-mini")
        assert (adhoc.provider, adhoc.model, adhoc.source_kind) == (
            "openai",
            "gpt-4o-mini",
            "builtin",
        )
        with pytest.raises(ProfileError, match="provider/model"):
            registry.get("nosuch")
        with pytest.raises(ProfileError):
            registry.get("acme/model")  # not a provider with a runtime

    @pytest.mark.parametrize(
        ("table", "key"),
        [
            ('model = "m"', "profiles.p"),
            ('provider = "openai"\nmodel = "m"\nread_timeout = -1', "profiles.p.read_timeout"),
            ('provider = "openai"\nmodel = "m"\nbase_url = ""', "profiles.p.base_url"),
            ('provider = "openai"\nmodel = "m"\nprices = { x = 1 }', "profiles.p.prices.x"),
            ('provider = "openai"\nmodel = "m"\ntimeout = 1', "profiles.p.timeout"),
        ],
    )
    def test_errors_name_the_key(self, tmp_path: Path, table: str, key: str) -> None:
        with pytest.raises(ProfileError) as info:
            self._load(tmp_path, f"[profiles.p]\n{table}\n")
        assert info.value.key == key

    def test_user_config_replay_must_be_absolute(self) -> None:
        with pytest.raises(ProfileError, match="absolute"):
            ProfileRegistry.load(
                None, user_profiles={"p": {"provider": "openai", "model": "m", "replay": "c.json"}}
            )


# --- domain ---------------------------------------------------------------------------------


def _attempt(call: int, attempt: int, status: AttemptStatus, tokens: int) -> LLMAttempt:
    return LLMAttempt(
        call=call,
        attempt=attempt,
        profile_id="p",
        provider="openai",
        model="m",
        status=status,
        prompt_tokens=tokens,
        completion_tokens=1,
        cost=0.5,
        request_sha256="r" * 64,
    )


class TestDomain:
    def test_usage(self) -> None:
        attempts = [
            _attempt(1, 1, AttemptStatus.RATE_LIMITED, 0),
            _attempt(1, 2, AttemptStatus.OK, 10),
            _attempt(2, 1, AttemptStatus.OK, 5),
        ]
        usage = LLMUsage.of(attempts)
        assert (usage.calls, usage.attempts, usage.prompt_tokens, usage.completion_tokens) == (
            2,
            3,
            15,
            3,
        )
        assert usage.cost == 1.5 and usage.tokens == 18
        assert usage.plus(usage).calls == 4 and not LLMUsage()

    def test_causes(self) -> None:
        assert cause_of_status(AttemptStatus.TIMEOUT) is FailureCause.TIMEOUT
        with pytest.raises(ValueError):
            cause_of_status(AttemptStatus.OK)
        # in_doubt is never a stage's failure: no answer was heard (the run was ending)
        assert {s.value for s in AttemptStatus} - {"ok", "in_doubt"} <= {
            c.value for c in FailureCause
        }
        assert (
            failure_cause(LLMCallFailed(FailureCause.AUTH_FAILED, "x")) is FailureCause.AUTH_FAILED
        )
        assert failure_cause(ValueError("x")) is None  # not an LLM call: no cause

    def test_bind_call(self) -> None:
        scope = CallScope("s", "l", Stage.EXTRACT, "c" * 64)
        offline = OfflineRuntime(OFFLINE)
        assert bind_call(offline, scope) == (offline, [])

        class Metered:
            def for_call(self, scope: CallScope) -> Any:
                call = type("Call", (), {})()
                call.attempts = [scope]
                return call

        call, attempts = bind_call(Metered(), scope)
        assert attempts == [scope] and call.attempts is attempts
        assert scope.where() == "step 's' lane 'l' extract chunk cccccccccccc"


# --- llm.json ---------------------------------------------------------------------------------


class RecordingLLM:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def complete(self, prompt: str, **kw: Any) -> str:
        self.calls.append(("complete", kw))
        return '{"ok": true}'

    def ask(self, prompt: str, reply_type: Any, **kw: Any) -> Any:
        self.calls.append(("ask", {"reply_type": reply_type, **kw}))
        return {"owner": "Ana"}


CHUNK = Chunk(id="c" * 64, source="a.md", start=0, end=5, text="Hello", sha256="s" * 64)


class TestLLMJson:
    def test_schema_asks_for_structured_output(self) -> None:
        llm = RecordingLLM()
        schema = {"type": "object", "properties": {"owner": {"type": "string"}}}
        ctx = StageContext(
            step="s", lane="a.md", params={"schema": schema, "temperature": 0, "seed": 3}, llm=llm
        )
        answer = LLMJsonModule().extract(CHUNK, ctx)
        assert answer.answer == {"owner": "Ana"}
        kind, kw = llm.calls[0]
        assert kind == "ask" and kw["schema"] == schema and kw["reply_type"] is Any
        assert kw["options"] == CallOptions(temperature=0.0, seed=3)

    def test_options_pass_through_complete(self) -> None:
        llm = RecordingLLM()
        ctx = StageContext(step="s", lane="a.md", params={"max_tokens": 20}, llm=llm)
        LLMJsonModule().extract(CHUNK, ctx)
        assert llm.calls == [("complete", {"system": None, "options": CallOptions(max_tokens=20)})]

    @pytest.mark.parametrize(
        "params",
        [
            {"temperature": "hot"},
            {"temperature": 3},
            {"max_tokens": 0},
            {"max_tokens": True},
            {"seed": -1},
        ],
    )
    def test_bad_options(self, params: dict[str, Any]) -> None:
        with pytest.raises(BuiltinParamError):
            call_options(params)

    def test_bad_schema(self) -> None:
        ctx = StageContext(step="s", lane="a.md", params={"schema": "object"}, llm=RecordingLLM())
        with pytest.raises(BuiltinParamError, match="schema"):
            LLMJsonModule().extract(CHUNK, ctx)


# --- the usage fold ---------------------------------------------------------------------------


def test_usage_fold_counts_calls_attempts_and_savings() -> None:
    from datetime import UTC, datetime
    from uuid import uuid4

    from runjournal.domain.events import LLMCallAttempted, LLMUsageReused
    from runjournal.projections.llm_usage import LLMUsageFold, usage_line

    origin = uuid4()
    now = datetime.now(UTC)
    where = {"step": "ask", "lane": "a.md", "stage": Stage.EXTRACT}
    events: list[Any] = [
        LLMCallAttempted(
            originator_id=origin,
            originator_version=i + 1,
            timestamp=now,
            chunk=chunk,
            **where,
            **LLMCallAttempted.fields_of(_attempt(call, attempt, status, 10)),
        )
        for i, (chunk, call, attempt, status) in enumerate(
            [
                ("c1", 1, 1, AttemptStatus.RATE_LIMITED),
                ("c1", 1, 2, AttemptStatus.OK),
                ("c2", 1, 1, AttemptStatus.OK),
            ]
        )
    ]
    events.append(
        LLMUsageReused(
            originator_id=origin,
            originator_version=4,
            timestamp=now,
            chunk="c3",
            usage=LLMUsage(calls=1, attempts=1, prompt_tokens=7, completion_tokens=2, cost=0.25),
            **where,
        )
    )
    fold = LLMUsageFold()
    for event in events:
        fold.apply(event)
    view = fold.view()
    assert view["spent"]["calls"] == 2 and view["spent"]["attempts"] == 3
    assert view["spent"]["tokens"] == 33 and view["spent"]["cost"] == 1.5
    assert view["saved"] == {
        "calls": 1,
        "attempts": 1,
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "tokens": 9,
        "cost": 0.25,
    }
    assert view["attempts"] == {"ok": 2, "rate_limited": 1} and view["unsuccessful"] == 1
    assert view["steps"]["ask"]["saved"]["calls"] == 1
    assert "reuse saved 1 call(s)" in usage_line(view)


def test_cached_prompt_tokens_are_read_and_priced_apart() -> None:
    """docs/configuration.md "LLM profiles" `prices`: OpenAI's cached prompt tokens."""
    from runjournal.adapters.llm.client_options import Prices
    from runjournal.adapters.llm.transport import OpenAITransport

    prices = Prices(input_per_million=1.0, output_per_million=2.0, cached_input_per_million=0.25)
    assert prices.cost(1_000_000, 0, 400_000) == pytest.approx(0.6 + 0.1)
    assert Prices(input_per_million=1.0).cost(1_000_000, 0, 400_000) == pytest.approx(1.0)
    transport = OpenAITransport(
        base_url="http://127.0.0.1:9/v1",
        api_key="unused",
        connect_timeout=1,
        read_timeout=1,
        scrub=lambda text: text,
        shown_endpoint="fake",
    )

    def reply(usage: dict[str, Any]) -> Any:
        choice = {"message": {"content": "ok"}, "finish_reason": "stop"}
        return transport.parse({"choices": [choice], "usage": usage})

    base = {"prompt_tokens": 2000, "completion_tokens": 5}
    assert reply(base).cached_tokens == 0
    assert reply({**base, "prompt_tokens_details": {"cached_tokens": 1920}}).cached_tokens == 1920
    assert reply({**base, "prompt_tokens_details": {"cached_tokens": 9999}}).cached_tokens == 2000
    assert reply({**base, "prompt_tokens_details": {"cached_tokens": "x"}}).cached_tokens == 0
