"""The `eventsourcing` application behind a journal, and opening one for a URL.

`RunJournalApp` takes its settings only from the dict we pass (never `os.environ`) and
uses our `EventMapper`. `open_journal` builds it for SQLite or PostgreSQL and wraps it
in a `JournalStore`. See docs/internals.md "Environment isolation" and "Backends".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar
from urllib.parse import quote
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, PersistenceError
from eventsourcing.utils import Environment, EnvType
from runjournal.adapters.fsroot import FsError, FsRoot, make_trusted_dirs
from runjournal.adapters.journal.bounded import TimedOut, call_bounded
from runjournal.adapters.journal.codec import EventMapper
from runjournal.adapters.journal.journal_errors import (
    JournalMissing,
    JournalUnavailable,
    describe,
    one_line,
)
from runjournal.adapters.journal.store import JournalStore
from runjournal.adapters.journal.url import (
    DEFAULT_CONNECT_TIMEOUT,
    PostgresLocation,
    SqliteLocation,
    parse_journal_url,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_JOURNAL_TIMEOUT",
    "DEFAULT_SQLITE_LOCK_TIMEOUT",
    "RunJournalApp",
    "open_existing_journal",
    "open_journal",
]


class RunJournalApp(Application[UUID]):
    """Thin application: our mapper, and settings only from the env dict we pass."""

    name = "RunJournal"

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # The library would merge os.environ, where RUNJOURNAL_* are our user settings.
        return Environment(name, dict(env or {}))

    def construct_mapper(self) -> Mapper[UUID]:
        return EventMapper()


_T = TypeVar("_T")

DEFAULT_SQLITE_LOCK_TIMEOUT: Final = 15
DEFAULT_JOURNAL_TIMEOUT: Final = 30


def open_journal(
    url: str,
    *,
    lock_timeout: int = DEFAULT_SQLITE_LOCK_TIMEOUT,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    read_only: bool = False,
    timeout: float = DEFAULT_JOURNAL_TIMEOUT,
    directory: FsRoot | None = None,
) -> JournalStore:
    """Open `sqlite:///abs/path`, a plain path, or `postgresql://user:pass@host:port/db`.

    `read_only` (for commands that only read) opens an existing SQLite journal without
    writing to it, so a journal on a read-only file system or in a read-only file can be
    read (docs/internals.md "Backends"). `timeout` (the `journal_timeout` setting) bounds
    how long opening a PostgreSQL journal, and each later operation on it, waits for the
    server. `directory`, for SQLite, is the directory holding the database file, already
    opened once by the caller (the composition root): the file is then opened through that
    handle (`FsRoot.fd_path`), so a swap of the directory's path for a symlink cannot
    redirect the journal (docs/internals.md "Backends").
    """
    location = parse_journal_url(url, connect_timeout=connect_timeout)
    if isinstance(location, PostgresLocation):
        return _open_postgres(location, timeout)
    path = None
    if directory is not None:
        try:
            path = directory.fd_path(os.path.basename(location.path))
        except (FsError, ValueError) as exc:
            raise JournalUnavailable(
                one_line(f"cannot open journal {location.url}: {describe(exc)}")
            ) from exc
    if read_only:
        store = _open_sqlite_read_only(location, lock_timeout, path)
        if store is not None:
            return store
    return _open_sqlite(location, lock_timeout, path)


def open_existing_journal(
    url: str, *, timeout: float = DEFAULT_JOURNAL_TIMEOUT, lock_timeout: int = 5
) -> JournalStore:
    """Open `url` only to read it, creating and initialising nothing: another project's
    journal that `gc --cache` reads (docs/operations.md "Cache retention").

    `JournalMissing` when a SQLite file is not there; `JournalUnavailable` when it is not
    a journal or cannot be read, or a PostgreSQL server does not answer.
    """
    location = parse_journal_url(url, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
    if isinstance(location, PostgresLocation):
        return _open_postgres(location, timeout)
    if not os.path.lexists(location.path):
        raise JournalMissing(f"no journal at {location.url}")
    store = _open_sqlite_read_only(location, lock_timeout, None)
    if store is None:
        raise JournalUnavailable(f"cannot open journal {location.url}: not a journal")
    return store


# --- SQLite ----------------------------------------------------------------------


def _open_sqlite(location: SqliteLocation, lock_timeout: int, fd_path: str | None) -> JournalStore:
    path, url = fd_path or location.path, location.url
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": path,
        "SQLITE_LOCK_TIMEOUT": str(int(lock_timeout)),
    }
    try:
        if fd_path is None:
            make_trusted_dirs(os.path.dirname(path))
        if os.path.isdir(path):
            raise IsADirectoryError(f"{location.path} is a directory")
        # Pre-create private: SQLite gives its -wal/-shm files the database's mode.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        deadline = time.monotonic() + lock_timeout
        _retry_while_locked(lambda: _switch_to_wal(path, lock_timeout), deadline)
        app = _retry_while_locked(lambda: RunJournalApp(env=env), deadline)
    except Exception as exc:
        raise JournalUnavailable(one_line(f"cannot open journal {url}: {describe(exc)}")) from exc
    return JournalStore(app, url)


def _open_sqlite_read_only(
    location: SqliteLocation, lock_timeout: int, fd_path: str | None
) -> JournalStore | None:
    """The journal opened `mode=ro` (`immutable=1` on a read-only file system).

    None when the file is not yet a journal (no events table, or not in WAL mode): the
    ordinary open then initialises it as before.
    """
    path, url = fd_path or location.path, location.url
    base = f"file:{quote(path)}?mode=ro"
    try:
        uri = base if _is_journal(base, lock_timeout) else None
    except sqlite3.OperationalError as exc:
        # A read-only connection to a WAL file must create its -shm beside it; on a
        # read-only file system it cannot, so the file is opened as immutable instead.
        # Only safe when no -wal holds commits the database file does not have yet.
        wal = f"{path}-wal"
        if os.path.exists(wal) and os.path.getsize(wal) > 0:
            raise JournalUnavailable(
                one_line(
                    f"cannot open journal {url} read-only: {describe(exc)} "
                    "(and its -wal file holds commits that cannot be read without it)"
                )
            ) from exc
        try:
            uri = (
                f"{base}&immutable=1" if _is_journal(f"{base}&immutable=1", lock_timeout) else None
            )
        except sqlite3.Error as inner:
            raise JournalUnavailable(
                one_line(f"cannot open journal {url} read-only: {describe(inner)}")
            ) from inner
    except sqlite3.Error as exc:
        raise JournalUnavailable(
            one_line(f"cannot open journal {url} read-only: {describe(exc)}")
        ) from exc
    if uri is None:
        return None
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": uri,
        "SQLITE_LOCK_TIMEOUT": str(int(lock_timeout)),
        "CREATE_TABLE": "no",
    }
    try:
        app = RunJournalApp(env=env)
    except Exception as exc:
        raise JournalUnavailable(
            one_line(f"cannot open journal {url} read-only: {describe(exc)}")
        ) from exc
    return JournalStore(app, url, read_only=True)


def _is_journal(uri: str, lock_timeout: int) -> bool:
    """Whether the database at `uri` has the events table and is in WAL mode (or immutable)."""
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=lock_timeout)) as db:
        mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        table = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stored_events'"
        ).fetchone()
    return table is not None and (mode == "wal" or "immutable=1" in uri)


def _switch_to_wal(path: str, lock_timeout: int) -> None:
    with contextlib.closing(sqlite3.connect(path, timeout=lock_timeout)) as db:
        db.execute("PRAGMA journal_mode=WAL")


def _retry_while_locked(make: Callable[[], _T], deadline: float) -> _T:
    """Run `make`, retrying while another process holds the lock.

    On a fresh file the library's `PRAGMA journal_mode=WAL` and `CREATE TABLE` can fail
    with "database is locked" at once, without SQLite's busy wait, when two processes
    open it together; this is only ever slow on first use.
    """
    delay = 0.005
    while True:
        try:
            return make()
        except (sqlite3.OperationalError, PersistenceError) as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


# --- PostgreSQL ------------------------------------------------------------------

# An arbitrary, fixed advisory-lock key ("rjopen" in ASCII) serializing journal opens.
_PG_OPEN_LOCK = 0x726A6F70656E


def _open_postgres(location: PostgresLocation, timeout: float) -> JournalStore:
    password, shown = location.password, location.shown
    try:
        import psycopg
    except ImportError as exc:
        raise JournalUnavailable(
            "PostgreSQL journals need psycopg: install runjournal[postgres]"
        ) from exc

    def build() -> RunJournalApp:
        # Fail fast with the server's reason; the library's pool would retry until timeout.
        probe = psycopg.connect(
            **location.connect_kwargs(),
            connect_timeout=location.connect_timeout,
            autocommit=True,
        )
        # The library creates its tables on open; two processes doing that at the same
        # instant collide ("tuple concurrently updated"), so opening is serialized.
        with contextlib.closing(probe):
            probe.execute("SELECT pg_advisory_lock(%s)", (_PG_OPEN_LOCK,))
            # A URL without a password (the cache root's registry records none,
            # docs/operations.md "Cache retention"): the one libpq found (PGPASSWORD,
            # ~/.pgpass), which the library's own pool would not look up.
            found = location if location.password else _with_password(location, probe)
            return _build_postgres_app(found)

    try:
        app = call_bounded(build, timeout)
    except TimedOut as exc:
        raise JournalUnavailable(
            one_line(
                f"cannot open journal {shown}: PostgreSQL did not answer within "
                f"{exc.seconds:g} s (journal_timeout)"
            )
        ) from None
    except Exception as exc:
        raise JournalUnavailable(
            one_line(f"cannot open journal {shown}: {describe(exc, [password])}")
        ) from exc
    return JournalStore(app, shown, secrets=(password,), timeout=timeout)


def _with_password(location: PostgresLocation, probe: Any) -> PostgresLocation:
    password = probe.info.password or ""
    return dataclasses.replace(location, password=password) if password else location


def _build_postgres_app(location: PostgresLocation) -> RunJournalApp:
    return RunJournalApp(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": location.dbname,
            "POSTGRES_HOST": location.host,
            "POSTGRES_PORT": location.port,
            "POSTGRES_USER": location.user,
            "POSTGRES_PASSWORD": location.password,
            "POSTGRES_CONNECT_TIMEOUT": str(location.connect_timeout),
            "POSTGRES_SCHEMA": location.schema,
            "POSTGRES_POOL_SIZE": "1",
            "POSTGRES_MAX_OVERFLOW": "2",
        }
    )
