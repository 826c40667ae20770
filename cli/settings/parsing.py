"""Value parsers of the settings table, and journal-location redaction.

A parser gets the raw value (a native TOML value, a flag's text or an environment string)
and the directory a relative path is resolved against; it returns the typed value or
raises `Invalid` with what was expected (docs/configuration.md "Values" and "Paths").
"""

from __future__ import annotations

import enum
import os
import unicodedata
from collections.abc import Callable
from typing import Final

from runjournal.domain.lazy_pattern import LazyPattern

Parser = Callable[[object, str], object]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})
_INT_RE: Final = LazyPattern(r"[+-]?[0-9]+")
_URL_RE: Final = LazyPattern(r"[A-Za-z][A-Za-z0-9+.-]*://")
_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


class Invalid(Exception):
    """Raised by parsers; the resolver turns it into `InvalidSettingValue`."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def parse_bool(raw: object, base_dir: str = "") -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise Invalid("a boolean (true/false, yes/no, on/off, 1/0)")


def int_parser(low: int, high: int | None) -> Parser:
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(raw: object, base_dir: str = "") -> int:
        if isinstance(raw, bool):
            raise Invalid(expected)
        if isinstance(raw, int):
            number = raw
        elif isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
            try:
                number = int(raw.strip())
            except ValueError:  # beyond the interpreter's digit limit
                raise Invalid(expected) from None
        else:
            raise Invalid(expected)
        if number < low or (high is not None and number > high):
            raise Invalid(expected)
        return number

    return parse


def choice_parser(enum_type: type[enum.Enum]) -> Parser:
    values = [str(member.value) for member in enum_type]
    expected = "one of " + ", ".join(values)

    def parse(raw: object, base_dir: str = "") -> enum.Enum:
        if isinstance(raw, str) and raw.strip().lower() in values:
            return enum_type(raw.strip().lower())
        raise Invalid(expected)

    return parse


def _path_text(raw: object, expected: str) -> str:
    if isinstance(raw, os.PathLike):
        raw = os.fspath(raw)
    if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
        raise Invalid(expected)
    return raw


def _absolute(text: str, base_dir: str, expected: str) -> str:
    try:
        return os.path.realpath(os.path.join(base_dir, os.path.expanduser(text)))
    except (OSError, ValueError):
        raise Invalid(expected) from None


def parse_path(raw: object, base_dir: str) -> str:
    expected = "a non-empty path"
    return _absolute(_path_text(raw, expected), base_dir, expected)


def parse_cache_root(raw: object, base_dir: str) -> str:
    """A path, or `s3://bucket/prefix` kept as a URL (docs/configuration.md "Paths")."""
    expected = "a non-empty path or s3://bucket/prefix"
    text = _path_text(raw, expected)
    if text.strip().lower().startswith("s3://"):
        from runjournal.adapters.s3_store import parse_s3_url

        try:
            return parse_s3_url(text).url
        except ValueError as exc:
            raise Invalid(str(exc)) from None
    return _absolute(text, base_dir, expected)


def parse_journal(raw: object, base_dir: str) -> str:
    """A PostgreSQL URL stays as given; SQLite (`sqlite:///path` or a path) becomes a path."""
    expected = "a path, sqlite:///PATH or postgresql://..."
    text = _path_text(raw, expected)
    if text.startswith(_POSTGRES_SCHEMES):
        return text
    if text.lower().startswith("sqlite:"):
        rest = text[len("sqlite:") :]
        text = rest[2:] if rest.startswith("//") else rest
        if not text:
            raise Invalid(expected)
    elif _URL_RE.match(text):
        raise Invalid(expected)
    return _absolute(text, base_dir, expected)


def parse_profile(raw: object, base_dir: str = "") -> str:
    if (
        not isinstance(raw, str)
        or not raw.strip()
        or len(raw) > 128
        or any(unicodedata.category(ch).startswith("C") for ch in raw)
    ):
        raise Invalid("a profile id (1-128 printable characters)")
    return raw


def is_postgres_url(journal: str) -> bool:
    return journal.startswith(_POSTGRES_SCHEMES)


def redact_journal(journal: str) -> str:
    """A journal location safe to show or record: each hidden part becomes `***`."""
    # Imported here: the redaction shapes are not needed to start the CLI.
    from runjournal.domain.redaction import redact_url

    return redact_url(journal, mask="***")


EXECUTOR_WORDS: Final = ("threads", "processes", "dask")
DASK_SCHEME: Final = "dask://"
_HOST_RE: Final = LazyPattern(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")


def parse_executor(raw: object, base_dir: str = "") -> str:
    """`threads`, `processes`, `dask` or `dask://HOST:PORT` (a Dask scheduler's address)."""
    expected = "threads, processes, dask or dask://HOST:PORT"
    if not isinstance(raw, str):
        raise Invalid(expected)
    text = raw.strip()
    if text.lower() in EXECUTOR_WORDS:
        return text.lower()
    if not text.lower().startswith(DASK_SCHEME):
        raise Invalid(expected)
    host, sep, port = text[len(DASK_SCHEME) :].rpartition(":")
    if not sep or not _HOST_RE.fullmatch(host) or not port.isascii() or not port.isdigit():
        raise Invalid(expected)
    number = int(port)
    if not 1 <= number <= 65535:
        raise Invalid(expected)
    return f"{DASK_SCHEME}{host}:{number}"
