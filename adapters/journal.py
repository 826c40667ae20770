"""The run journal: an `eventsourcing` application over SQLite or PostgreSQL.

`EventMapper` stores our frozen msgspec events as a one-byte format header plus
msgpack (zstd when large) and decodes them typed, upcasting old class versions.
`RunJournalApp` reads its settings only from what we pass (never `os.environ`).
`JournalStore` is the facade the CLI uses; `RunSession` is the runner's `EventSink`:
it holds the run aggregate in memory and commits pending events in bounded batches.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from types import TracebackType
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit
from uuid import UUID

import msgspec
import zstandard
from eventsourcing.application import Application
from eventsourcing.persistence import (
    IntegrityError,
    Mapper,
    PersistenceError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import Environment, EnvType, get_topic, resolve_topic
from runjournal.adapters.fsroot import make_trusted_dirs
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    ConfigurationResolved,
    DebugBundleAllocated,
    LLMCallAttempted,
    ProfileObserved,
    RunAllocated,
    RunError,
    RunEvent,
    RunStatus,
    RunTerminated,
    Setting,
    StageFailed,
    TerminalPersistenceFailed,
    WarningRecorded,
)
from runjournal.domain.redaction import redact_obj, redact_text, safe_error_text
from runjournal.domain.run import JournalInvariantError, Run, run_aggregate_id

__all__ = [
    "COMPRESS_THRESHOLD",
    "AmbiguousRun",
    "EventMapper",
    "JournalCorrupt",
    "JournalError",
    "JournalStore",
    "JournalUnavailable",
    "JournalUrlError",
    "RunAlreadyExists",
    "RunJournalApp",
    "RunNotFound",
    "RunSession",
    "RunSummary",
    "journal_event_to_json",
    "open_journal",
]


# --- errors ----------------------------------------------------------------------


class JournalError(Exception):
    """The journal could not do what was asked (a run that hits this fails)."""


class JournalUnavailable(JournalError):
    """The journal cannot be opened, reached or written."""


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


def _one_line(text: str) -> str:
    """User-facing error text: one bounded, escaped line with credential shapes hidden."""
    return safe_error_text(" ".join(text.split()), limit=400)


def _describe(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """The exception as text, with known secrets (e.g. the URL's password) hidden."""
    text = str(exc)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- storage format --------------------------------------------------------------

FORMAT_MSGPACK: Final = 0x01
FORMAT_ZSTD_MSGPACK: Final = 0x02
_FLAG_CLASS_VERSION: Final = 0x10  # header is followed by class_version as uint16 BE
COMPRESS_THRESHOLD: Final = 1024
"""Encoded states larger than this many bytes are zstd-compressed (when that helps)."""
_ZSTD_LEVEL: Final = 3
_MAX_STATE_BYTES: Final = 64 * 1024 * 1024

_ORIGINATOR_ID_KEY: Final = msgspec.msgpack.encode("originator_id")
_ORIGINATOR_VERSION_KEY: Final = msgspec.msgpack.encode("originator_version")


class _UnusedTranscoder(Transcoder):
    """No-op: `EventMapper` encodes events itself; the base class merely requires one."""

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes):
            return obj
        raise TypeError("the run journal does not use the library's transcoder")

    def decode(self, data: bytes) -> Any:
        return data


class _ClassCodec:
    """Per-event-class constants, built once: topic, version, headers and typed decoder."""

    __slots__ = ("cls", "decoder", "headers", "topic", "version")

    def __init__(self, cls: type[RunEvent]) -> None:
        self.cls = cls
        self.topic = get_topic(cls)
        self.version = int(getattr(cls, "class_version", 1))
        if not 1 <= self.version <= 0xFFFF:
            raise TypeError(f"{cls.__name__}.class_version must be in 1..65535")
        suffix = b"" if self.version == 1 else self.version.to_bytes(2, "big")
        flag = 0 if self.version == 1 else _FLAG_CLASS_VERSION
        self.headers = {
            FORMAT_MSGPACK: bytes((FORMAT_MSGPACK | flag,)) + suffix,
            FORMAT_ZSTD_MSGPACK: bytes((FORMAT_ZSTD_MSGPACK | flag,)) + suffix,
        }
        self.decoder = msgspec.msgpack.Decoder(cls)


