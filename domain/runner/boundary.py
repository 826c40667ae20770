"""The module-call boundary: whatever a module does there becomes a typed stage failure.

A module may raise anything (`SystemExit`, a bare `BaseException`, an exception whose
`__str__` raises) and return anything (warnings that are not text, names with lone
surrogates, a 3 MB warning). Only an operator's interrupt passes through; everything
else becomes a `StageError` the lane turns into a `StageFailure`, and every string the
runner keeps from a module (error text, warnings, output names) is made safe to encode
and bounded here (docs/internals.md "The runner").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from runjournal.domain.modules import OutputFile
from runjournal.domain.redaction import safe_error_text

# A warning is one redacted, printable line of at most this many UTF-8 bytes (error
# messages have ERROR_MESSAGE_LIMIT); the rest is cut and marked with "…".
WARNING_LIMIT = 1000

_T = TypeVar("_T")


class Interrupt(BaseException):
    """An operator's stop raised into whatever code runs, e.g. by a SIGTERM handler.

    It, and KeyboardInterrupt, propagate through the runner: never a stage failure.
    The command line's own interrupt derives from it.
    """


INTERRUPTS: tuple[type[BaseException], ...] = (KeyboardInterrupt, Interrupt)


def is_interrupt(exc: BaseException) -> bool:
    return isinstance(exc, INTERRUPTS)


def guarded(fn: Callable[[], _T], fallback: Callable[[BaseException], _T]) -> _T:
    """`fn()`, or `fallback(exc)` for anything it raises but an interrupt."""
    try:
        return fn()
    except BaseException as exc:
        if is_interrupt(exc):
            raise
        return fallback(exc)


def _type_name(exc: BaseException) -> str:
    name = guarded(lambda: type(exc).__name__, lambda _: "exception")
    return name if isinstance(name, str) else "exception"


def exception_text(exc: BaseException) -> str:
    """`Type: message` of a module's exception; `<unprintable Type>` when `str()` fails."""
    name = _type_name(exc)
    text = guarded(lambda: str(exc), lambda _: None)
    if text is None:
        return f"<unprintable {name}>"
    return f"{name}: {text}"


def warning_text(value: Any) -> str:
    """One module warning as it is kept: redacted, printable, bounded (never raises)."""
    text = value if type(value) is str else guarded(lambda: str(value), lambda _: None)
    if not isinstance(text, str):
        text = f"<unprintable {type(value).__name__} warning>"
    return safe_error_text(text, WARNING_LIMIT)


def module_warnings(values: Iterable[Any]) -> list[str]:
    """A module's or validator's warnings, each made safe; iterating may raise."""
    return [warning_text(v) for v in values]


def checked_outputs(items: Iterable[Any]) -> list[OutputFile]:
    """The files `outputs()` returned, refused unless each is OutputFile(str, bytes).

    A name that cannot be encoded as UTF-8 (a lone surrogate) is refused here, as the
    module's failure, before it reaches any journal or file-system encoding.
    """
    out: list[OutputFile] = []
    for item in items:
        if (
            not isinstance(item, OutputFile)
            or not isinstance(item.name, str)
            or not isinstance(item.data, bytes)
        ):
            raise TypeError("outputs() must return OutputFile(name, bytes)")
        try:
            item.name.encode("utf-8")
        except UnicodeEncodeError:
            shown = item.name.encode("ascii", "backslashreplace").decode("ascii")
            raise ValueError(
                f"outputs() returned an output name that is not valid UTF-8: {shown}"
            ) from None
        out.append(item)
    return out
