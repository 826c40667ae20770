"""Journal URLs: `sqlite:///abs/path`, a plain path, or `postgresql://user:pass@host:port/db`.

Parsing never connects; it turns a URL into a typed location and a display form with the
password hidden. See docs/internals.md "Backends".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from runjournal.adapters.journal.journal_errors import JournalUrlError, one_line
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.redaction import redact_url

__all__ = [
    "PostgresLocation",
    "SqliteLocation",
    "parse_journal_url",
    "redact_url",
]

# PostgreSQL's connect timeout (seconds) unless the URL sets `connect_timeout`; here so the
# CLI can parse a URL without importing the journal application (eventsourcing).
DEFAULT_CONNECT_TIMEOUT: Final = 10
_PG_OPTIONS: Final = frozenset({"connect_timeout", "schema"})
_SCHEME: Final = LazyPattern(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class SqliteLocation:
    path: str  # absolute

    @property
    def url(self) -> str:
        return f"sqlite://{self.path}"


@dataclass(frozen=True)
class PostgresLocation:
    host: str
    port: str
    dbname: str
    user: str
    password: str = field(repr=False)
    schema: str
    connect_timeout: int
    shown: str  # the URL with its password redacted

    def connect_kwargs(self) -> dict[str, str]:
        """psycopg connection keywords (empty ones left out)."""
        kwargs = {
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "user": self.user,
            "password": self.password,
        }
        return {k: v for k, v in kwargs.items() if v}


def parse_journal_url(url: str, *, connect_timeout: int) -> SqliteLocation | PostgresLocation:
    """The location `url` names; `JournalUrlError` when it cannot be used at all."""
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if scheme in ("postgresql", "postgres"):
        return _parse_postgres(url, connect_timeout)
    if scheme == "sqlite":
        path = unquote(url[len("sqlite://") :].partition("?")[0])
    elif scheme:
        raise JournalUrlError(
            one_line(f"unsupported journal URL scheme {scheme!r}: {redact_url(url)}")
        )
    else:
        path = url
    if not path:
        raise JournalUrlError("the journal URL names no SQLite file")
    return SqliteLocation(os.path.abspath(path))


def _parse_postgres(url: str, connect_timeout: int) -> PostgresLocation:
    try:
        parts = urlsplit(url)
        port = parts.port or 5432
    except ValueError as exc:
        raise JournalUrlError(one_line(f"invalid PostgreSQL URL {redact_url(url)}")) from exc
    shown = redact_url(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - _PG_OPTIONS)
    if unknown:
        raise JournalUrlError(
            one_line(f"unsupported PostgreSQL URL option(s) {', '.join(unknown)} in {shown}")
        )
    try:
        timeout = max(2, int(options.get("connect_timeout") or connect_timeout))
    except ValueError as exc:
        raise JournalUrlError(one_line(f"invalid connect_timeout in {shown}")) from exc
    return PostgresLocation(
        host=parts.hostname or "",
        port=str(port),
        dbname=unquote(parts.path.lstrip("/")),
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        schema=options.get("schema", ""),
        connect_timeout=timeout,
        shown=shown,
    )
