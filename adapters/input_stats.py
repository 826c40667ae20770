"""The inputs' stat cache: each input file's stat facts recorded with its digest, so a
run with `input_check = "stat"` trusts an unchanged file's digest without hashing it
again, as git's index and DVC's state do (docs/configuration.md `input_check`,
docs/internals.md "Input stat cache").

`<cache root>/inputs.sqlite` holds one row per input path (the real path the run read):
size, mtime_ns, inode, device and ctime_ns as `fstat` gave them on the open file the
digest was taken from, the digest, and when it was recorded. A row is trusted only when
every stat fact is the same now and the file was last changed (mtime and ctime) more than
`RACY_NS` before the row was recorded: a file written in the same timestamp granularity
as its recording could change again without changing its stat facts (git's "racily
clean" entries), so it is read and hashed again, and recorded anew.

With `defer_reads` (`run`), an input whose digest is trusted is not even opened: it is a
`Source` with its size only, and the chunks of each input chunked by a run (id, span,
digest) are kept in the table `chunks` under its plan key and logical name, so the next
run plans it without reading it; the runner reads it (`read`, the digest checked) only
when one of its extracts executes (docs/internals.md "Inputs a resume does not read").

The cache is an optimisation only: a database that cannot be opened, read or written
(locked past the wait, damaged, a read-only file system) makes every lookup a miss and
drops the records, never fails the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsRoot
from runjournal.adapters.sources import read_known_input
from runjournal.domain.ports import SourceChanged

if TYPE_CHECKING:
    from runjournal.domain.modules import Chunk
    from runjournal.domain.pipeline import Source

__all__ = ["INPUT_STATS", "RACY_NS", "InputStats"]

INPUT_STATS = "inputs.sqlite"
# Two seconds: the coarsest timestamp granularity in common use (FAT) and far above the
# kernel's coarse clock tick that stamps mtime and ctime on Linux (a few ms).
RACY_NS = 2_000_000_000
_BUSY_MS = 5_000
_BATCH = 500  # paths per prefetch statement (under SQLite's 999 variables)
# sources' chunks kept for `flush` at most: more are written at once, so a run that plans
# every input from its bytes does not hold all their chunks to its end (issue 29: peak RSS)
CHUNKS_HELD = 1_024
_SCHEMA = """
CREATE TABLE IF NOT EXISTS inputs (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    dev INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    recorded_ns INTEGER NOT NULL
) WITHOUT ROWID
"""
_CHUNKS_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    plan_key TEXT NOT NULL,
    source TEXT NOT NULL,
    chunks BLOB NOT NULL,
    PRIMARY KEY (plan_key, source)
) WITHOUT ROWID
"""
_chunk_rows = msgspec.msgpack.Decoder(list[tuple[str, int, int, str]])
_encoder = msgspec.msgpack.Encoder()


