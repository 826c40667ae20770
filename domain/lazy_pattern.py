"""A regular expression compiled on first use, not at import.

A module that compiles its patterns at import makes every command that imports it pay
for them, used or not: resolving a pipeline imports its modules, a fully cached resume
runs none of them (docs/performance.md "Start-up"). `LazyPattern("...")` is written
where `re.compile("...")` was, and answers the same calls.
"""

from __future__ import annotations

import re
from typing import Any

# What the compiled pattern lends its wrapper on first use; later lookups find them in
# the instance, so a call costs what a call on the pattern costs.
_DELEGATED = (
    "match",
    "fullmatch",
    "search",
    "finditer",
    "findall",
    "sub",
    "subn",
    "split",
    "scanner",
    "pattern",
    "flags",
    "groups",
    "groupindex",
)


class LazyPattern:
    """`re.compile(pattern, flags)`, done when one of its attributes is first read."""

    def __init__(self, pattern: str, flags: int | re.RegexFlag = 0) -> None:
        self._source = (pattern, flags)

    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if it was not yet)."""
        found = self.__dict__.get("_compiled")
        if found is None:
            found = re.compile(*self._source)
            for name in _DELEGATED:
                setattr(self, name, getattr(found, name))
            self._compiled = found
        return found

    def __getattr__(self, name: str) -> Any:  # only for names not set on the instance yet
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._source[0]!r})"