def _map_header(count: int) -> bytes:
    if count < 16:
        return bytes((0x80 | count,))
    if count < 0x10000:
        return b"\xde" + count.to_bytes(2, "big")
    return b"\xdf" + count.to_bytes(4, "big")


def _with_origin(body: bytes, origin: bytes) -> bytes:
    """Splice the two origin entries into the stored msgpack map (they come last, so win)."""
    head = body[0]
    if 0x80 <= head <= 0x8F:
        count, skip = head & 0x0F, 1
    elif head == 0xDE:
        count, skip = int.from_bytes(body[1:3], "big"), 3
    elif head == 0xDF:
        count, skip = int.from_bytes(body[1:5], "big"), 5
    else:
        raise JournalCorrupt("stored state is not a msgpack map")
    return b"".join((_map_header(count + 2), memoryview(body)[skip:], origin))


class EventMapper(Mapper[UUID]):
    """Converts `RunEvent` Structs to and from `StoredEvent` rows.

    State bytes: header byte (0x01 msgpack, 0x02 zstd msgpack; | 0x10 when a uint16
    class_version > 1 follows), then msgpack of the fields minus the two origin fields.
    """

    def __init__(self) -> None:
        super().__init__(transcoder=_UnusedTranscoder())
        self._codecs: dict[type[RunEvent], _ClassCodec] = {}
        self._by_topic: dict[str, _ClassCodec] = {}
        self._encoder = msgspec.msgpack.Encoder()
        self._generic = msgspec.msgpack.Decoder()
        self._lock = threading.Lock()  # zstd contexts are not safe for concurrent use
        self._compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
        self._decompressor = zstandard.ZstdDecompressor()
        self._origin_cache: tuple[Any, bytes] = (None, b"")

    def codec_for(self, cls: type[RunEvent]) -> _ClassCodec:
        codec = self._codecs.get(cls)
        if codec is None:
            if not (isinstance(cls, type) and issubclass(cls, RunEvent)):
                raise TypeError(f"not a run event class: {cls!r}")
            codec = self._codecs[cls] = _ClassCodec(cls)
            self._by_topic[codec.topic] = codec
        return codec

    def _codec_for_topic(self, topic: str) -> _ClassCodec:
        codec = self._by_topic.get(topic)
        if codec is not None:
            return codec
        try:
            obj = resolve_topic(topic)
        except Exception as exc:  # a topic may name any module; importing it may fail anyhow
            raise JournalCorrupt(f"unknown event type {topic!r}") from exc
        if not (isinstance(obj, type) and issubclass(obj, RunEvent)):
            raise JournalCorrupt(f"topic {topic!r} is not a run event class")
        codec = self.codec_for(obj)
        self._by_topic[topic] = codec  # also under an old (registered) topic
        return codec

    # -- write ----------------------------------------------------------------------

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        codec = self.codec_for(type(domain_event))
        state = msgspec.structs.asdict(domain_event)
        del state["originator_id"], state["originator_version"]
        body = self._encoder.encode(state)
        fmt = FORMAT_MSGPACK
        if len(body) > COMPRESS_THRESHOLD:
            with self._lock:
                packed = self._compressor.compress(body)
            if len(packed) < len(body):
                body, fmt = packed, FORMAT_ZSTD_MSGPACK
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=codec.topic,
            state=codec.headers[fmt] + body,
        )

    # -- read -----------------------------------------------------------------------

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        try:
            return self._decode(self._codec_for_topic(stored_event.topic), stored_event)
        except JournalCorrupt as exc:
            raise JournalCorrupt(_one_line(f"{_where(stored_event)}: {exc}")) from exc
        except (
            msgspec.DecodeError,
            msgspec.ValidationError,
            zstandard.ZstdError,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
        ) as exc:
            raise JournalCorrupt(
                _one_line(f"{_where(stored_event)} does not decode: {_describe(exc)}")
            ) from exc

    def _decode(self, codec: _ClassCodec, stored: StoredEvent) -> RunEvent:
        state = stored.state
        head = state[0]
        fmt = head & ~_FLAG_CLASS_VERSION
        if head & _FLAG_CLASS_VERSION:
            version, offset = int.from_bytes(state[1:3], "big"), 3
        else:
            version, offset = 1, 1
        body = bytes(state[offset:])
        if fmt == FORMAT_ZSTD_MSGPACK:
            size = zstandard.frame_content_size(body)
            if not 0 <= size <= _MAX_STATE_BYTES:
                raise JournalCorrupt(f"compressed state of unknown or excessive size ({size})")
            with self._lock:
                body = self._decompressor.decompress(body)
        elif fmt != FORMAT_MSGPACK:
            raise JournalCorrupt(f"unknown state format 0x{head:02x}")
        if version == codec.version:
            origin = self._origin(stored.originator_id, stored.originator_version)
            return codec.decoder.decode(_with_origin(body, origin))
        if version > codec.version:
            raise JournalCorrupt(
                f"written by a newer {codec.cls.__name__} (class_version {version} > "
                f"{codec.version}): upgrade runjournal to read it"
            )
        data = self._generic.decode(body)
        if not isinstance(data, dict):
            raise JournalCorrupt("stored state is not a map")
        for v in range(version, codec.version):
            upcast = getattr(codec.cls, f"upcast_v{v}_v{v + 1}", None)
            if upcast is None:
                raise JournalCorrupt(f"{codec.cls.__name__} has no upcast_v{v}_v{v + 1}")
            result = upcast(data)
            if result is not None:
                data = result
        data["originator_id"] = stored.originator_id
        data["originator_version"] = stored.originator_version
        return msgspec.convert(data, codec.cls)

    def _origin(self, originator_id: Any, originator_version: int) -> bytes:
        cached_id, id_part = self._origin_cache
        if cached_id != originator_id:
            id_part = _ORIGINATOR_ID_KEY + self._encoder.encode(str(originator_id))
            self._origin_cache = (originator_id, id_part)
        return id_part + _ORIGINATOR_VERSION_KEY + self._encoder.encode(originator_version)


