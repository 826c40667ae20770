"""Bounded retries: exponential backoff with jitter, and the server's `Retry-After`.

Every attempt is journaled by the runtime, so the client library's own retries are
switched off and the loop is ours (docs/internals.md "The LLM runtime").
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

from runjournal.adapters.llm.client_options import ClientOptions


def backoff_delay(attempt: int, options: ClientOptions, rng: random.Random) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): doubling, capped, jittered.

    "Equal jitter": half the capped exponential delay is fixed, half is random, so
    concurrent callers spread out but none retries at once.
    """
    base = min(options.backoff_max, options.backoff_initial * (2.0 ** max(0, attempt - 1)))
    return base / 2 + rng.random() * base / 2


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, `retry-after` seconds or date."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(name)
        if value is None:
            continue
        try:
            delay = float(value.strip())
        except ValueError:
            continue
        if math.isnan(delay):
            continue
        return max(0.0, delay / divisor)
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        when = email.utils.mktime_tz(parsed)
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0.0, float(when - (time.time() if now is None else now)))


def next_wait(
    attempt: int, retry_after: float | None, options: ClientOptions, rng: random.Random
) -> float | None:
    """How long to wait before the next attempt; None when the server asks for too long."""
    if retry_after is not None:
        if retry_after > options.retry_after_max:
            return None
        return retry_after
    return backoff_delay(attempt, options, rng)
