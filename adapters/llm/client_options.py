"""How a profile's endpoint is called: timeouts, retries, rate limits, prices, output format.

These keys of a `[profiles.<id>]` table change how the endpoint is called, not what it
answers, so they are not part of the profile's identity (docs/configuration.md
"LLM profiles"). `structured_output` does change the request and is part of it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.domain.llm import Prices as Prices  # the run and `plan` price alike
from runjournal.domain.llm import batch_price


class OptionError(ValueError):
    """A bad profile option; `key` names it relative to the profile table."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class StructuredOutput(enum.StrEnum):
    """How `ask` constrains a reply: a JSON Schema the server enforces, or JSON mode."""

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"


class LLMMode(enum.StrEnum):
    """How a profile's requests are sent: one by one, or collected into provider batches
    (docs/operations.md "Batch runs")."""

    ONLINE = "online"
    BATCH = "batch"


# OpenAI's Batch API limits per batch (its API reference: 50,000 requests, 200 MB file).
BATCH_MAX_REQUESTS = 50_000
BATCH_MAX_BYTES = 200 * 1024 * 1024


class ClientOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Per-profile client behaviour (defaults documented in docs/configuration.md)."""

    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    attempt_timeout: float = 600.0
    max_reply_bytes: int = 8 * 1024 * 1024
    max_tokens_retry: int = 0
    max_retries: int = 4
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    retry_after_max: float = 120.0
    reply_retries: int = 2
    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    max_concurrency: int = 0
    structured_output: StructuredOutput = StructuredOutput.JSON_SCHEMA
    prices: Prices = msgspec.field(default_factory=Prices)
    # batch runs (docs/configuration.md "LLM profiles", docs/operations.md "Batch runs")
    mode: LLMMode = LLMMode.ONLINE
    batch_discount: float = 0.5  # the batch price as a fraction of the list price
    batch_poll_interval: float = 30.0
    batch_max_requests: int = BATCH_MAX_REQUESTS
    batch_max_bytes: int = BATCH_MAX_BYTES
    batch_resubmits: int = 1  # follow-up batches for errored and expired requests

    def batch_cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """A batched request's cost: the list price times `batch_discount`."""
        cost = self.prices.cost(prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens)
        return batch_price(cost, self.batch_discount)


CLIENT_KEYS: frozenset[str] = frozenset(
    {
        "connect_timeout",
        "read_timeout",
        "attempt_timeout",
        "max_reply_bytes",
        "max_tokens_retry",
        "max_retries",
        "backoff_initial",
        "backoff_max",
        "retry_after_max",
        "reply_retries",
        "requests_per_minute",
        "tokens_per_minute",
        "max_concurrency",
        "structured_output",
        "prices",
        "mode",
        "batch_discount",
        "batch_poll_interval",
        "batch_max_requests",
        "batch_max_bytes",
        "batch_resubmits",
    }
)

_SECONDS = (
    "connect_timeout",
    "read_timeout",
    "attempt_timeout",
    "backoff_initial",
    "backoff_max",
    "retry_after_max",
)
_COUNTS = {
    "max_retries": 20,
    "reply_retries": 10,
    "requests_per_minute": 10_000_000,
    "tokens_per_minute": 10_000_000_000,
    "max_concurrency": 1024,
    "max_tokens_retry": 1_000_000,
    "batch_resubmits": 10,
}
_MAX_REPLY_BYTES = (1024, 1024 * 1024 * 1024)
_PRICE_KEYS = (
    "input_per_million",
    "output_per_million",
    "cached_input_per_million",
    "cache_write_input_per_million",
)


def _number(key: str, value: Any, *, low: float, high: float, zero_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OptionError(key, "must be a number")
    if value < low or value > high or (value == 0 and not zero_ok):
        bound = "≥ 0" if zero_ok else "> 0"
        raise OptionError(key, f"must be {bound} and at most {high:g}")
    return float(value)


def _count(key: str, value: Any, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(key, "must be an integer")
    if not 0 <= value <= high:
        raise OptionError(key, f"must be an integer from 0 to {high}")
    return value


def parse_client_options(table: Mapping[str, Any]) -> ClientOptions:
    """The client keys of one profile table (others are ignored here); raises OptionError."""
    fields: dict[str, Any] = {}
    for key in _SECONDS:
        if key in table:
            fields[key] = _number(key, table[key], low=0, high=3600, zero_ok=False)
    for key, high in _COUNTS.items():
        if key in table:
            fields[key] = _count(key, table[key], high)
    if "max_reply_bytes" in table:
        low, high = _MAX_REPLY_BYTES
        value = _count("max_reply_bytes", table["max_reply_bytes"], high)
        if value < low:
            raise OptionError("max_reply_bytes", f"must be an integer from {low} to {high}")
        fields["max_reply_bytes"] = value
    if "structured_output" in table:
        raw = table["structured_output"]
        try:
            fields["structured_output"] = StructuredOutput(raw)
        except ValueError:
            choices = ", ".join(s.value for s in StructuredOutput)
            raise OptionError("structured_output", f"expected one of {choices}") from None
    if "mode" in table:
        try:
            fields["mode"] = LLMMode(table["mode"])
        except ValueError:
            raise OptionError("mode", "expected one of online, batch") from None
    if "batch_discount" in table:
        fields["batch_discount"] = _number(
            "batch_discount", table["batch_discount"], low=0, high=1, zero_ok=True
        )
    if "batch_poll_interval" in table:
        fields["batch_poll_interval"] = _number(
            "batch_poll_interval", table["batch_poll_interval"], low=0, high=3600, zero_ok=False
        )
    if "batch_max_requests" in table:
        value = _count("batch_max_requests", table["batch_max_requests"], BATCH_MAX_REQUESTS)
        if value < 1:
            raise OptionError(
                "batch_max_requests", f"must be an integer from 1 to {BATCH_MAX_REQUESTS}"
            )
        fields["batch_max_requests"] = value
    if "batch_max_bytes" in table:
        value = _count("batch_max_bytes", table["batch_max_bytes"], BATCH_MAX_BYTES)
        if value < 1024:
            raise OptionError(
                "batch_max_bytes", f"must be an integer from 1024 to {BATCH_MAX_BYTES}"
            )
        fields["batch_max_bytes"] = value
    if "prices" in table:
        raw = table["prices"]
        if not isinstance(raw, Mapping):
            raise OptionError(
                "prices",
                "must be a table (input_per_million, output_per_million, "
                "cached_input_per_million, cache_write_input_per_million)",
            )
        unknown = sorted(set(raw) - set(_PRICE_KEYS))
        if unknown:
            raise OptionError(f"prices.{unknown[0]}", "unknown key")
        fields["prices"] = Prices(
            **{
                k: _number(f"prices.{k}", raw[k], low=0, high=1_000_000, zero_ok=True)
                for k in _PRICE_KEYS
                if k in raw
            }
        )
    options = ClientOptions(**fields)
    if options.backoff_initial > options.backoff_max:
        raise OptionError("backoff_initial", "must not exceed backoff_max")
    return options