def _where(stored: StoredEvent) -> str:
    return (
        f"event {stored.originator_version} of aggregate {stored.originator_id} "
        f"({stored.topic.rpartition(':')[2] or stored.topic})"
    )


# --- application -----------------------------------------------------------------


class RunJournalApp(Application[UUID]):
    """Thin application: our mapper, and settings only from the env dict we pass."""

    name = "RunJournal"

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # The library would merge os.environ, where RUNJOURNAL_* are our user settings.
        return Environment(name, dict(env or {}))

    def construct_mapper(self) -> Mapper[UUID]:
        return EventMapper()


# --- opening ---------------------------------------------------------------------

_T = TypeVar("_T")

DEFAULT_SQLITE_LOCK_TIMEOUT: Final = 15
DEFAULT_CONNECT_TIMEOUT: Final = 10
_PG_OPTIONS: Final = frozenset({"connect_timeout", "schema"})
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_STORAGE_ERRORS: Final = (PersistenceError, sqlite3.Error, OSError)


def open_journal(
    url: str,
    *,
    lock_timeout: int = DEFAULT_SQLITE_LOCK_TIMEOUT,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
) -> JournalStore:
    """Open `sqlite:///abs/path`, a plain path, or `postgresql://user:pass@host:port/db`."""
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(url, connect_timeout)
    if scheme == "sqlite":
        path = unquote(url[len("sqlite://") :].partition("?")[0])
    elif scheme:
        raise JournalUrlError(
            _one_line(f"unsupported journal URL scheme {scheme!r}: {_redact_url(url)}")
        )
    else:
        path = url
    if not path:
        raise JournalUrlError("the journal URL names no SQLite file")
    return _open_sqlite(os.path.abspath(path), lock_timeout)


