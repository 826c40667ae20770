"""The LLM runtime of one run invocation: metered calls to OpenAI-compatible endpoints.

`LLMServices` is built once per `run` by the CLI and owns what calls share: one transport
per endpoint (a client per calling thread, connection reuse), one limiter per endpoint
(requests and tokens per minute, concurrency), the budget, the cassettes and the trace.
Each step with a profile gets a `ProfileRuntime`; the runner asks it for one `Call` per
stage execution and journals the attempts that call collected, in the stage's order
(docs/internals.md "The LLM runtime").

A call: budget check, limiter slot, one request (or a cassette answer), an attempt
record; transient failures (429, 5xx, timeouts, connection errors, malformed
responses) are retried with backoff and jitter or after `Retry-After`, an auth failure
fails at once, and an `ask` whose reply does not validate is asked again with the
validation error. What cannot succeed raises `LLMCallFailed` with a typed cause.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from runjournal.adapters.llm.anthropic_transport import AnthropicTransport
from runjournal.adapters.llm.batch import BatchCollector
from runjournal.adapters.llm.batch_records import BatchRecords
from runjournal.adapters.llm.budget import Budget
from runjournal.adapters.llm.calllog import WriteAhead, reply_key
from runjournal.adapters.llm.cassette import Cassette, CassetteError, Reply, request_digest
from runjournal.adapters.llm.client_options import LLMMode, StructuredOutput
from runjournal.adapters.llm.ratelimit import EndpointLimiter
from runjournal.adapters.llm.reply_formats import (
    ReplyInvalid,
    decode_reply,
    response_format,
    schema_for,
)
from runjournal.adapters.llm.retry import next_wait
from runjournal.adapters.llm.transport import OpenAITransport, TransportError
from runjournal.adapters.llm.truncation import truncated_message, widen
from runjournal.adapters.profiles import DEFAULT_API_KEY_ENV, Profile, runtime_for
from runjournal.adapters.secrets import remember_secrets
from runjournal.domain.decisions import Stage
from runjournal.domain.identity import sha256_hex
from runjournal.domain.llm import (
    RETRYABLE,
    AttemptStatus,
    CallOptions,
    CallScope,
    FailureCause,
    LLMAttempt,
    LLMCallFailed,
    cause_of_status,
)
from runjournal.domain.ports import TraceRecorder
from runjournal.domain.redaction import KNOWN_MARKER, is_secret_key, redact_text, scrub_known
from runjournal.domain.redaction.known import MIN_FRAGMENT

__all__ = ["Call", "LLMServices", "ProfileRuntime", "SchemaRefused"]

_DEFAULT_COMPLETION_ESTIMATE = 256
# Calls parked for a batch at once at most (each holds a job thread while it waits).
MAX_PARKED = 10_000
_UNKEYED = "not-set"  # sent when a local endpoint needs no key and none is set


class SchemaRefused(LLMCallFailed):
    """A 4xx that blames the `json_schema` response format: `json_object` may work."""


def _text_sha(text: str) -> str:
    return sha256_hex(text.encode("utf-8", "surrogatepass"))


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class _Endpoint:
    """What every call to one base URL with one key variable shares."""

    def __init__(self, services: LLMServices, profile: Profile) -> None:
        self.base_url = profile.base_url
        self.provider = profile.provider
        self.key_env = profile.key_env() or DEFAULT_API_KEY_ENV
        self.shown = redact_text(profile.base_url or _DEFAULT_URLS[profile.provider])
        options = profile.client
        self.connect_timeout = options.connect_timeout
        self.read_timeout = options.read_timeout
        self.limiter = EndpointLimiter(
            requests_per_minute=options.requests_per_minute,
            tokens_per_minute=options.tokens_per_minute,
            max_concurrency=options.max_concurrency,
            clock=services.clock,
        )
        self._services = services
        self._transport: OpenAITransport | None = None
        self._key: str | None = None
        self.json_schema_refused = False  # set once the server refused a json_schema format
        self._lock = threading.Lock()
        remember_secrets(profile.secrets(services.environ))

    def scrub(self, text: str) -> str:
        """Text the endpoint sent back without any secret the process holds, before it is
        cut, stored or recorded (docs/internals.md "Known secrets"). A key too short to be
        told apart from words (under 8 characters) is replaced here, exactly, only."""
        text = scrub_known(text)
        key = self._key
        if key and 4 <= len(key) < MIN_FRAGMENT and key in text:
            text = text.replace(key, KNOWN_MARKER)
        return text

    def transport(self) -> OpenAITransport:
        with self._lock:
            if self._transport is None:
                key = self._services.environ.get(self.key_env) or None
                if key is None and self.base_url is None:
                    raise LLMCallFailed(
                        FailureCause.AUTH_FAILED,
                        f"environment variable {self.key_env} is not set (the API key of "
                        f"{self.shown})",
                    )
                self._key = key
                remember_secrets([key])
                kind = AnthropicTransport if self.provider == "anthropic" else OpenAITransport
                self._transport = kind(
                    base_url=self.base_url,
                    api_key=key or _UNKEYED,
                    connect_timeout=self.connect_timeout,
                    read_timeout=self.read_timeout,
                    scrub=self.scrub,
                    shown_endpoint=self.shown,
                )
                try:
                    self._transport.connect()
                except TransportError as exc:  # the provider's client is not installed
                    self._transport = None
                    raise LLMCallFailed(cause_of_status(exc.status), exc.message) from None
            return self._transport

    def key_note(self) -> str:
        if self._key is None and self.base_url is not None:
            return f" ({self.key_env} is not set)"
        return ""

    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()


# The providers with a network runtime, and where each is when a profile names no URL.
_DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}

# The providers whose batch API batch mode uses (the others send online).
_BATCHED = ("openai", "anthropic")

_client_import_started = threading.Event()


def _import_client_meanwhile() -> None:
    """Start importing the `openai` client on a daemon thread, once per process, as soon
    as a step is known to call an endpoint: its ~1 s of imports then overlap planning and
    the chunk plans instead of delaying the first request (docs/performance.md
    "Concurrency: `--jobs N` against an LLM endpoint"). The first request's own import
    waits on Python's import lock until it is done."""
    if _client_import_started.is_set():
        return
    _client_import_started.set()

    threading.Thread(target=_load_client, name="runjournal-openai-import", daemon=True).start()