def _facts(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


class InputStats:
    """Lookups and records of one invocation; records are written together by `flush`.

    `trust=False` (`run --verify`) makes every lookup a miss: each input is read and
    hashed in full, and its row recorded again.
    """

    def __init__(
        self,
        root: FsRoot,
        *,
        trust: bool = True,
        racy_ns: int = RACY_NS,
        clock: Callable[[], int] = time.time_ns,
        defer_reads: bool = False,
    ) -> None:
        self._root = root
        self._trust = trust
        self.defer_reads = defer_reads and trust
        self._keep_chunks = defer_reads  # `--verify` records them too
        # a run's (`defer_reads`, `--verify` too): an input read and hashed at resolution
        # is kept as its path, size and digest, not its bytes (issue 29: peak RSS)
        self.by_path = defer_reads
        self.paths: dict[str, str] = {}  # logical name -> path of each input not read
        # the names in `paths` of inputs read and hashed by this run (not trusted)
        self._hashed: set[str] = set()
        self._chunks_pending: list[tuple[str, str, bytes]] = []
        self.reads = 0  # inputs not read at first, read after all
        self._dropped: list[str] = []  # rows found stale by `read`
        self._racy_ns = racy_ns
        self.clock = clock
        self._db: sqlite3.Connection | None = None
        self._broken = False
        self._lock = threading.Lock()
        self._pending: list[tuple[str, int, int, int, int, int, str, int]] = []
        # rows read ahead by `prefetch` (path -> the row's columns after the path)
        self._rows: dict[str, tuple[int, int, int, int, int, str, int] | None] = {}
        self.trusted = 0  # lookups answered from the cache (for tests and reports)
        self.recorded = 0

    def _connection(self) -> sqlite3.Connection | None:
        if self._db is not None or self._broken:
            return self._db
        try:
            with contextlib.suppress(AlreadyExists):  # created 0600, as every cache file
                os.close(self._root.open_file(INPUT_STATS, create=True))
            db = sqlite3.connect(
                self._root.fd_path(INPUT_STATS),
                timeout=_BUSY_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            db.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
            db.execute(_SCHEMA)
            db.execute(_CHUNKS_SCHEMA)
        except (sqlite3.Error, FsError, OSError):
            self._broken = True
            return None
        self._db = db
        return db

    def prefetch(self, paths: list[str]) -> None:
        """Read the rows of `paths` ahead, a few hundred per statement (a lookup by one
        statement each costs more than the hashing it saves on a small file)."""
        if not self._trust:
            return
        with self._lock:
            db = self._connection()
            if db is None:
                return
            try:
                for at in range(0, len(paths), _BATCH):
                    part = paths[at : at + _BATCH]
                    self._rows.update(dict.fromkeys(part))
                    marks = ",".join("?" * len(part))
                    for path, *row in db.execute(
                        "SELECT path, size, mtime_ns, ctime_ns, ino, dev, sha256, recorded_ns"
                        f" FROM inputs WHERE path IN ({marks})",
                        part,
                    ):
                        self._rows[path] = tuple(row)  # type: ignore[assignment]
            except sqlite3.Error:
                self._rows.clear()

    def lookup(self, path: str, st: os.stat_result) -> str | None:
        """The recorded digest of `path` when its stat facts are unchanged and were not
        racy when recorded; None otherwise (read and hash it, then `record`)."""
        if not self._trust:
            return None
        if path in self._rows:  # let go: a run held every input's row to its end
            row = self._rows.pop(path)
        else:
            row = self._row(
                "SELECT size, mtime_ns, ctime_ns, ino, dev, sha256, recorded_ns"
                " FROM inputs WHERE path = ?",
                (path,),
            )
        if row is None or tuple(row[:5]) != _facts(st):
            return None
        recorded_ns = row[6]
        if max(st.st_mtime_ns, st.st_ctime_ns) + self._racy_ns >= recorded_ns:
            return None  # changed too close to its recording: not trusted
        self.trusted += 1
        return str(row[5])

    def record(self, path: str, st: os.stat_result, sha256: str, recorded_ns: int) -> None:
        """Remember `sha256` for `path` with the stat facts of the descriptor it was read
        from; `recorded_ns` is the clock before the read. Written by `flush`."""
        with self._lock:
            self._pending.append((path, *_facts(st), sha256, recorded_ns))

    # --- the chunks of inputs not read (`KnownChunks`, domain/ports.py) ----------------

    def chunks(self, source: str, plan_key: str) -> list[tuple[str, int, int, str]] | None:
        """The chunks recorded for `source` under `plan_key`, None when none (or unreadable);
        None with `trust=False` (`--verify`: each input is planned from its bytes)."""
        if not self._trust:
            return None
        row = self._row(
            "SELECT chunks FROM chunks WHERE plan_key = ? AND source = ?", (plan_key, source)
        )
        try:
            return _chunk_rows.decode(row[0]) if row is not None else None
        except msgspec.DecodeError:
            return None

    def _row(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One row of the database, None when there is none, no database or an error
        (a damaged database is read as an empty one)."""
        with self._lock:
            db = self._connection()
            if db is None:
                return None
            try:
                return db.execute(sql, params).fetchone()
            except sqlite3.Error:
                return None

    def remember(self, source: str, plan_key: str, chunks: list[Chunk]) -> None:
        """Keep the chunks of `source` planned from its bytes (written by `flush`)."""
        if not self._keep_chunks:
            return
        rows = [(c.id, c.start, c.end, c.sha256) for c in chunks]
        with self._lock:
            self._chunks_pending.append((plan_key, source, _encoder.encode(rows)))
            if len(self._chunks_pending) < CHUNKS_HELD:
                return
            # facts of the sources' bytes, true whatever becomes of this run
            held, self._chunks_pending = self._chunks_pending, []
            self._write([], held, [])

    def keep(self, name: str, path: str) -> None:
        """`name` was read and hashed at resolution: its bytes are read again by `read`,
        and they must be those hashed (as `SourceFiles` reads them)."""
        self.paths[name] = path
        self._hashed.add(name)

    def read(self, source: Source) -> bytes:
        """The bytes of an input not read so far (`SourceChanged` when it cannot be read).

        Bytes whose digest is not the one its stat facts vouched for (a change that kept
        every stat fact) are returned as a read in the stat fast path returns them, and
        the input's row is dropped, so the next run reads and hashes it. An input this run
        read and hashed (`keep`) whose bytes changed since is `SourceChanged`."""
        data = read_known_input(self.paths, source.name)
        path = self.paths[source.name]
        if hashlib.sha256(data).hexdigest() != source.sha256:
            if source.name in self._hashed:
                raise SourceChanged(f"input '{source.name}' changed while the run was going")
            with self._lock:
                self._dropped.append(path)
        self.reads += 1
        return data

    def flush(self) -> None:
        """Write the records of this invocation in one transaction (errors dropped)."""
        with self._lock:
            pending, self._pending = self._pending, []
            chunks, self._chunks_pending = self._chunks_pending, []
            dropped, self._dropped = self._dropped, []
            if pending or chunks or dropped:
                self._write(pending, chunks, dropped)

    def _write(
        self,
        pending: list[tuple[str, int, int, int, int, int, str, int]],
        chunks: list[tuple[str, str, bytes]],
        dropped: list[str],
    ) -> None:
        """One transaction of rows (errors dropped: the records are a cache); the caller
        holds the lock."""
        db = self._connection()
        if db is None:
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT OR REPLACE INTO inputs (path, size, mtime_ns, ctime_ns, ino, dev,"
                " sha256, recorded_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                pending,
            )
            db.executemany(
                "INSERT OR REPLACE INTO chunks (plan_key, source, chunks) VALUES (?, ?, ?)",
                chunks,
            )
            db.executemany("DELETE FROM inputs WHERE path = ?", [(p,) for p in dropped])
            db.execute("COMMIT")
            self.recorded += len(pending)
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
