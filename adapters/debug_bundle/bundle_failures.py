"""What can go wrong with a bundle: allocation errors, and the persistence failures the
writers keep instead of raising (docs/internals.md "Persistence failures and exit codes").
"""

from __future__ import annotations

import msgspec
from runjournal.domain.redaction import safe_error_text


class DebugBundleError(Exception):
    """Base of the debug bundle's errors."""


class BundleAllocationError(DebugBundleError):
    """The bundle could not be allocated; `cleaned` says whether nothing of it remains."""

    def __init__(self, path: str, message: str, *, cleaned: bool) -> None:
        note = "" if cleaned else " (a partial bundle remains, marked INCOMPLETE)"
        super().__init__(safe_error_text(f"cannot allocate debug bundle {path}: {message}{note}"))
        self.path = path
        self.cleaned = cleaned


class PersistenceFailure(msgspec.Struct, frozen=True):
    """One requested debug write that did not happen: journal target, file, one line."""

    target: str
    name: str
    message: str

    def line(self) -> str:
        return f"could not write {self.target}: {self.message}"


def failure_of(target: str, name: str, exc: BaseException) -> PersistenceFailure:
    return PersistenceFailure(target, name, safe_error_text(str(exc) or type(exc).__name__))
