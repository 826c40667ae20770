"""What a hostile or broken server may send, bounded before it is believed.

A response body is read in chunks under two limits the connect/read timeouts cannot
give: a total deadline per attempt (`attempt_timeout`: a server that dribbles one byte
per read timeout would otherwise hold a document for ever) and a size cap
(`max_reply_bytes`, enforced while reading, so a huge body is never held in memory).
Token counts are believed only inside sane bounds, and a 4xx is a refusal of the
`json_schema` format only when the server's message says so (docs/operations.md
"Hostile servers").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

# More tokens than any model's context in one attempt: a count above it is a lie.
MAX_SANE_TOKENS = 100_000_000

_SCHEMA_WORDS = re.compile(r"response_format|json_schema|json schema|schema|structured", re.I)


class BodyTooLarge(Exception):
    """The body passed `max_reply_bytes` (reading stopped there)."""


class AttemptDeadline(Exception):
    """The attempt's total deadline passed while the body was still arriving."""


def read_bounded(
    chunks: Iterable[bytes],
    *,
    limit: int,
    deadline: float,
    clock: Callable[[], float],
    declared: str | None = None,
) -> bytes:
    """The body, or BodyTooLarge / AttemptDeadline as soon as a limit is passed.

    `declared` is the Content-Length header: a body announced larger than `limit` is
    refused before a byte of it is read.
    """
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge(int(declared))
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(size)
        parts.append(chunk)
        if clock() > deadline:
            raise AttemptDeadline()
    return b"".join(parts)


def usage_problem(prompt: Any, completion: Any) -> str | None:
    """Why the reported token counts cannot be believed, or None (absent counts are fine)."""
    for name, value in (("prompt_tokens", prompt), ("completion_tokens", completion)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return f"usage {name} is not an integer"
        if not 0 <= value <= MAX_SANE_TOKENS:
            return f"usage {name} {value:.3g} is outside 0..{MAX_SANE_TOKENS:.0e}"
    return None


def refuses_schema(message: str) -> bool:
    """Does a 4xx's message blame the response format (so `json_object` may work)?"""
    return bool(_SCHEMA_WORDS.search(message))
