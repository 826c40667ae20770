"""What every shape reads during one scan: a text's derived views and lazy patterns.

Nothing here is compiled at import time (start-up time is measured): `lazy_regex`
compiles its pattern on first use and keeps it.
"""

from __future__ import annotations

import functools
import re

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MARKER_PREFIX = "[REDACTED"
"""Every marker starts with this; a value starting with it is never matched again."""


def lazy_regex(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A function returning `re.compile(pattern, flags)`, compiled once, on first call."""

    @functools.cache
    def compiled() -> re.Pattern[str]:
        return re.compile(pattern, flags)

    return compiled


class View:
    """Lazily derived forms of one text, shared by all shapes during one scan."""

    __slots__ = ("_lowered", "_reversed_lowered", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lowered: str | None = None
        self._reversed_lowered: str | None = None

    @property
    def lowered(self) -> str:
        """Lowercase text whose indexes line up with `text` (for case-blind shapes)."""
        if self._lowered is None:
            low = self.text.lower()
            if len(low) != len(self.text):  # some character lowercases to several
                low = "".join(c.lower() if len(c.lower()) == 1 else c for c in self.text)
            self._lowered = low
        return self._lowered

    @property
    def reversed_lowered(self) -> str:
        if self._reversed_lowered is None:
            self._reversed_lowered = self.lowered[::-1]
        return self._reversed_lowered