def _open_sqlite(path: str, lock_timeout: int) -> JournalStore:
    url = f"sqlite://{path}"
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": path,
        "SQLITE_LOCK_TIMEOUT": str(int(lock_timeout)),
    }
    try:
        make_trusted_dirs(os.path.dirname(path))
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path} is a directory")
        # Pre-create private: SQLite gives its -wal/-shm files the database's mode.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        deadline = time.monotonic() + lock_timeout
        _retry_while_locked(lambda: _switch_to_wal(path, lock_timeout), deadline)
        app = _retry_while_locked(lambda: RunJournalApp(env=env), deadline)
    except Exception as exc:
        raise JournalUnavailable(_one_line(f"cannot open journal {url}: {_describe(exc)}")) from exc
    return JournalStore(app, url)


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


# An arbitrary, fixed advisory-lock key ("rjopen" in ASCII) serializing journal opens.
_PG_OPEN_LOCK = 0x726A6F70656E


def _open_postgres(url: str, connect_timeout: int) -> JournalStore:
    try:
        parts = urlsplit(url)
        port = parts.port or 5432
    except ValueError as exc:
        raise JournalUrlError(_one_line(f"invalid PostgreSQL URL {_redact_url(url)}")) from exc
    password = unquote(parts.password or "")
    shown = _redact_url(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - _PG_OPTIONS)
    if unknown:
        raise JournalUrlError(
            _one_line(f"unsupported PostgreSQL URL option(s) {', '.join(unknown)} in {shown}")
        )
    try:
        timeout = max(2, int(options.get("connect_timeout") or connect_timeout))
    except ValueError as exc:
        raise JournalUrlError(_one_line(f"invalid connect_timeout in {shown}")) from exc
    conn_kwargs = {
        "host": parts.hostname or "",
        "port": str(port),
        "dbname": unquote(parts.path.lstrip("/")),
        "user": unquote(parts.username or ""),
        "password": password,
    }
    try:
        import psycopg
    except ImportError as exc:
        raise JournalUnavailable(
            "PostgreSQL journals need psycopg: install runjournal[postgres]"
        ) from exc
    try:
        # Fail fast with the server's reason; the library's pool would retry until timeout.
        probe = psycopg.connect(
            **{k: v for k, v in conn_kwargs.items() if v},
            connect_timeout=timeout,
            autocommit=True,
        )
        # The library creates its tables on open; two processes doing that at the same
        # instant collide ("tuple concurrently updated"), so opening is serialized.
        with contextlib.closing(probe):
            probe.execute("SELECT pg_advisory_lock(%s)", (_PG_OPEN_LOCK,))
            app = _build_postgres_app(conn_kwargs, password, timeout, options)
    except Exception as exc:
        raise JournalUnavailable(
            _one_line(f"cannot open journal {shown}: {_describe(exc, [password])}")
        ) from exc
    return JournalStore(app, shown, secrets=(password,))


def _build_postgres_app(
    conn_kwargs: dict[str, str], password: str, timeout: int, options: dict[str, str]
) -> RunJournalApp:
    return RunJournalApp(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": conn_kwargs["dbname"],
            "POSTGRES_HOST": conn_kwargs["host"],
            "POSTGRES_PORT": conn_kwargs["port"],
            "POSTGRES_USER": conn_kwargs["user"],
            "POSTGRES_PASSWORD": password,
            "POSTGRES_CONNECT_TIMEOUT": str(timeout),
            "POSTGRES_SCHEMA": options.get("schema", ""),
            "POSTGRES_POOL_SIZE": "1",
            "POSTGRES_MAX_OVERFLOW": "2",
        }
    )


def _redact_url(url: str) -> str:
    """Hide the userinfo password structurally (up to the last `@`), then any other shape."""
    scheme, sep, rest = url.partition("://")
    at = rest.rfind("@")
    if sep and at != -1:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            rest = f"{user}:[REDACTED:url_password]{rest[at:]}"
    return redact_text(scheme + sep + rest)


