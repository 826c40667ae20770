"""A reply cut at `max_tokens` is typed, and may be asked once more at a larger limit.

A structured reply with `finish_reason = "length"` is not "invalid JSON": the model ran
out of room. Re-asking at the same limit cuts it again, so the call fails with cause
`reply_truncated` naming the limit, unless the profile's `max_tokens_retry` allows one
re-ask at that larger limit (docs/configuration.md "LLM profiles").
"""

from __future__ import annotations

from typing import Any


def widen(limit: Any, retry_limit: int, widened: int | None) -> int | None:
    """The limit of the one re-ask allowed after a cut reply, or None (fail now).

    None when `max_tokens_retry` is off, was already used, or is no larger than the
    limit that cut the reply.
    """
    if not retry_limit or widened is not None:
        return None
    if isinstance(limit, int) and not isinstance(limit, bool) and retry_limit <= limit:
        return None
    return retry_limit


def truncated_message(profile_id: str, limit: Any) -> str:
    """The error line of a cut reply: names the limit and what to change."""
    shown = f"max_tokens {limit}" if limit is not None else "the server's default max_tokens"
    return (
        f"{profile_id}: the reply was cut at {shown} (finish_reason length); raise "
        "max_tokens or set the profile's max_tokens_retry"
    )
