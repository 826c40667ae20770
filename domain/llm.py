"""What the runner and the journal know of LLM calls: causes, attempts, usage, call scopes.

The runtime itself (network, retries, rate limits, cassettes) is an adapter; here are
only the typed facts it reports (docs/modules.md "Asking an LLM"). A module's stage
calls `ctx.llm`; the runner gives each stage execution its own metered call scope, so
every attempt is journaled in the stage's order on the calling thread whatever `--jobs`
is, and a checkpoint records what producing it cost (docs/internals.md "The LLM
runtime").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec
from runjournal.domain.decisions import Stage


class FailureCause(enum.StrEnum):
    """Why a stage failed: typed where the failure is detected, never parsed from text."""

    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    CONNECTION_ERROR = "connection_error"
    MALFORMED_RESPONSE = "malformed_response"
    AUTH_FAILED = "auth_failed"
    REQUEST_REFUSED = "request_refused"
    REPLY_INVALID = "reply_invalid"
    REPLY_TRUNCATED = "reply_truncated"
    REPLY_TOO_LARGE = "reply_too_large"
    BUDGET_EXHAUSTED = "budget_exhausted"
    REPLAY_MISS = "replay_miss"
    # the call's worker, not its module (docs/operations.md "Executors")
    MODULE_UNAVAILABLE = "module_unavailable"
    WORKER_LOST = "worker_lost"


CAUSE_DESCRIPTIONS: dict[FailureCause, str] = {
    FailureCause.RATE_LIMITED: "The endpoint kept answering 429 (rate limited) after every retry.",
    FailureCause.TIMEOUT: "Connecting or reading timed out on every attempt.",
    FailureCause.SERVER_ERROR: "The endpoint kept answering 5xx after every retry.",
    FailureCause.CONNECTION_ERROR: "The endpoint could not be reached or reset the connection.",
    FailureCause.MALFORMED_RESPONSE: "The endpoint's response was not a chat completion.",
    FailureCause.AUTH_FAILED: "The endpoint refused the credentials (401/403), or none were set.",
    FailureCause.REQUEST_REFUSED: "The endpoint refused the request itself (another 4xx).",
    FailureCause.REPLY_INVALID: "The model's reply did not validate, after every re-ask.",
    FailureCause.REPLY_TRUNCATED: "The reply was cut at max_tokens (finish_reason length).",
    FailureCause.REPLY_TOO_LARGE: "The response was larger than the profile's max_reply_bytes.",
    FailureCause.BUDGET_EXHAUSTED: "--max-cost or --max-tokens was reached: no new call was made.",
    FailureCause.REPLAY_MISS: "--llm-replay has no recorded answer for this request.",
    FailureCause.MODULE_UNAVAILABLE: "A worker of --executor could not load the step's module.",
    FailureCause.WORKER_LOST: "Every worker that ran the call died before it answered.",
}


class AttemptStatus(enum.StrEnum):
    """How one request to an endpoint ended."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    CONNECTION_ERROR = "connection_error"
    MALFORMED_RESPONSE = "malformed_response"
    AUTH_FAILED = "auth_failed"
    REQUEST_REFUSED = "request_refused"
    REPLY_INVALID = "reply_invalid"
    REPLY_TRUNCATED = "reply_truncated"
    REPLY_TOO_LARGE = "reply_too_large"
    # sent, and no answer was ever heard (the process died or gave up waiting): the
    # server may have billed it, so spend counts it at its upper bound
    # (docs/operations.md "LLM call log")
    IN_DOUBT = "in_doubt"


# Transient statuses: the same request may succeed when asked again after a pause.
RETRYABLE: frozenset[AttemptStatus] = frozenset(
    {
        AttemptStatus.RATE_LIMITED,
        AttemptStatus.TIMEOUT,
        AttemptStatus.SERVER_ERROR,
        AttemptStatus.CONNECTION_ERROR,
        AttemptStatus.MALFORMED_RESPONSE,
    }
)


def cause_of_status(status: AttemptStatus) -> FailureCause:
    """The failure cause of a call whose last attempt ended with `status` (not OK)."""
    if status is AttemptStatus.OK:
        raise ValueError("an OK attempt is no failure")
    return FailureCause(status.value)


class CallOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Per-call sampling options; None leaves the profile's `params` (or the server) to decide."""

    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None


class CallScope(msgspec.Struct, frozen=True):
    """Where a call is made: the stage execution that owns its attempts."""

    step: str
    lane: str
    stage: Stage
    chunk: str = ""
    # the stage's identity scope: a stored reply is reused only within it
    identity: str = ""
    # whether a stored reply may answer this stage's requests (a resumed, unforced lane)
    reuse: bool = False

    def where(self) -> str:
        """`step 's' lane 'l' chunk 'c…'` for error lines (the chunk id shortened)."""
        text = f"step '{self.step}' lane '{self.lane}' {self.stage.value}"
        if self.chunk:
            text += f" chunk {self.chunk[:12]}"
        return text