# --- store -----------------------------------------------------------------------


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One run as `runs list` shows it (from its RunAllocated and RunTerminated only)."""

    run_id: str
    pipeline: str
    status: RunStatus
    started: datetime
    ended: datetime | None = None
    run_dir: str
    pid: int
    host: str
    process_start: float


_PAGE: Final = 500


class JournalStore:
    """The journal as the CLI sees it: sessions for new events, queries over runs."""

    def __init__(self, app: RunJournalApp, url: str, *, secrets: Sequence[str] = ()) -> None:
        self.app = app
        self._url = url
        self._secrets = tuple(s for s in secrets if s)
        self._mapper: EventMapper = app.mapper  # type: ignore[assignment]
        self._summary_topics = [
            self._mapper.codec_for(RunAllocated).topic,
            self._mapper.codec_for(RunTerminated).topic,
        ]
        self._runs: dict[UUID, RunSummary] = {}
        self._position = 0
        self._closed = False

    @property
    def url(self) -> str:
        """The journal URL with any password redacted."""
        return self._url

    def _error(self, doing: str, exc: BaseException) -> JournalError:
        text = _one_line(f"journal {self._url}: {doing}: {_describe(exc, self._secrets)}")
        if isinstance(exc, IntegrityError):
            return RunAlreadyExists(text)
        return JournalUnavailable(text)

    # -- writing --------------------------------------------------------------------

    def session(
        self,
        run: Run,
        *,
        batch_size: int = 256,
        listeners: Sequence[Callable[[RunEvent], None]] = (),
    ) -> RunSession:
        """An `EventSink` for `run`; commits what the run already has pending at once."""
        return RunSession(self, run, batch_size=batch_size, listeners=listeners)

    def _put(self, events: Sequence[RunEvent]) -> None:
        try:
            self.app.events.put(events)
        except _STORAGE_ERRORS as exc:
            raise self._error(f"cannot record {len(events)} event(s)", exc) from exc
        except (msgspec.EncodeError, TypeError, ValueError) as exc:
            raise JournalError(
                _one_line(f"an event does not encode: {_describe(exc, self._secrets)}")
            ) from exc

    def append_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append already-built events of one run (journal import), checked by replay."""
        if not events:
            return
        aggregate_id = run_aggregate_id(run_id)
        run = Run(aggregate_id)
        try:
            for event in self.events(run_id):
                run.apply(event)
            if run.version and events[0].originator_version <= run.version:
                raise RunAlreadyExists(
                    _one_line(f"run {run_id!r} already has events up to {run.version}")
                )
            for event in events:
                if event.originator_id != aggregate_id:
                    raise JournalError(
                        _one_line(f"event {event.originator_version} is not of run {run_id!r}")
                    )
                if isinstance(event, RunAllocated) and event.run_id != run_id:
                    raise JournalError(_one_line(f"RunAllocated names run {event.run_id!r}"))
                run.apply(event)
        except JournalInvariantError as exc:
            raise JournalError(
                _one_line(f"events of run {run_id!r} are not a valid sequence: {exc}")
            ) from exc
        self._put(events)

    # -- reading --------------------------------------------------------------------

    def events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events in order, decoded and upcast (nothing for an unknown run)."""
        try:
            stored = self.app.recorder.select_events(run_aggregate_id(run_id))
        except _STORAGE_ERRORS as exc:
            raise self._error(f"cannot read run {run_id!r}", exc) from exc
        to_event = self._mapper.to_domain_event
        for row in stored:
            yield to_event(row)

    def load_run(self, run_id: str, clock: Callable[[], datetime] | None = None) -> Run:
        """Replay a run into a `Run` that can record more events (e.g. `recover`)."""
        run = Run(run_aggregate_id(run_id), clock or _utc_now)
        try:
            for event in self.events(run_id):
                run.apply(event)
        except JournalInvariantError as exc:
            raise JournalCorrupt(_one_line(f"run {run_id!r} does not replay: {exc}")) from exc
        if run.version == 0:
            raise RunNotFound(_one_line(f"no run {run_id!r} in the journal"))
        return run

    def notifications(
        self, after: int = 0, topics: Sequence[str] = ()
    ) -> Iterator[tuple[int, RunEvent]]:
        """(position, event) after `after`, in commit order: a synchronous catch-up."""
        position = after
        while True:
            try:
                page = self.app.recorder.select_notifications(
                    position, _PAGE, topics=list(topics), inclusive_of_start=False
                )
            except _STORAGE_ERRORS as exc:
                raise self._error("cannot read the event log", exc) from exc
            for row in page:
                position = row.id
                yield row.id, self._mapper.to_domain_event(row)
            if len(page) < _PAGE:
                return

    def list_runs(self) -> list[RunSummary]:
        """Every run in allocation-commit order (only two event types are decoded)."""
        for position, event in self.notifications(self._position, self._summary_topics):
            if isinstance(event, RunAllocated):
                self._runs[event.originator_id] = RunSummary(
                    run_id=event.run_id,
                    pipeline=event.pipeline,
                    status=RunStatus.RUNNING,
                    started=event.timestamp,
                    run_dir=event.run_dir,
                    pid=event.pid,
                    host=event.host,
                    process_start=event.process_start,
                )
            elif isinstance(event, RunTerminated):
                summary = self._runs.get(event.originator_id)
                if summary is not None and summary.ended is None:
                    self._runs[event.originator_id] = msgspec.structs.replace(
                        summary, status=event.status, ended=event.timestamp
                    )
            self._position = position
        return list(self._runs.values())

    def resolve_run(self, ref: str) -> str:
        """A full run id, a unique prefix of one, or `latest` (most recently allocated)."""
        runs = self.list_runs()
        shown = _one_line(repr(ref[:80]))
        if ref == "latest":
            if not runs:
                raise RunNotFound("no runs in the journal")
            return max(enumerate(runs), key=lambda ir: (ir[1].started, ir[0]))[1].run_id
        if not ref:
            raise RunNotFound("empty run reference")
        ids = [r.run_id for r in runs]
        if ref in ids:
            return ref
        matches = [i for i in ids if i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise RunNotFound(f"no run matches {shown}")
        listed = ", ".join(matches[:5]) + (", …" if len(matches) > 5 else "")
        raise AmbiguousRun(
            _one_line(f"run reference {shown} matches {len(matches)} runs: {listed}")
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.app.close()

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _utc_now() -> datetime:
    return datetime.now(UTC)


# --- redaction at the journal boundary ----------------------------------------------


def _redact_str(value: Any) -> Any:
    return redact_text(value) if isinstance(value, str) else value


def _redact_strs(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_redact_str(v) for v in value]
    return _redact_str(value)


def _redact_settings(value: Any) -> Any:
    """Settings stay `Setting` Structs (a plain dict would not be what the event says)."""
    if not isinstance(value, list | tuple):
        return redact_obj(value)
    return [
        msgspec.structs.replace(s, value=redact_obj(s.value), origin=_redact_str(s.origin))
        if isinstance(s, Setting)
        else redact_obj(s)
        for s in value
    ]


def _redact_run_error(value: Any) -> Any:
    if isinstance(value, RunError):
        return msgspec.structs.replace(value, message=_redact_str(value.message))
    return value


_Redactor = Callable[[Any], Any]

_FREE_TEXT: Final[Mapping[type[RunEvent], tuple[tuple[str, _Redactor], ...]]] = {
    RunAllocated: (("argv", _redact_strs), ("pipeline_file", _redact_str)),
    ConfigurationResolved: (("settings", _redact_settings),),
    DebugBundleAllocated: (("path", _redact_str),),
    ProfileObserved: (
        ("profile_id", _redact_str),
        ("provider", _redact_str),
        ("model", _redact_str),
    ),
    StageFailed: (("message", _redact_str),),
    LLMCallAttempted: (  # LLM runtime (docs/internals.md): user-named profile and model
        ("profile_id", _redact_str),
        ("provider", _redact_str),
        ("model", _redact_str),
    ),
    CheckpointWriteFailed: (("message", _redact_str),),
    ArtifactGenerated: (("warnings", _redact_strs),),
    WarningRecorded: (("message", _redact_str),),
    RunTerminated: (("error", _redact_run_error),),
    TerminalPersistenceFailed: (("message", _redact_str),),
}
"""The event fields that carry free text (errors, paths, plugin or user strings).

