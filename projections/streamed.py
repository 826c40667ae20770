"""A document described lazily: what the streaming JSON writers hold one item at a time.

Pure data (no I/O, no heavy imports: cli/output.py imports it at start-up).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Streamed:
    """`{**doc, key: list(items)}` written one item at a time; an item, or a value of
    `doc`, may itself be Streamed. Without `key`, just `doc`. A document described lazily, for
    the writers that hold one item at a time (cli/output.py `emit_json_streamed`)."""

    def __init__(
        self, doc: dict[str, Any], key: str | None = None, items: Iterable[Any] = ()
    ) -> None:
        self.doc, self.key, self.items = doc, key, items
