"""The journal's errors: every one carries a single, bounded, redacted line.

See docs/internals.md "Run journal adapter" for which error means what.
"""

from __future__ import annotations

from collections.abc import Sequence

from runjournal.domain.redaction import safe_error_text

__all__ = [
    "AmbiguousRun",
    "JournalCorrupt",
    "JournalError",
    "JournalMissing",
    "JournalUnavailable",
    "JournalUrlError",
    "RunAlreadyExists",
    "RunNotFound",
    "describe",
    "one_line",
]


class JournalError(Exception):
    """The journal could not do what was asked (a run that hits this fails)."""


class JournalUnavailable(JournalError):
    """The journal cannot be opened, reached or written."""


class JournalMissing(JournalUnavailable):
    """A SQLite journal file that is not there (deleted or moved)."""


class JournalUrlError(JournalUnavailable):
    """The journal URL itself is unusable (a configuration error, not an outage)."""


class JournalCorrupt(JournalError):
    """Stored events do not decode (or replay) into valid typed events."""


class RunNotFound(JournalError, LookupError):
    """No run matches the reference."""


class AmbiguousRun(JournalError, LookupError):
    """A run id prefix matches more than one run."""


class RunAlreadyExists(JournalError):
    """Events for these versions of the run are already recorded."""


def one_line(text: str) -> str:
    """User-facing error text: one bounded, escaped line with credential shapes hidden."""
    return safe_error_text(" ".join(text.split()), limit=400)


def describe(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """The exception as text, with known secrets (e.g. the URL's password) hidden."""
    text = str(exc)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