Every other field holds ids, digests, enums, numbers or code-owned text, and the hot
path (StageDecided, StageExecuted, CheckpointWritten) pays one dict lookup. Redaction is
idempotent, so fields already redacted upstream come through unchanged. Document names
(InputsFingerprinted, OutputWritten) are the user's data and are never redacted.
"""


# --- session ---------------------------------------------------------------------


class RunSession:
    """The runner's `EventSink`: one in-memory `Run`, events committed in batches.

    `emit` does no I/O until `batch_size` events are pending; a failed commit keeps
    its events for the next `flush`, so the journal never gets a gap.
    """

    def __init__(
        self,
        store: JournalStore,
        run: Run,
        *,
        batch_size: int = 256,
        listeners: Sequence[Callable[[RunEvent], None]] = (),
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._store = store
        self._run = run
        self._batch_size = batch_size
        self._listeners = tuple(listeners)
        self._unsaved: list[RunEvent] = []
        self.flush()  # the run is visible to `runs list` and `recover` from its start

    @property
    def run(self) -> Run:
        return self._run

    @property
    def pending(self) -> int:
        return self._run.pending_count + len(self._unsaved)

    def emit(self, event_type: type[RunEvent], **fields: Any) -> None:
        """Record one event; its free-text fields are redacted first (`_FREE_TEXT`)."""
        redactors = _FREE_TEXT.get(event_type)
        if redactors is not None:
            for name, redact in redactors:
                if name in fields:
                    fields[name] = redact(fields[name])
        run = self._run
        event = run.trigger(event_type, **fields)
        for listener in self._listeners:
            listener(event)
        if run.pending_count + len(self._unsaved) >= self._batch_size:
            self.flush()

    def flush(self) -> None:
        """Commit pending events in one transaction; a no-op when nothing is pending."""
        if not self._run.pending_count and not self._unsaved:
            return
        events = self._unsaved + self._run.collect_events()
        try:
            self._store._put(events)
        except JournalError:
            self._unsaved = events
            raise
        self._unsaved = []

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> RunSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.flush()
            return
        try:
            self.flush()
        except JournalError as flush_error:
            exc.add_note(f"also: {flush_error}")


# --- JSON view -------------------------------------------------------------------

_ENVELOPE: Final = frozenset({"originator_id", "originator_version", "timestamp"})


def _iso_utc(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    """Builtins with sorted keys; Structs (even array-like ones) become dicts."""
    if isinstance(value, msgspec.Struct):
        return {f: _plain(getattr(value, f)) for f in sorted(value.__struct_fields__)}
    if isinstance(value, Mapping):
        items = [(_plain_key(k), _plain(v)) for k, v in value.items()]
        return dict(sorted(items, key=lambda kv: str(kv[0])))
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=lambda v: msgspec.json.encode(v))
    if isinstance(value, datetime):
        return _iso_utc(value)
    return msgspec.to_builtins(value)


def _plain_key(key: Any) -> Any:
    if isinstance(key, Enum):
        return key.value
    if isinstance(key, str | int | float | bool) or key is None:
        return key
    return str(msgspec.to_builtins(key))


def journal_event_to_json(event: RunEvent) -> dict[str, Any]:
    """`journal show --json` view of one event: no storage ids, so identical on any backend."""
    data = {
        name: _plain(getattr(event, name))
        for name in sorted(event.__struct_fields__)
        if name not in _ENVELOPE
    }
    return {
        "class_version": int(getattr(type(event), "class_version", 1)),
        "data": data,
        "timestamp": _iso_utc(event.timestamp),
        "type": type(event).__name__,
        "version": event.originator_version,
    }