def _load_client() -> None:
    with contextlib.suppress(Exception):  # the request's own import reports it
        import openai  # noqa: F401
    if gc.get_freeze_count():
        # The stages already run with the start-up heap frozen (app/heap.py): the
        # client's modules (tens of thousands of objects that live as long as the
        # process) join it, or each collection of the run's older objects walks them
        # again (docs/performance.md "Concurrency: `--jobs N` against an LLM endpoint").
        gc.freeze()


class LLMServices:
    """One run invocation's LLM runtime services (built by the CLI's composition root)."""

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        budget: Budget | None = None,
        record: Cassette | None = None,
        replay: Cassette | None = None,
        text_trace: TraceRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        wal: WriteAhead | None = None,
        mode: str | None = None,
        no_wait: bool = False,
        batches: BatchRecords | None = None,
        batch_journal: Any = None,
        allow_parking: Callable[[int], None] | None = None,
        prefetch_client: bool = True,
    ) -> None:
        # Start importing the client as soon as a runtime is made (a cold run), or only
        # when a stage of this run first executes (`client_needed`: a `--resume` that
        # reuses every stage never imports it; docs/performance.md "Start-up").
        self._prefetch = prefetch_client
        self._client_wanted = False
        # write-ahead replies and intents (docs/operations.md "LLM call log")
        self.wal = wal or WriteAhead(None, None)
        # batch runs (docs/operations.md "Batch runs"): `--llm-mode` over the profiles'
        # `mode`, the batch records, where batch events are journaled, the executor's
        # parking (a call waiting for its batch gives its job slot back)
        self.mode = LLMMode(mode) if mode is not None else None
        self.no_wait = no_wait
        self.batches = batches or BatchRecords(None)
        self.batch_journal = batch_journal
        self._allow_parking = allow_parking
        self._collectors: dict[tuple[str | None, str, str], BatchCollector] = {}
        self.environ = os.environ if environ is None else environ
        self.budget = budget or Budget()
        self.record = record
        self.replay = replay
        self.text_trace = text_trace
        self.clock = clock
        self.rng = rng or random.Random()
        self._endpoints: dict[tuple[str | None, str, str], _Endpoint] = {}
        self._cassettes: dict[str, Cassette] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    # --- wiring ------------------------------------------------------------------------

    def runtime_for(self, profile: Profile) -> Any:
        """The runtime of `profile`: metered for `openai` and `anthropic`, offline or
        unavailable otherwise."""
        if profile.provider not in _DEFAULT_URLS:
            return runtime_for(profile)
        replay = self.replay
        if replay is None and profile.replay is not None:
            replay = self._profile_cassette(profile.replay)
        if replay is None:
            self._client_wanted = True
            if self._prefetch:
                _import_client_meanwhile()
        endpoint = self._endpoint(profile)
        mode = self.mode or profile.client.mode
        batch = None
        # OpenAI Files + Batches, or Anthropic message batches (adapters/llm/batch_apis.py)
        if mode is LLMMode.BATCH and replay is None and profile.provider in _BATCHED:
            batch = self._collector(profile, endpoint)
        return ProfileRuntime(self, profile, endpoint, replay, batch)

    def client_needed(self) -> None:
        """A stage is about to execute: start importing the client if a runtime that
        sends requests was made (once per process)."""
        if self._client_wanted:
            _import_client_meanwhile()

    def _collector(self, profile: Profile, endpoint: _Endpoint) -> BatchCollector:
        """The batch collector of the profile's endpoint and model (one per run)."""
        key = (profile.base_url, profile.api_key_env or DEFAULT_API_KEY_ENV, profile.model)
        with self._lock:
            collector = self._collectors.get(key)
            if collector is None:
                collector = BatchCollector(
                    profile=profile,
                    endpoint=endpoint,
                    services=self,
                    records=self.batches,
                    journal=self.batch_journal,
                    no_wait=self.no_wait,
                )
                self._collectors[key] = collector
        if self._allow_parking is not None:
            self._allow_parking(min(MAX_PARKED, profile.client.batch_max_requests))
        return collector

    def _profile_cassette(self, path: str) -> Cassette:
        with self._lock:
            cassette = self._cassettes.get(path)
            if cassette is None:
                cassette = Cassette.load(path, missing_ok=False)  # CassetteError: P3 error
                self._cassettes[path] = cassette
            return cassette

    def _endpoint(self, profile: Profile) -> _Endpoint:
        key = (profile.base_url, profile.key_env() or DEFAULT_API_KEY_ENV, profile.provider)
        with self._lock:
            endpoint = self._endpoints.get(key)
            if endpoint is None:
                endpoint = _Endpoint(self, profile)
                self._endpoints[key] = endpoint
            else:
                options = profile.client
                endpoint.limiter.tighten(
                    rpm=options.requests_per_minute,
                    tpm=options.tokens_per_minute,
                    max_concurrency=options.max_concurrency,
                )
            return endpoint

    # --- lifecycle ---------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        """A backoff pause that ends early (raising) when the run is stopping."""
        if self._stopping.wait(max(0.0, seconds)):
            raise RuntimeError("the run is stopping")

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Wake every waiting call: the run is ending (interrupt, failure or success)."""
        self._stopping.set()
        for collector in list(self._collectors.values()):
            collector.stop()
        for endpoint in list(self._endpoints.values()):
            endpoint.limiter.stop()

    def close(self) -> list[str]:
        """Stop, close clients, save the record cassette; returns what could not be saved."""
        self.stop()
        for endpoint in list(self._endpoints.values()):
            endpoint.close()
        problems: list[str] = []
        if self.record is not None:
            try:
                self.record.save()
            except CassetteError as exc:
                problems.append(str(exc))
        return problems


class ProfileRuntime:
    """A step's runtime for one `openai` profile; `for_call` scopes its attempts."""

    def __init__(
        self,
        services: LLMServices,
        profile: Profile,
        endpoint: _Endpoint,
        replay: Cassette | None,
        batch: BatchCollector | None = None,
    ) -> None:
        self.services = services
        self.profile = profile
        self.endpoint = endpoint
        self.replay = replay
        self.batch = batch  # batch mode: requests wait for a provider batch

    def for_call(self, scope: CallScope) -> Call:
        return Call(self, scope)

    # Unscoped use (outside a stage): attempts are made but reported to no one.
    def complete(
        self, prompt: str, *, system: str | None = None, options: CallOptions | None = None
    ) -> str:
        return self.for_call(_UNSCOPED).complete(prompt, system=system, options=options)

    def ask(self, prompt: str, reply_type: Any, **kw: Any) -> Any:
        return self.for_call(_UNSCOPED).ask(prompt, reply_type, **kw)

    def request(
        self,
        messages: list[dict[str, str]],
        options: CallOptions | None,
        fmt: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The request body: model, messages, the profile's params, per-call options."""
        body: dict[str, Any] = {"model": self.profile.model, "messages": messages}
        body.update(self.profile.params)
        if options is not None:
            for name in ("temperature", "max_tokens", "seed"):
                value = getattr(options, name)
                if value is not None:
                    body[name] = value
        if fmt is not None:
            body["response_format"] = fmt
        return body


_UNSCOPED = CallScope(step="-", lane="-", stage=Stage.EXTRACT)


class Call:
    """One stage execution's use of a runtime: its calls and their attempts, in order."""

    def __init__(self, runtime: ProfileRuntime, scope: CallScope) -> None:
        self.runtime = runtime
        self.scope = scope
        self.attempts: list[LLMAttempt] = []
        self._calls = 0
        self._asked: dict[str, int] = {}  # how often each request was asked (reply keys)
        self._last_key = ""

    # --- what modules call ---------------------------------------------------------------

    def complete(
        self, prompt: str, *, system: str | None = None, options: CallOptions | None = None
    ) -> str:
        messages = _messages(prompt, system)
        request = self.runtime.request(messages, options, None)
        self._calls += 1
        reply, _ = self._exchange(self._calls, request, attempt_base=0)
        return reply.content

    def ask(
        self,
        prompt: str,
        reply_type: Any,
        *,
        system: str | None = None,
        options: CallOptions | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Any:
        """A reply of `reply_type`: `json_schema` output where the server takes it.

        A server that refuses the `json_schema` response format (a 4xx whose message
        blames the response format; any other 4xx is not re-sent) is asked once
        more in `json_object` mode, and the endpoint is remembered as one without schema
        support for the rest of the run; the reply is validated either way.
        """
        endpoint = self.runtime.endpoint
        mode = self.runtime.profile.client.structured_output
        if mode is StructuredOutput.JSON_SCHEMA and endpoint.json_schema_refused:
            mode = StructuredOutput.JSON_OBJECT
        self._calls += 1
        call = self._calls
        try:
            return self._ask(call, mode, prompt, reply_type, system, options, schema)
        except LLMCallFailed as exc:
            fallback = isinstance(exc, SchemaRefused) or exc.cause is FailureCause.REPLAY_MISS
            if not fallback or mode is not StructuredOutput.JSON_SCHEMA:
                raise
            value = self._ask(
                call, StructuredOutput.JSON_OBJECT, prompt, reply_type, system, options, schema
            )
            if exc.cause is FailureCause.REQUEST_REFUSED:
                endpoint.json_schema_refused = True
            return value

    def _ask(
        self,
        call: int,
        mode: StructuredOutput,
        prompt: str,
        reply_type: Any,
        system: str | None,
        options: CallOptions | None,
        schema: Mapping[str, Any] | None,
    ) -> Any:
        runtime = self.runtime
        full_schema = schema_for(reply_type, schema)
        fmt = response_format(mode, reply_type, full_schema)
        if mode is StructuredOutput.JSON_OBJECT:
            shape = msgspec.json.encode(full_schema, order="deterministic").decode()
            note = f"Reply with one JSON value matching this JSON Schema:\n{shape}"
            system = f"{system}\n\n{note}" if system else note
        messages = _messages(prompt, system)
        asks = runtime.profile.client.reply_retries + 1
        made = sum(1 for a in self.attempts if a.call == call)
        widened: int | None = None  # the max_tokens_retry limit, once a reply was cut
        for ask_no in range(1, asks + 1):
            request = runtime.request(messages, options, fmt)
            if widened is not None:
                request["max_tokens"] = widened
            # a re-ask (or a widened retry) is sent online: one request, not another batch
            reply, made = self._exchange(call, request, attempt_base=made, online=ask_no > 1)
            while reply.finish_reason == "length":
                self._mark_last(AttemptStatus.REPLY_TRUNCATED)
                limit = request.get("max_tokens")
                larger = widen(limit, runtime.profile.client.max_tokens_retry, widened)
                if larger is None:
                    raise LLMCallFailed(
                        FailureCause.REPLY_TRUNCATED, truncated_message(runtime.profile.id, limit)
                    )
                widened = larger
                request = {**request, "max_tokens": larger}
                reply, made = self._exchange(call, request, attempt_base=made, online=True)
            try:
                return decode_reply(reply.content, reply_type, schema)
            except ReplyInvalid as exc:
                problem = str(exc)
                self.runtime.services.wal.invalid(self._last_key)
                self._mark_last(AttemptStatus.REPLY_INVALID)
                if ask_no == asks:
                    raise LLMCallFailed(
                        FailureCause.REPLY_INVALID,
                        f"{runtime.profile.id}: the reply did not validate after {asks} "
                        f"ask(s): {problem}",
                    ) from None
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply.content},
                    {
                        "role": "user",
                        "content": f"That reply is not valid: {problem}\n"
                        "Answer again with only the JSON value.",
                    },
                ]
        raise AssertionError("unreachable")  # pragma: no cover

    def _mark_last(self, status: AttemptStatus) -> None:
        """The last attempt was answered, but its reply is not usable: say why."""
        self.attempts[-1] = msgspec.structs.replace(self.attempts[-1], status=status)

    # --- one call: attempts until a reply, or a typed failure ------------------------------

    def _exchange(
        self, call: int, request: dict[str, Any], *, attempt_base: int, online: bool = False
    ) -> tuple[Reply, int]:
        """Attempts of one request until it is answered; returns the reply and attempts made."""
        runtime = self.runtime
        services = runtime.services
        options = runtime.profile.client
        canonical = {k: v for k, v in request.items() if not is_secret_key(k)}
        canonical["provider"] = runtime.profile.provider
        digest = request_digest(canonical)
        attempt = attempt_base
        tries = 0
        wal = services.wal
        occurrence = self._asked[digest] = self._asked.get(digest, 0) + 1
        key = self._last_key = reply_key(self.scope.identity, digest, occurrence)
        if runtime.replay is None and self.scope is not _UNSCOPED:
            stored = wal.lookup(self.scope, key)
            if stored is not None:  # paid for by an earlier run: reused, not asked again
                self._record(
                    call, attempt + 1, AttemptStatus.OK, digest, stored, 0.0, None, reused=True
                )
                return stored, attempt + 1
        if runtime.batch is not None and not online and self.scope is not _UNSCOPED:
            return self._batched(call, attempt + 1, digest, key, request, canonical), attempt + 1
        while True:
            attempt += 1
            tries += 1
            prompt_estimate = _estimate_tokens(str(request.get("messages")))
            completion_cap = int(request.get("max_tokens") or _DEFAULT_COMPLETION_ESTIMATE)
            estimate = prompt_estimate + completion_cap
            reservation = services.budget.reserve(  # held until the attempt is charged
                estimate, options.prices.cost(prompt_estimate, completion_cap)
            )
            if runtime.replay is not None:
                try:
                    return self._replayed(call, attempt, digest, canonical), attempt
                finally:
                    services.budget.release(reservation)
            endpoint = runtime.endpoint
            try:
                transport = endpoint.transport()
                ticket = endpoint.limiter.acquire(estimate)
            except BaseException:
                services.budget.release(reservation)
                raise
            try:
                seq = self._intent(call, attempt, digest, key, request)
            except BaseException:
                endpoint.limiter.release(ticket, 0)
                services.budget.release(reservation)
                raise
            started = services.clock()
            error: TransportError | None = None
            reply: Reply | None = None
            http_status: int | None = None
            try:
                reply, http_status = transport.send(
                    request,
                    attempt_timeout=options.attempt_timeout,
                    max_reply_bytes=options.max_reply_bytes,
                )
            except TransportError as exc:
                error = exc
                http_status = exc.http_status
            except Exception as exc:  # a client bug must still end as a typed failure
                error = TransportError(
                    AttemptStatus.MALFORMED_RESPONSE,
                    f"{endpoint.shown} could not be read ({type(exc).__name__})",
                )
            except BaseException:
                wal.end(seq, None, None)  # no outcome heard: in doubt
                services.budget.release(reservation)
                raise
            finally:
                latency_ms = round((services.clock() - started) * 1000, 3)
            if reply is not None:
                reply = self._counted(reply, request)
                endpoint.limiter.release(
                    ticket, reply.prompt_tokens + reply.completion_tokens, answered=True
                )
                self._record(call, attempt, AttemptStatus.OK, digest, reply, latency_ms, 200)
                services.budget.release(reservation)
                # The reply was scrubbed as it arrived: what the module gets, the call log
                # and the cassette hold the same text, so a replay is byte-identical.
                wal.end(seq, self.attempts[-1], reply, key)
                if services.record is not None:
                    services.record.put(digest, _scrubbed(canonical, redact_text), reply)
                self._trace_text(call, attempt, request, reply.content, AttemptStatus.OK)
                return reply, attempt
            assert error is not None
            endpoint.limiter.release(ticket, 0, limited=error.status is AttemptStatus.RATE_LIMITED)
            self._record(call, attempt, error.status, digest, None, latency_ms, http_status)
            services.budget.release(reservation)
            wal.end(seq, self.attempts[-1], None)
            self._trace_text(call, attempt, request, None, error.status)
            where = f"{runtime.profile.id}: {error.message}{_note(error, endpoint)}"
            if error.status not in RETRYABLE:
                failed = SchemaRefused if error.schema_refused else LLMCallFailed
                raise failed(cause_of_status(error.status), where)
            if tries > options.max_retries:
                raise LLMCallFailed(
                    cause_of_status(error.status), f"{where} (after {tries} attempt(s))"
                )
            wait = next_wait(tries, error.retry_after, options, services.rng)
            if wait is None:
                raise LLMCallFailed(
                    cause_of_status(error.status),
                    f"{where}; the server asked to wait {error.retry_after:g} s, more than "
                    f"retry_after_max {options.retry_after_max:g} s",
                )
            self.attempts[-1] = msgspec.structs.replace(
                self.attempts[-1], wait_ms=round(wait * 1000, 3)
            )
            services.sleep(wait)

    def _batched(
        self,
        call: int,
        attempt: int,
        digest: str,
        key: str,
        request: dict[str, Any],
        canonical: dict[str, Any],
    ) -> Reply:
        """The request answered through a provider batch (docs/operations.md "Batch
        runs"): its estimate held against the budget while it waits, its reply charged at
        the batch price and logged as an online reply is (intent, outcome, reply store)."""
        runtime = self.runtime
        services = runtime.services
        options = runtime.profile.client
        batch = runtime.batch
        assert batch is not None
        prompt_estimate = _estimate_tokens(str(request.get("messages")))
        completion_cap = int(request.get("max_tokens") or _DEFAULT_COMPLETION_ESTIMATE)
        reservation = services.budget.reserve(
            prompt_estimate + completion_cap, options.batch_cost(prompt_estimate, completion_cap)
        )
        try:
            ticket = batch.ask(self.scope, key, digest, request)
        finally:
            services.budget.release(reservation)
        if ticket.reply is None:
            self._record(call, attempt, ticket.status, digest, None, 0.0, None, batched=True)
            raise LLMCallFailed(cause_of_status(ticket.status), ticket.error or "batch failed")
        reply = self._counted(ticket.reply, request)
        seq = self._intent(call, attempt, digest, key, request, batched=True)
        self._record(call, attempt, AttemptStatus.OK, digest, reply, 0.0, 200, batched=True)
        services.wal.end(seq, self.attempts[-1], reply, key)
        if services.record is not None:
            services.record.put(digest, _scrubbed(canonical, redact_text), reply)
        self._trace_text(call, attempt, request, reply.content, AttemptStatus.OK)
        return reply

    def _intent(
        self,
        call: int,
        attempt: int,
        digest: str,
        key: str,
        request: dict[str, Any],
        *,
        batched: bool = False,
    ) -> int:
        """The request's intent, durable before it is sent (raises once the run stops)."""
        profile = self.runtime.profile
        if self.scope is _UNSCOPED:
            return self.runtime.services.wal.begin(None)
        prompt = _estimate_tokens(str(request.get("messages")))
        limit = int(request.get("max_tokens") or _DEFAULT_COMPLETION_ESTIMATE)
        return self.runtime.services.wal.begin(
            self.scope,
            call=call,
            attempt=attempt,
            profile_id=profile.id,
            provider=profile.provider,
            model=profile.model,
            request_sha256=digest,
            endpoint=self.runtime.endpoint.shown,
            key=key,
            prompt_tokens=prompt,
            max_tokens=limit,
            bound_cost=(
                profile.client.batch_cost(prompt, limit)
                if batched
                else profile.client.prices.cost(prompt, limit)
            ),
        )

    def _replayed(self, call: int, attempt: int, digest: str, canonical: dict[str, Any]) -> Reply:
        cassette = self.runtime.replay
        assert cassette is not None
        reply = cassette.get(digest)
        if reply is None:
            raise LLMCallFailed(
                FailureCause.REPLAY_MISS,
                f"cassette {cassette.path} has no recorded answer for {self.scope.where()} "
                f"(request {digest[:16]}; record it with --llm-record)",
            )
        # The boundary a live reply passes (a no-op on the text a recording stored).
        reply = msgspec.structs.replace(reply, content=self.runtime.endpoint.scrub(reply.content))
        self._record(call, attempt, AttemptStatus.OK, digest, reply, 0.0, None, replayed=True)
        self._trace_text(call, attempt, canonical, reply.content, AttemptStatus.OK)
        return reply

    def _counted(self, reply: Reply, request: dict[str, Any]) -> Reply:
        """Token counts the server did not report are estimated (4 characters a token)."""
        prompt, done = reply.prompt_tokens, reply.completion_tokens
        if prompt >= 0 and done >= 0:
            return reply
        return msgspec.structs.replace(
            reply,
            prompt_tokens=prompt if prompt >= 0 else _estimate_tokens(str(request["messages"])),
            completion_tokens=done if done >= 0 else _estimate_tokens(reply.content),
        )

    def _record(
        self,
        call: int,
        attempt: int,
        status: AttemptStatus,
        digest: str,
        reply: Reply | None,
        latency_ms: float,
        http_status: int | None,
        *,
        replayed: bool = False,
        reused: bool = False,
        batched: bool = False,
    ) -> None:
        profile = self.runtime.profile
        prompt = reply.prompt_tokens if reply is not None else 0
        done = reply.completion_tokens if reply is not None else 0
        cached = reply.cached_tokens if reply is not None else 0
        written = reply.cache_write_tokens if reply is not None else 0
        options = profile.client
        cost = (
            options.batch_cost(prompt, done, cached, written)
            if batched
            else options.prices.cost(prompt, done, cached, written)
        )
        if not reused:  # a reused reply costs nothing now
            self.runtime.services.budget.charge(prompt + done, cost)
        self.attempts.append(
            LLMAttempt(
                call=call,
                attempt=attempt,
                profile_id=profile.id,
                provider=profile.provider,
                model=profile.model,
                status=status,
                http_status=http_status,
                prompt_tokens=prompt,
                completion_tokens=done,
                latency_ms=latency_ms,
                cost=cost,
                request_sha256=digest,
                reply_sha256=_text_sha(reply.content) if reply is not None else None,
                replayed=replayed,
                reused=reused,
                cached_tokens=cached,
            )
        )

    def _trace_text(
        self,
        call: int,
        attempt: int,
        request: dict[str, Any],
        reply: str | None,
        status: AttemptStatus,
    ) -> None:
        """Prompt and reply text go to `--debug trace` only (redacted there, key scrubbed)."""
        trace = self.runtime.services.text_trace
        if trace is None:
            return
        scrub = self.runtime.endpoint.scrub
        scope = self.scope
        trace.record(
            "llm",
            "exchange",
            {
                "step": scope.step,
                "lane": scope.lane,
                "stage": scope.stage.value,
                "chunk": scope.chunk,
                "call": call,
                "attempt": attempt,
                "status": status.value,
                "messages": [
                    {"role": m.get("role"), "content": scrub(str(m.get("content")))}
                    for m in request.get("messages", [])
                ],
                "reply": scrub(reply) if reply is not None else None,
            },
        )


def _scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _scrubbed(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, scrub) for v in value]
    return value


def _messages(prompt: str, system: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return messages


def _note(error: TransportError, endpoint: _Endpoint) -> str:
    return endpoint.key_note() if error.status is AttemptStatus.AUTH_FAILED else ""