class AttemptSpend(Protocol):
    """What an attempt costs: an `LLMAttempt`, or the `LLMCallAttempted` journaling one."""

    @property
    def call(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cost(self) -> float: ...
    @property
    def cached_tokens(self) -> int: ...


class LLMAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """One request of one call (retries and re-asks are attempts of the same call).

    Text never appears here: the request and reply are identified by their sha256.
    """

    call: int
    attempt: int
    profile_id: str
    provider: str
    model: str
    status: AttemptStatus
    http_status: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    cost: float = 0.0
    request_sha256: str
    reply_sha256: str | None = None
    wait_ms: float = 0.0
    replayed: bool = False
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    # answered by a reply a run before stored (no request sent): journaled as
    # `LLMUsageReused`, never as an attempt (docs/operations.md "LLM call log")
    reused: bool = False


class LLMUsage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Calls, attempts, tokens and cost: what producing a stage result took."""

    calls: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __bool__(self) -> bool:
        return self.attempts > 0 or self.calls > 0

    def plus(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(
            calls=self.calls + other.calls,
            attempts=self.attempts + other.attempts,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=round(self.cost + other.cost, 9),
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )

    @classmethod
    def of(cls, attempts: Sequence[AttemptSpend]) -> LLMUsage:
        """What `attempts` took: `LLMAttempt`s, or the `LLMCallAttempted` journaling them."""
        return cls(
            calls=len({a.call for a in attempts}),
            attempts=len(attempts),
            prompt_tokens=sum(a.prompt_tokens for a in attempts),
            completion_tokens=sum(a.completion_tokens for a in attempts),
            cost=round(sum(a.cost for a in attempts), 9),
            cached_tokens=sum(a.cached_tokens for a in attempts),
        )

    def view(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tokens": self.tokens,
            "cost": self.cost,
            # prompt tokens served from the provider's cache: shown once there are any
            **({"cached_tokens": self.cached_tokens} if self.cached_tokens else {}),
        }


class Prices(msgspec.Struct, frozen=True, kw_only=True):
    """Price per million prompt (input) and completion (output) tokens, in any one currency:
    a profile's `prices` (docs/configuration.md "LLM profiles"). The run prices each attempt
    with `cost`, and `plan` its forecast (docs/operations.md "`plan`")."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0
    # prompt tokens served from the provider's prompt cache (OpenAI
    # `prompt_tokens_details.cached_tokens`); None: priced as other input
    cached_input_per_million: float | None = None
    # prompt tokens written to the provider's prompt cache (Anthropic
    # `cache_creation_input_tokens`); None: priced as other input
    cache_write_input_per_million: float | None = None

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        prompt = max(0, prompt_tokens)
        cached = min(max(0, cached_tokens), prompt)
        written = min(max(0, cache_write_tokens), prompt - cached)
        read_price = self.cached_input_per_million
        write_price = self.cache_write_input_per_million
        total = (
            (prompt - cached - written) * self.input_per_million
            + cached * (self.input_per_million if read_price is None else read_price)
            + written * (self.input_per_million if write_price is None else write_price)
            + completion_tokens * self.output_per_million
        )
        return round(total / 1_000_000, 9)


def batch_price(cost: float, discount: float) -> float:
    """What a batched request costs: its list price times the profile's `batch_discount`."""
    return round(cost * discount, 9)


def total_usage(usages: Iterable[LLMUsage]) -> LLMUsage:
    out = LLMUsage()
    for usage in usages:
        out = out.plus(usage)
    return out


class LLMCallFailed(Exception):
    """A call that did not produce a reply; the stage fails with `cause` (never retried here)."""

    def __init__(self, cause: FailureCause, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


def failure_cause(exc: BaseException) -> FailureCause | None:
    """The typed cause of a stage error raised by an LLM call; None for anything else.

    A stage that failed otherwise (the module raised, its codec refused the value) is
    told by its reason code alone, `stage_failed` (docs/operations.md "Failure causes").
    """
    cause = getattr(exc, "cause", None)
    if isinstance(exc, LLMCallFailed) and isinstance(cause, FailureCause):
        return cause
    return None


class MeteredCall(Protocol):
    """The runtime as one stage execution sees it; `attempts` fills as it calls."""

    attempts: list[LLMAttempt]

    def complete(
        self, prompt: str, *, system: str | None = None, options: CallOptions | None = None
    ) -> str: ...


class MeteredRuntime(Protocol):
    """A runtime that reports its attempts: the runner asks it for one call scope per stage."""

    def for_call(self, scope: CallScope) -> MeteredCall: ...


def bind_call(llm: Any, scope: CallScope) -> tuple[Any, list[LLMAttempt]]:
    """The runtime for one stage execution and the list its attempts are collected in.

    A runtime without `for_call` (the offline profile, a module's own fake) makes no
    metered calls: it is used as it is and reports nothing.
    """
    for_call = getattr(llm, "for_call", None)
    if for_call is None:
        return llm, []
    call = for_call(scope)
    return call, call.attempts
