"""The packed store: the cache's small files appended to segment files, found through one
SQLite index (docs/internals.md "Packed store").

One file per checkpoint made a 497-document corpus 64,443 files and would make a million
documents a hundred million (issue 29): inodes run out, `gc` scans for hours and object
storage cannot hold it. Here a name (the relative name the file would have had) maps to a
record in an append-only segment; payloads over `large` bytes are content-addressed
objects instead. A writer appends to a segment of its own (locked while it is open, so
compaction never touches it) and publishes each record by committing its index row after
the bytes are written: readers see a record whole or not at all, and never wait (WAL). A
crash leaves at worst an unindexed tail, which is ignored and reported by `compact`.
Durability is the caller's group barrier (`FsRoot.sync`, docs/internals.md "Group
durability"): until then a power loss may lose rows or tear bytes, which the content's own
digest detects, as for files. The store trusts nothing it reads: the record's header must
name the entry asked for, and every payload carries its own digest (envelopes, plans).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import secrets
import sqlite3
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import zstandard
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsIOError, FsNotFound, FsRoot
from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "LARGE",
    "PACK_DIR",
    "SEGMENT_LIMIT",
    "Compaction",
    "PackedEntry",
    "PackedStore",
    "segment_bytes",
    "segment_records",
]

PACK_DIR = "pack"
_INDEX = "index.sqlite"
_SEGMENTS = "segments"
_OBJECTS = "objects"
# A record: magic, name length, data length, then the name (utf-8) and the data. Still
# read; written before records named their entry by its directory's id.
_MAGIC = b"RJPK"
_RECORD = struct.Struct(">4sII")
# What `put` writes: magic, the entry's directory id (`dirs`: never reused nor deleted),
# leaf length, data length, then the leaf (utf-8) and the data. The directory part of a
# name is most of its bytes and was repeated by every record
# (docs/internals.md "Packed store").
_MAGIC_LEAF = b"RJPL"
_LEAF_RECORD = struct.Struct(">4sIHI")
# What `put` writes since index schema 2: as `RJPL`, with the leaf packed (`_pack_path`:
# a chunk id's 64 hex characters as their 32 bytes).
_MAGIC_PACKED = b"RJPC"
# A sealed segment (docs/internals.md "Packed store": sealing) is a run of blocks: magic,
# the zstd frame's length, the records' raw length, then one frame of whole records.
# A sealed record's `offset` is the block's offset in the file times `_BLOCK_SPAN` plus
# the record's offset in the block's records.
_MAGIC_BLOCK = b"RJPZ"
_BLOCK = struct.Struct(">4sII")
_BLOCK_SPAN = 1 << 24
BLOCK_SIZE = 32 << 10
"""Raw bytes of records per block. On the glossary example over `examples/real-docs`,
with the payloads left to the blocks (`compresses_blocks`), 16 KiB blocks made the cache
631 kB and 32 KiB 610 kB; a 32 KiB block decompresses in about 20 us, and the last
`_HELD_BLOCKS` are held, so a lane read record by record decompresses each once."""
SEAL_MIN = 64 << 10
"""A segment smaller than this is left as it is when its writer retires it."""
_HELD_BLOCKS = 32
# Payloads above this stay objects of their own: copying them through segments at every
# compaction would cost more than the inode they take.
LARGE = 1 << 20
SEGMENT_LIMIT = 64 << 20
_SCHEMA = 3
# Index schema 3 is schema 2 with `entries.facts`: what a record's content says that a
# reader may decide from without reading it (a checkpoint's header; NULL for a record
# written without or before them): docs/internals.md "Decision facts in the index".
_FACTS_COLUMN = "ALTER TABLE entries ADD COLUMN facts BLOB"
# Path components of lowercase hex (a digest, a chunk id, a step identity; an optional
# suffix such as `.ckpt` after it) are stored as their bytes (index schema 2,
# docs/internals.md "Packed store"); compiled on first use (a run's start-up).
_HEX_PART = LazyPattern(r"((?:[0-9a-f]{2}){16,127})(\.[^/]*)?")
_OBJECTS_LOCK = "objects.lock"
_UPSERT = (
    "INSERT OR REPLACE INTO entries (dir, leaf, segment, offset, length, object, written, facts)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_BUSY_MS = 120_000
_HELD_DIRS = 512
"""Directories whose index entries a store holds after reading them in one query (a lane's
checkpoints and pointers are read together: one query per directory, not per entry)."""
_FRESH_DIRS = 4096
"""Directories created by a store whose leaves it remembers writing (`_dir_for_put`)."""
_KNOWN_DIRS = 4096
"""Directory ids a store remembers by name (`_DirIds`): a lane's directories are used
together, and the index (`dirs`, whose ids are never reused) answers for the others."""


class Found(NamedTuple):
    """A record's index row as `lookup_many` found it, for `read_found`."""

    segment: int
    offset: int
    length: int
    dir_id: int
    leaf: bytes  # as the record holds it
    packed: bool  # an `RJPC` record (index schema 2 and later), else `RJPL`
    facts: bytes | None  # what `put` was given with the record


Row = tuple[int, int, int, str | None]
"""An entry's place: segment, offset, length, object (a large payload's digest)."""


@dataclass(frozen=True, slots=True)
class PackedEntry:
    """One indexed name: where its bytes are and when they were written."""

    name: str
    size: int
    written_ns: int


@dataclass(frozen=True, slots=True)
class Compaction:
    """What `compact` did: segments rewritten and deleted, bytes freed, torn tails found."""

    segments_removed: int
    records_moved: int
    bytes_freed: int
    objects_removed: int
    torn_segments: int
    torn_bytes: int


class _DirIds:
    """Directory name -> id of the most recently used `_KNOWN_DIRS` directories, least
    recently used first. A store held every directory it met until it closed (a run: a
    few per lane, about 1.5 KB a document; issue 29: peak RSS); a directory let go is
    looked up in the index again, once (its id never changes). Safe under the GIL
    without a lock: each step below is one operation of the C `OrderedDict`, and a key
    missed while another thread moves it is only looked up again."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, directory: str) -> bool:
        return directory in self._ids

    def get(self, directory: str) -> int | None:
        ids = self._ids
        found = ids.pop(directory, None)
        if found is not None:
            ids[directory] = found  # most recently used last
        return found

    def __setitem__(self, directory: str, dir_id: int) -> None:
        ids = self._ids
        ids.pop(directory, None)
        ids[directory] = dir_id
        while len(ids) > _KNOWN_DIRS:
            try:
                ids.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break

    def setdefault(self, directory: str, dir_id: int) -> None:
        if self.get(directory) is None:
            self[directory] = dir_id

    def update(self, found: dict[str, int]) -> None:
        for directory, dir_id in found.items():
            self[directory] = dir_id


class _Writer:
    """The segment this store appends to; locked (flock) for as long as it is open."""

    __slots__ = ("broken", "fd", "id", "name", "size")

    def __init__(self, fd: int, seg_id: int, name: str) -> None:
        self.fd = fd
        self.id = seg_id
        self.name = name
        self.size = 0
        self.broken = False


@contextlib.contextmanager
def _index_errors(name: str) -> Iterator[None]:
    """An index that cannot be read or written (disk full, locked past the wait, damaged)
    is an I/O error of the entry, as a file's would be: callers handle `FsError`."""
    try:
        yield
    except sqlite3.Error as exc:
        raise FsIOError(name, errno.EIO, f"packed store index: {exc}") from exc


def _split(name: str) -> tuple[str, str]:
    directory, _, leaf = name.rpartition("/")
    if not leaf:
        raise ValueError(f"a packed entry needs a file name: {name!r}")
    return directory, leaf


@functools.lru_cache(maxsize=16384)
def _pack_part(part: str) -> bytes:
    """One path component as index schema 2 keeps it (cached: a run packs the same step,
    stage and directory components over and over; docs/performance.md
    "Concurrency: `--jobs N` against an LLM endpoint")."""
    found = _HEX_PART.fullmatch(part)
    if found is not None:
        raw = bytes.fromhex(found[1])
        return b"\x01" + bytes((len(raw),)) + raw + (found[2] or "").encode("utf-8")
    data = part.encode("utf-8")
    return b"\x02" + data if data[:1] in (b"\x01", b"\x02") else data


def _pack_leaf(part: str) -> bytes:
    """`_pack_part` of a checkpoint's leaf name, not cached: each is read once a run."""
    return _pack_part.__wrapped__(part)


def _pack_path(path: str) -> bytes:
    """`path` as index schema 2 keeps it: component by component, joined by `/`, a hex
    component as `\\x01`, its byte count, its bytes and its suffix; any other as its UTF-8
    (behind `\\x02` when it starts with `\\x01` or `\\x02`). A directory's entries are
    the names whose packed form starts with its own and `/`, so name ranges still work."""
    return b"/".join(map(_pack_part, path.split("/")))


def _unpack_path(data: bytes) -> str:
    """The path `_pack_path` packed (ValueError for bytes it cannot have made)."""
    parts: list[str] = []
    at, size = 0, len(data)
    while True:
        lead = data[at : at + 1]
        if lead == b"\x01":
            if at + 2 > size:
                raise ValueError("a packed path cut short")
            count = data[at + 1]
            start = at + 2 + count
            if start > size:
                raise ValueError("a packed path cut short")
            end = data.find(b"/", start)
            end = size if end < 0 else end
            parts.append(data[at + 2 : start].hex() + data[start:end].decode("utf-8"))
        else:
            end = data.find(b"/", at)
            end = size if end < 0 else end
            parts.append(data[at + (lead == b"\x02") : end].decode("utf-8"))
        if end >= size:
            return "/".join(parts)
        at = end + 1


def _prefix_bounds(prefix: str) -> tuple[str, str]:
    """[low, high) of the names that start with `prefix`."""
    return prefix, prefix + "\U0010ffff"


class PackedStore:
    """Names to bytes beneath `<cache root>/pack/`; shared by a process's threads.

    Readers use one SQLite connection per thread; the writer one connection under
    `_write_lock`, which also orders the appends to the segment. Segment descriptors are
    kept open until `close` (a store reads at most a few dozen segments).
    """

    def __init__(
        self,
        root: FsRoot,
        *,
        large: int = LARGE,
        segment_limit: int = SEGMENT_LIMIT,
        seal_min: int | None = SEAL_MIN,
    ) -> None:
        self._root = root
        self._large = large
        self._segment_limit = segment_limit
        self._seal_min = seal_min  # None: never seal
        self._sealed: set[int] = set()  # ids of sealed segments this store has opened
        self._blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._lock = threading.Lock()  # the fields below but the writer's
        self._write_lock = threading.Lock()
        self._pack: FsRoot | None = None
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._dir_ids = _DirIds()  # bounded: the index answers for the others
        # dir id -> packed leaves this store wrote there, for the directories it created
        # (`_dir_for_put`), oldest first; under `_write_lock`
        self._fresh: dict[int, set[bytes]] = {}
        # directories created in the write transaction still open (`_dir_for_put`)
        self._new_dirs: dict[str, int] = {}
        self._segment_fds: dict[int, int] = {}
        # dir id -> leaf -> row, for the directories read whole (`_entries_of`, `read_lane`),
        # least recently used first; a write of this store drops its directory's
        self._held: dict[int, dict[str, Row]] = {}
        self._writer: _Writer | None = None
        self._write_db: sqlite3.Connection | None = None
        self._closed = False
        # the index's schema: 1 (names as text; still read, migrated by the first writer)
        # or 2 (`_pack_path`); None until a connection has read it
        self._schema: int | None = None

    # ------------------------------------------------------------------ opening

    def _open_pack(self, *, create: bool) -> FsRoot | None:
        """`pack/` with its index; None while it does not exist and `create` is off."""
        if self._pack is not None:
            return self._pack
        with self._lock:
            if self._pack is not None:
                return self._pack
            if self._closed:
                raise ValueError("operation on a closed packed store")
            try:
                pack = self._root.subroot(PACK_DIR, create=create)
            except FsNotFound:
                return None
            try:
                if create and not pack.exists(_INDEX):
                    _publish_index(pack)
                elif not pack.exists(_INDEX):
                    pack.close()
                    return None
            except BaseException:
                pack.close()
                raise
            self._pack = pack
            return pack

    def _connect(self, pack: FsRoot, *, write: bool = True) -> sqlite3.Connection:
        """A connection to the index: the writer's in WAL mode (readers never wait for it);
        a reader's as the index is. A process that only reads creates nothing while no
        writer has the index open (`close` leaves it in rollback mode, where reading
        makes no file). Readers are not opened read-only: after a crash the first one to
        open a WAL index must recover it, which a read-only connection cannot."""
        db = sqlite3.connect(
            pack.fd_path(_INDEX),
            timeout=_BUSY_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        db.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
        if write:
            _enter_wal(db)
            db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _reader(self) -> sqlite3.Connection | None:
        db = getattr(self._local, "db", None)
        if db is not None:
            return db
        pack = self._open_pack(create=False)
        if pack is None:
            return None
        db = self._connect(pack, write=False)
        with self._lock:
            self._connections.append(db)
        self._local.db = db
        if self._schema is None:
            self._schema = _schema_of(db)
        return db

    def _writer_db(self, pack: FsRoot) -> sqlite3.Connection:
        if self._write_db is None:
            db = self._connect(pack)
            if _schema_of(db) == 1:
                _migrate_v1(db)
            if _schema_of(db) == 2:
                _migrate_v2(db)
            self._schema = _schema_of(db)
            self._write_db = db
        return self._write_db

    def _key(self, path: str) -> str | bytes:
        """A directory's name or a leaf as the index keeps it (its schema's form)."""
        return path if self._schema == 1 else _pack_path(path)

    def _text(self, key: str | bytes) -> str:
        return key if isinstance(key, str) else _unpack_path(key)

    def _schema_moved(self, db: sqlite3.Connection) -> bool:
        """Whether a writer migrated the index since this store read its schema (its
        lookups with schema 1 keys then find nothing): the schema is read again."""
        if self._schema != 1:
            return False
        self._schema = _schema_of(db)
        return self._schema != 1

    @property
    def compresses_blocks(self) -> bool:
        """Whether this store seals its segments (zstd blocks of records): a caller may
        then store payloads uncompressed, which compress better together."""
        return self._seal_min is not None

    @property
    def exists(self) -> bool:
        """Whether the cache root has a packed store yet."""
        return self._open_pack(create=False) is not None

    # ------------------------------------------------------------------ reading

    def _dir_id(self, db: sqlite3.Connection, directory: str) -> int | None:
        found = self._dir_ids.get(directory)
        if found is not None:
            return found
        row = db.execute("SELECT id FROM dirs WHERE name = ?", (self._key(directory),)).fetchone()
        if row is None and self._schema_moved(db):
            row = db.execute("SELECT id FROM dirs WHERE name = ?", (self._key(directory),))
            row = row.fetchone()
        if row is None:
            return None
        self._dir_ids[directory] = row[0]
        return row[0]

    def get(self, name: str) -> bytes | None:
        """The bytes stored under `name`; None when there is no entry.

        A record that does not name `name`, or whose bytes are cut short, is returned as
        the bytes that are there (b"" at worst): the content's own digest then rejects it.
        An index that cannot be read is FsIOError.
        """
        with _index_errors(name):
            return self._get(name)

    def _get(self, name: str) -> bytes | None:
        db = self._reader()
        if db is None:
            return None
        directory, leaf = _split(name)
        dir_id = self._dir_id(db, directory)
        if dir_id is None:
            return None
        for attempt in range(3):  # a compaction may move the record between lookup and read
            row = self._entries_of(db, dir_id).get(leaf) if attempt == 0 else None
            if row is None:  # not held (written since, or moved): the index itself
                row = db.execute(
                    "SELECT segment, offset, length, object FROM entries "
                    "WHERE dir = ? AND leaf = ?",
                    (dir_id, self._key(leaf)),
                ).fetchone()
                if row is None and self._schema_moved(db):
                    continue  # asked again with the keys of the schema now
            if row is None:
                return None
            segment, offset, length, obj = row
            try:
                if obj is not None:
                    return self._read_object(obj)
                return self._read_record(db, segment, offset, length, name)
            except FsNotFound:
                continue
        return b""

    def get_many(self, names: list[str]) -> list[bytes | None]:
        """The bytes of each of `names` that is a record of a segment, read in offset
        order (a lane's records are one run of a segment: docs/internals.md "Reusing a
        lane as a whole"); None for a name with no entry, a large object, or a record
        that does not read back as that name (the caller then reads it as `get` does).
        The entries of every directory named are read in one query, keyed as the index
        keeps them."""
        return self.read_found(self.lookup_many(names, facts=False))

    def lookup_many(self, names: list[str], *, facts: bool = True) -> list[Found | None]:
        """The index row of each of `names` that is a record of a segment (None: no
        entry, or a large object), the entries of every directory named read in one
        query; with its facts (`put`; None when it has none, or without `facts`:
        docs/internals.md "Decision facts in the index"). `read_found` reads the
        records."""
        out: list[Found | None] = [None] * len(names)
        if not names:
            return out
        with _index_errors(names[0]):
            db = self._reader()
            if db is None:
                return out
            schema = self._schema or 2
            packed = schema != 1
            split = [name.rpartition("/") for name in names]
            keys: dict[str, str | bytes] = {}
            for directory, _, _ in split:  # each directory packed once, not once a name
                if directory not in keys:
                    keys[directory] = self._key(directory)
            marks = ", ".join("?" * len(keys))
            column = "e.facts" if facts and schema >= 3 else "NULL"
            found = db.execute(
                "SELECT d.id, d.name, e.leaf, e.segment, e.offset, e.length, e.object, "
                f"{column} FROM dirs d JOIN entries e ON e.dir = d.id WHERE d.name IN ({marks})",
                list(keys.values()),
            ).fetchall()
        entries: dict[tuple[str | bytes, str | bytes], tuple[Any, ...]] = {
            (name, leaf): (dir_id, segment, offset, length, obj, fact)
            for dir_id, name, leaf, segment, offset, length, obj, fact in found
        }
        for i, (directory, _, leaf) in enumerate(split):
            # a leaf has no "/"; packed without the cache, which would hold every leaf a
            # resume reads (they are each a checkpoint's own) and push out the components
            # that repeat (issue 29: peak RSS)
            key = _pack_leaf(leaf) if packed else leaf
            row = entries.get((keys[directory], key))
            if row is None or row[4] is not None:
                continue
            encoded = key if isinstance(key, bytes) else key.encode("utf-8")
            out[i] = Found(row[1], row[2], row[3], row[0], encoded, packed, row[5])
        return out

    def read_found(self, rows: list[Found | None]) -> list[bytes | None]:
        """The record of each row `lookup_many` found, read in offset order (the blocks
        of a sealed segment decompressed once); None for a row not given, or a record
        that does not read back as its name (the caller then reads it as `get` does)."""
        out: list[bytes | None] = [None] * len(rows)
        wanted = sorted((row[:3], i) for i, row in enumerate(rows) if row is not None)
        if not wanted:
            return out
        with _index_errors("segment"):
            db = self._reader()
        if db is None:
            return out
        blocks: dict[tuple[int, int], bytes | None] = {}  # this call's, without the lock
        record = _LEAF_RECORD
        fixed = record.size
        last_segment, fd, sealed = -1, -1, False
        for (segment, offset, length), i in wanted:
            row = rows[i]
            assert row is not None
            if segment != last_segment:  # the lane's records are mostly in one segment
                try:
                    fd = self._segment_fd(db, segment)
                except (FsNotFound, sqlite3.Error):
                    last_segment = -1
                    continue
                last_segment, sealed = segment, segment in self._sealed
            if sealed:
                at, start = divmod(offset, _BLOCK_SPAN)
                raw = blocks.get((segment, at), b"")
                if raw == b"":
                    raw = blocks[segment, at] = self._block(fd, segment, at)
                if raw is None:
                    continue
            else:
                raw, start = os.pread(fd, length, offset), 0
            # the record in place (no copy of it before its data): header, leaf, data
            encoded = row.leaf
            head = fixed + len(encoded)
            if len(raw) < start + length or length < head:
                continue
            magic, at_dir, leaf_size, data_size = record.unpack_from(raw, start)
            expected = _MAGIC_PACKED if row.packed else _MAGIC_LEAF
            if magic != expected or at_dir != row.dir_id or leaf_size != len(encoded):
                continue
            if head + data_size != length or raw[start + fixed : start + head] != encoded:
                continue
            out[i] = raw[start + head : start + length]
        return out

    def _entries_of(self, db: sqlite3.Connection, dir_id: int) -> dict[str, Row]:
        """Every entry of a directory, read in one query when first asked and held (at most
        `_HELD_DIRS` directories). An entry held is where it was when read: segments are
        append-only and their ids never reused, so it still names that record (a segment
        compacted away since is FsNotFound, and the index is asked again); an entry written
        since by another process is not held, and is looked up on its own."""
        with self._lock:
            held = self._held.pop(dir_id, None)
            if held is not None:
                self._held[dir_id] = held  # most recently used last
                return held
        rows = db.execute(
            "SELECT leaf, segment, offset, length, object FROM entries WHERE dir = ?", (dir_id,)
        ).fetchall()
        held = {
            self._text(leaf): (segment, offset, length, obj)
            for leaf, segment, offset, length, obj in rows
        }
        self._hold(dir_id, held)
        return held

    def _hold(self, dir_id: int, entries: dict[str, Row]) -> None:
        with self._lock:
            self._held.pop(dir_id, None)
            self._held[dir_id] = entries
            while len(self._held) > _HELD_DIRS:
                del self._held[next(iter(self._held))]

    def _drop_held(self, dir_id: int | None = None) -> None:
        with self._lock:
            if dir_id is None:
                self._held.clear()
            else:
                self._held.pop(dir_id, None)

    def read_lane(self, prefix: str) -> None:
        """Read the index entries of every directory under `prefix` (a lane's: its pointers
        and its checkpoints' scope directories) in one query, held for the `get`s that
        follow (`_entries_of`). Nothing when the store or the prefix has no entries."""
        with _index_errors(prefix):
            db = self._reader()
            if db is None:
                return
            top = prefix.rstrip("/")
            rows = db.execute(
                "SELECT d.id, d.name, e.leaf, e.segment, e.offset, e.length, e.object "
                "FROM dirs d JOIN entries e ON e.dir = d.id "
                "WHERE d.name = ? OR (d.name >= ? AND d.name < ?)",
                (self._key(top), *self._below(top)),
            ).fetchall()
        grouped: dict[int, dict[str, Row]] = {}
        for dir_id, name, leaf, segment, offset, length, obj in rows:
            entries = grouped.get(dir_id)
            if entries is None:  # a directory's name once, not once per entry
                entries = grouped[dir_id] = {}
                self._dir_ids.setdefault(self._text(name), dir_id)
            entries[self._text(leaf)] = (segment, offset, length, obj)
        for dir_id, entries in grouped.items():
            self._hold(dir_id, entries)

    def _below(self, directory: str) -> tuple[str | bytes, str | bytes]:
        """[low, high) of the index keys of the directories below `directory`."""
        if self._schema == 1:
            return _prefix_bounds(directory + "/")
        key = _pack_path(directory)
        return key + b"/", key + b"0"  # "0" follows "/"

    def _read_record(
        self, db: sqlite3.Connection, segment: int, offset: int, length: int, name: str
    ) -> bytes:
        fd = self._segment_fd(db, segment)
        if segment in self._sealed:
            data = self._sealed_record(fd, segment, offset, length)
        else:
            data = os.pread(fd, length, offset)
        if len(data) != length:
            return b""
        if data[:4] in (_MAGIC_LEAF, _MAGIC_PACKED):
            directory, leaf = _split(name)
            encoded = leaf.encode("utf-8") if data[:4] == _MAGIC_LEAF else _pack_path(leaf)
            head = _LEAF_RECORD.size + len(encoded)
            if length < head:
                return b""
            _magic, dir_id, leaf_size, data_size = _LEAF_RECORD.unpack_from(data)
            if leaf_size != len(encoded) or head + data_size != length:
                return b""
            if dir_id != self._dir_id(db, directory) or data[_LEAF_RECORD.size : head] != encoded:
                return b""
            return data[head:]
        encoded = name.encode("utf-8")
        head = _RECORD.size + len(encoded)
        if length < head:
            return b""
        magic, name_size, data_size = _RECORD.unpack_from(data)
        if magic != _MAGIC or name_size != len(encoded) or head + data_size != length:
            return b""
        if data[_RECORD.size : head] != encoded:
            return b""
        return data[head:]

    def _segment_fd(self, db: sqlite3.Connection, segment: int) -> int:
        fd = self._segment_fds.get(segment)
        if fd is not None:
            return fd
        try:  # asked of the index itself: a writer may have migrated it since (`_schema`)
            row = db.execute("SELECT name, sealed FROM segments WHERE id = ?", (segment,))
            row = row.fetchone()
        except sqlite3.OperationalError:  # schema 1: no segment is sealed
            row = db.execute("SELECT name, 0 FROM segments WHERE id = ?", (segment,)).fetchone()
        if row is None:
            raise FsNotFound(f"segment {segment}", errno.ENOENT)
        pack = self._open_pack(create=False)
        assert pack is not None
        fd = pack.open_file(f"{_SEGMENTS}/{row[0]}")
        with self._lock:
            if segment in self._segment_fds:
                os.close(fd)
                return self._segment_fds[segment]
            if row[1] == 1:  # 2: judged by its writer, left as appended
                self._sealed.add(segment)
            self._segment_fds[segment] = fd
        return fd

    def _sealed_record(self, fd: int, segment: int, offset: int, length: int) -> bytes:
        """A record of a sealed segment: its block read and decompressed (the last
        `_HELD_BLOCKS` blocks are held: a lane's records are read together), then sliced;
        b"" for a block that cannot be read (the content's digest then rejects it)."""
        at, inner = divmod(offset, _BLOCK_SPAN)
        raw = self._block(fd, segment, at)
        return b"" if raw is None else raw[inner : inner + length]

    def _block(self, fd: int, segment: int, at: int) -> bytes | None:
        """The records of a sealed segment's block, held or read (None: unreadable)."""
        with self._lock:
            raw = self._blocks.get((segment, at))
            if raw is not None:
                self._blocks.move_to_end((segment, at))
        if raw is None:
            raw = _read_block(fd, at)
            if raw is None:
                return None
            with self._lock:
                self._blocks[(segment, at)] = raw
                while len(self._blocks) > _HELD_BLOCKS:
                    self._blocks.popitem(last=False)
        return raw

    def _read_object(self, digest: str) -> bytes:
        pack = self._open_pack(create=False)
        assert pack is not None
        return pack.read_bytes(_object_name(digest))

    def names(self, prefix: str) -> list[str]:
        """Every indexed name that starts with `prefix`, sorted."""
        db = self._reader()
        if db is None:
            return []
        return sorted(name for name, *_ in self._under(db, prefix))

    def _under(self, db: sqlite3.Connection, prefix: str) -> Iterator[tuple[str, int, int]]:
        """(name, length, written) of every entry whose name starts with `prefix`: the
        entries of the directory `prefix` ends in and of those below it, filtered; read
        from the cursor as they are consumed (the rows were all held as well as the names
        made of them)."""
        top = prefix.rpartition("/")[0]
        if self._schema == 1:
            low, high = top, prefix + "\U0010ffff"
            where = "d.name >= ? AND d.name < ?"
            params: tuple[Any, ...] = (low, high)
        elif top:
            where = "d.name = ? OR (d.name >= ? AND d.name < ?)"
            params = (self._key(top), *self._below(top))
        else:
            where, params = "1", ()
        rows = db.execute(
            "SELECT d.name, e.leaf, e.length, e.written FROM entries e "
            f"JOIN dirs d ON d.id = e.dir WHERE {where}",
            params,
        )
        text, last, top_text = self._text, None, ""
        for directory, leaf, length, written in rows:
            if directory != last:  # a directory's entries come together: its name once
                last, top_text = directory, text(directory)
            name = f"{top_text}/{text(leaf)}"
            if name.startswith(prefix):
                yield name, length, written

    def children(self, directory: str) -> list[str]:
        """The entry names right below `directory` (files and directories), sorted: what
        `listdir` would have shown of this store's part of the tree."""
        base = directory.rstrip("/") + "/"
        out = {name[len(base) :].split("/", 1)[0] for name in self.names(base)}
        return sorted(out)

    def entries(self, prefix: str = "") -> Iterator[PackedEntry]:
        """Every indexed entry under `prefix` with its size and write time, sorted."""
        yield from sorted(self.entries_unordered(prefix), key=lambda e: e.name)

    def entries_unordered(self, prefix: str = "") -> Iterator[PackedEntry]:
        """`entries` in no order, read from the index as they are consumed (for `gc`:
        sorted, every name of the store was held at once, docs/performance.md "gc, audit
        and explain at scale")."""
        db = self._reader()
        if db is None:
            return
        for name, length, written in self._under(db, prefix):
            yield PackedEntry(name, length, written)

    # ------------------------------------------------------------------ writing

    # `put` and `put_many` take each record's facts: what a reader may decide from
    # without reading the record, docs/internals.md "Decision facts in the index"
    keeps_facts = True

    def put(self, name: str, data: bytes, facts: bytes | None = None) -> None:
        """Store `data` under `name` (replacing what was there), visible to readers of any
        process once this returns; durable at the caller's next `FsRoot.sync`. Raises
        FsError (an index error is FsIOError); the entry then keeps what it had. `facts`
        are kept in its index row (`lookup_many` gives them), bound to this record: a
        rewrite without them clears them."""
        try:  # `_index_errors` inline: this is the per-entry path of every write
            self._put_rows([(name, data)], [facts])
        except sqlite3.Error as exc:
            raise FsIOError(name, errno.EIO, f"packed store index: {exc}") from exc

    def put_many(
        self, items: Iterable[tuple[str, bytes]], facts: list[bytes | None] | None = None
    ) -> None:
        """`put` of each (name, data) in order, the index rows in one transaction (a
        checkpoint's envelope and its lane pointer; a batch of replies): visible to readers
        together once this returns, durable at the caller's next `FsRoot.sync`. Raises as
        `put`; an entry then has what it had or its new bytes (a record nothing indexes is
        garbage), as after the same puts one by one. `facts`: each item's, as `put`."""
        items = list(items)
        try:
            if items:
                self._put_rows(items, facts)
        except sqlite3.Error as exc:
            name = items[0][0] if items else ""
            raise FsIOError(name, errno.EIO, f"packed store index: {exc}") from exc

    def _put(self, name: str, data: bytes) -> None:
        self._put_rows([(name, data)])

    def _put_rows(
        self, items: list[tuple[str, bytes]], facts: list[bytes | None] | None = None
    ) -> None:
        pack = self._open_pack(create=True)
        assert pack is not None
        with self._write_lock:
            db = self._writer_db(pack)
            rows: list[tuple[Any, ...]] = []
            try:
                for i, (name, data) in enumerate(items):
                    row = self._append(pack, db, name, data, rows, facts[i] if facts else None)
                    if row is not None:
                        rows.append(row)
                self._commit_rows(db, rows)
            except BaseException:
                self._rollback(db)
                raise

    def _commit_rows(self, db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        """The index rows of appended records and the directories created for them, in one
        transaction (under the write lock)."""
        if not rows and not db.in_transaction:
            return
        if len(rows) == 1 and not db.in_transaction:
            db.execute(_UPSERT, rows[0])  # autocommit
        else:
            if not db.in_transaction:
                db.execute("BEGIN IMMEDIATE")
            if rows:
                db.executemany(_UPSERT, rows)
            db.execute("COMMIT")
        if self._new_dirs:
            self._dir_ids.update(self._new_dirs)
            self._new_dirs.clear()
            while len(self._fresh) > _FRESH_DIRS:
                del self._fresh[next(iter(self._fresh))]
        for dir_id in {row[0] for row in rows}:
            self._drop_held(dir_id)
        rows.clear()

    def _rollback(self, db: sqlite3.Connection) -> None:
        """Undo the open write transaction of a put that failed, with the directories it
        created (their ids are not used by any indexed record)."""
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        for dir_id in self._new_dirs.values():
            self._fresh.pop(dir_id, None)
        self._new_dirs.clear()

    def _append(
        self,
        pack: FsRoot,
        db: sqlite3.Connection,
        name: str,
        data: bytes,
        pending: list[tuple[Any, ...]],
        facts: bytes | None = None,
    ) -> tuple[Any, ...] | None:
        """Append `name`'s record to this store's segment (under the write lock); the index
        row to commit, or None when there is none to write (the same bytes are there, or a
        large payload's object and row were written at once). `pending` (rows appended and
        not yet committed) is committed before the segment is retired (sealing switches
        only the rows the index holds) and before a large payload's row."""
        directory, leaf = _split(name)
        data = bytes(data)
        encoded = _pack_leaf(leaf)
        dir_id = self._dir_ids.get(directory) or self._new_dirs.get(directory)
        if dir_id is None:
            dir_id = self._dir_for_put(db, directory)
        written = self._fresh.get(dir_id)
        if written is None or encoded in written:
            if self._same(db, dir_id, leaf, name, data, encoded, facts):
                return None
        else:  # a directory this store created: only its own writes can be there
            written.add(encoded)
        now = time.time_ns()
        if len(data) > self._large:
            self._commit_rows(db, pending)  # the object's row commits under its lock
            digest = hashlib.sha256(data).hexdigest()
            row = (dir_id, encoded, 0, 0, len(data), digest, now, facts)
            self._put_object(pack, db, row, data)
            self._drop_held(dir_id)
            return None
        if self._rotates():
            self._commit_rows(db, pending)
        writer = self._segment(pack, db)
        record = _LEAF_RECORD.pack(_MAGIC_PACKED, dir_id, len(encoded), len(data))
        record += encoded + data
        offset = writer.size
        try:
            pack.append_record(name, writer.fd, record)
        except OSError:
            writer.broken = True  # a torn tail: the next put starts a new segment
            raise
        writer.size += len(record)
        return (dir_id, encoded, writer.id, offset, len(record), None, now, facts)

    def _put_object(
        self, pack: FsRoot, db: sqlite3.Connection, row: tuple[Any, ...], data: bytes
    ) -> None:
        """A large payload: its object (content-addressed, kept if it exists) and the row
        naming it, under the objects lock held shared so compaction cannot take the object
        between the two."""
        lock = pack.open_lock_file(_OBJECTS_LOCK)
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)
            with contextlib.suppress(AlreadyExists):
                pack.write_bytes(_object_name(row[5]), data, overwrite=False, durable=False)
            db.execute(_UPSERT, row)
        finally:
            os.close(lock)

    def _dir_for_put(self, db: sqlite3.Connection, directory: str) -> int:
        """The id of `directory` for a put: looked up in the write transaction the put's row
        commits in (begun here), and created there when it is new: one transaction, not
        two (a cold LLM run creates about 1.2 directories a call: docs/performance.md
        "Concurrency: `--jobs N` against an LLM endpoint"). Published once it commits."""
        if not db.in_transaction:
            db.execute("BEGIN IMMEDIATE")
        key = _pack_path(directory)
        row = db.execute("SELECT id FROM dirs WHERE name = ?", (key,)).fetchone()
        if row is not None:
            self._dir_ids[directory] = found = int(row[0])
            return found
        found = _next(db, "dir")
        db.execute("INSERT INTO dirs (name, id) VALUES (?, ?)", (key, found))
        self._new_dirs[directory] = found
        # Entries of a directory this store created are only those it writes (another
        # process's put there would only be written again): a put there skips the index
        # lookup of `_same` for a leaf it has not written (the most recent `_FRESH_DIRS`
        # directories are remembered).
        self._fresh[found] = set()
        return found

    def _same(
        self,
        db: sqlite3.Connection,
        dir_id: int,
        leaf: str,
        name: str,
        data: bytes,
        encoded: bytes | None = None,
        facts: bytes | None = None,
    ) -> bool:
        """Whether `name` already holds exactly `data` and `facts` (a rewrite then writes
        nothing)."""
        if encoded is None:
            encoded = _pack_leaf(leaf)
        row = db.execute(
            "SELECT segment, offset, length, object, facts FROM entries WHERE dir = ? AND leaf = ?",
            (dir_id, encoded),
        ).fetchone()
        if row is None:
            return False
        segment, offset, length, obj, had = row
        if had != facts:
            return False
        if obj is not None:
            return len(data) == length and hashlib.sha256(data).hexdigest() == obj
        if length not in (
            _LEAF_RECORD.size + len(encoded) + len(data),
            _LEAF_RECORD.size + len(leaf.encode("utf-8")) + len(data),
            _RECORD.size + len(name.encode("utf-8")) + len(data),
        ):
            return False
        try:
            return self._read_record(db, segment, offset, length, name) == data
        except FsError:
            return False

    def _rotates(self) -> bool:
        """Whether the next append retires the segment (or starts the first)."""
        writer = self._writer
        return writer is None or writer.broken or writer.size >= self._segment_limit

    def _segment(self, pack: FsRoot, db: sqlite3.Connection) -> _Writer:
        writer = self._writer
        if writer is not None and not writer.broken and writer.size < self._segment_limit:
            return writer
        if writer is not None:
            self._retire(writer)
        # Created under a name compaction ignores, locked, then renamed: a `.seg` file is
        # never unlocked before its writer is done with it, so compaction (which takes
        # an idle `.seg` file it does not know for a killed writer's) cannot delete it.
        name = f"{time.time_ns():x}-{secrets.token_hex(6)}.seg"
        fd = pack.open_file(f"{_SEGMENTS}/{name}.new", create=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            pack.rename(f"{_SEGMENTS}/{name}.new", name)
            db.execute("BEGIN IMMEDIATE")
            try:
                seg_id = _next(db, "segment")
                db.execute("INSERT INTO segments (id, name) VALUES (?, ?)", (seg_id, name))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except BaseException:
            os.close(fd)
            raise
        self._writer = _Writer(fd, seg_id, name)
        return self._writer

    def _retire(self, writer: _Writer) -> None:
        """Stop appending to `writer`'s segment: fsync it (once per segment: compaction's
        copies must be durable before their rows switch), unlock it (compaction may take
        it now) and close it."""
        self._writer = None
        with contextlib.suppress(OSError):
            os.fsync(writer.fd)
        if (
            not writer.broken
            and self._seal_min is not None
            and writer.size >= self._seal_min
            and self._pack is not None
            and self._write_db is not None
        ):
            with contextlib.suppress(OSError, FsError, sqlite3.Error):
                self._seal(self._pack, self._write_db, writer)
        with contextlib.suppress(OSError):
            fcntl.flock(writer.fd, fcntl.LOCK_UN)
        os.close(writer.fd)

    def _seal(self, pack: FsRoot, db: sqlite3.Connection, writer: _Writer) -> None:
        """Rewrite the segment this store retires as blocks of zstd-compressed records
        (issue 29: the records of a lane share digests the envelopes cannot share), as
        compaction rewrites: a new segment written under a `.new` name, locked, fsynced,
        renamed and registered; the rows switched in one transaction made durable at
        once, each only if it still names the old place; the old segment deleted while
        it is still locked. A crash before the switch leaves a segment nothing names
        (deleted by the next compaction) and the old one whole; readers that hold the
        old place read it until they look the entry up again."""
        name = f"{time.time_ns():x}-{secrets.token_hex(6)}.seg"
        fd = pack.open_file(f"{_SEGMENTS}/{name}.new", create=True)
        seg_id = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            places = self._write_blocks(db, writer, fd)
            if places is None:  # not records only, or not worth it: left as appended
                with contextlib.suppress(sqlite3.Error):
                    db.execute("UPDATE segments SET sealed = 2 WHERE id = ?", (writer.id,))
                return
            os.fsync(fd)
            pack.rename(f"{_SEGMENTS}/{name}.new", name)
            db.execute("BEGIN IMMEDIATE")
            try:
                seg_id = _next(db, "segment")
                db.execute(
                    "INSERT INTO segments (id, name, sealed) VALUES (?, ?, 1)", (seg_id, name)
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                seg_id = None
                raise
            db.execute("PRAGMA synchronous=FULL")  # the switch durable before the delete
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        "UPDATE entries SET segment = ?, offset = ? WHERE dir = ? AND"
                        " leaf = ? AND segment = ? AND offset = ?",
                        # rows made as they are written, not a second list of the
                        # segment's records beside `places` (issue 29: peak RSS)
                        (
                            (seg_id, at * _BLOCK_SPAN + inner, dir_id, leaf, writer.id, old)
                            for dir_id, leaf, old, at, inner in places
                        ),
                    )
                    db.execute("DELETE FROM segments WHERE id = ?", (writer.id,))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            finally:
                db.execute("PRAGMA synchronous=NORMAL")
            seg_id = None  # switched: the new segment is the entries' now
            self._drop_held()
            with contextlib.suppress(FsNotFound):
                pack.remove(f"{_SEGMENTS}/{writer.name}")
        finally:
            if seg_id is not None:  # registered, never switched: nothing names it
                with contextlib.suppress(sqlite3.Error):
                    db.execute("DELETE FROM segments WHERE id = ?", (seg_id,))
            os.close(fd)
            with contextlib.suppress(FsError):
                pack.remove(f"{_SEGMENTS}/{name}.new", missing_ok=True)

    def _write_blocks(
        self, db: sqlite3.Connection, writer: _Writer, fd: int
    ) -> list[tuple[int, Any, int, int, int]] | None:
        """Write `writer`'s records to `fd` as blocks, one block in memory at a time; the
        (dir, leaf key, old offset, block offset, offset in the block) of each indexed
        record, or None when the segment is not records only or would not shrink by a
        tenth."""
        compressor = zstandard.ZstdCompressor(level=3)
        places: list[tuple[int, Any, int, int, int]] = []
        block = bytearray()
        block_places: list[tuple[int, Any, int, int]] = []
        written = offset = 0

        def flush() -> None:
            nonlocal written, block, block_places
            frame = compressor.compress(bytes(block))
            _write_all(fd, _BLOCK.pack(_MAGIC_BLOCK, len(frame), len(block)) + frame)
            places.extend((d, leaf, old, written, inner) for d, leaf, old, inner in block_places)
            written += _BLOCK.size + len(frame)
            block, block_places = bytearray(), []

        while offset < writer.size:
            span = _record_span(os.pread(writer.fd, _LEAF_RECORD.size, offset))
            if span is None or offset + sum(span) > writer.size:
                return None
            record = os.pread(writer.fd, sum(span), offset)
            if len(record) != sum(span) or record[:4] == _MAGIC_BLOCK:
                return None
            if block and len(block) + len(record) > BLOCK_SIZE:
                flush()
            key = self._record_key(db, record, 0, span)
            if key is not None:
                block_places.append((*key, offset, len(block)))
            block += record
            offset += len(record)
        if block:
            flush()
        return places if written <= 0.9 * writer.size else None

    def _record_key(
        self, db: sqlite3.Connection, data: bytes, offset: int, span: tuple[int, int, int]
    ) -> tuple[int, Any] | None:
        """(directory id, index leaf key) of the record at `offset`; None when its
        directory is not in the index."""
        head, name_size, _size = span
        raw = data[offset + head : offset + head + name_size]
        magic = data[offset : offset + 4]
        if magic == _MAGIC_PACKED:
            return _LEAF_RECORD.unpack_from(data, offset)[1], raw
        try:
            if magic == _MAGIC_LEAF:
                leaf = raw.decode("utf-8")
                return _LEAF_RECORD.unpack_from(data, offset)[1], _pack_path(leaf)
            directory, leaf = _split(raw.decode("utf-8"))
        except ValueError:
            return None
        dir_id = self._dir_id(db, directory)
        return None if dir_id is None else (dir_id, _pack_path(leaf))

    def remove(self, names: Iterable[str]) -> int:
        """Drop the entries `names` (their bytes go at the next `compact`); the count dropped."""
        pack = self._open_pack(create=False)
        if pack is None:
            return 0
        dropped = 0
        with self._write_lock:
            db = self._writer_db(pack)
            self._fresh.clear()  # a removed leaf is written again in full
            db.execute("BEGIN IMMEDIATE")
            try:
                for name in names:
                    directory, leaf = _split(name)
                    dir_id = self._dir_id(db, directory)
                    if dir_id is None:
                        continue
                    cursor = db.execute(
                        "DELETE FROM entries WHERE dir = ? AND leaf = ?", (dir_id, _pack_path(leaf))
                    )
                    dropped += cursor.rowcount
                    self._drop_held(dir_id)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return dropped

    # ------------------------------------------------------------------ compaction

    def compact(self, *, dry_run: bool = False, keep_ratio: float = 0.5) -> Compaction:
        """Rewrite segments whose live records are under `keep_ratio` of their size into
        this store's own segment, then delete them; delete segments with nothing live and
        objects no entry names.

        A segment a live writer holds (its flock) is never touched, so runs go on meanwhile;
        a row rewritten by a writer between the copy and the switch keeps the writer's
        record (the switch names the old place). Torn tails (bytes after the last whole
        record of a segment no one writes) are counted and dropped with their segment,
        which is rewritten whatever its live share.
        """
        pack = self._open_pack(create=False)
        if pack is None:
            return Compaction(0, 0, 0, 0, 0, 0)
        self._drop_held()
        removed = moved = freed = torn_segments = torn_bytes = 0
        with self._write_lock:
            db = self._writer_db(pack)
            own = self._writer.id if self._writer is not None else None
            # Every idle segment is locked first, and only then are its live records read:
            # a writer appends only while it holds its segment's lock, so what is read
            # after is complete (read before, a record the writer added meanwhile would
            # be left pointing at a deleted segment).
            held: dict[int, tuple[str, int, int]] = {}
            try:
                sealed, judged = set(), set()
                for seg_id, seg_name, is_sealed in db.execute(
                    "SELECT id, name, sealed FROM segments"
                ).fetchall():
                    if seg_id != own and (idle := _idle_segment(pack, seg_name)) is not None:
                        held[seg_id] = (seg_name, *idle)
                        if is_sealed == 1:
                            sealed.add(seg_id)
                        elif is_sealed == 2:
                            judged.add(seg_id)
                # each held segment's live records counted and summed (not held: one
                # tuple per entry of the store was O(entries) memory); only the segments
                # to rewrite have their records read, in a second pass
                live: dict[int, list[int]] = {}
                for seg, length in db.execute(
                    "SELECT segment, length FROM entries WHERE object IS NULL"
                ):
                    if seg in held:
                        counted = live.setdefault(seg, [0, 0])
                        counted[0] += 1
                        counted[1] += length
                rewrite: list[int] = []
                for seg_id, (_seg_name, fd, size) in held.items():
                    count, used = live.get(seg_id, (0, 0))
                    torn = _torn_tail(fd, size)
                    if torn:
                        torn_segments += 1
                        torn_bytes += torn
                    # a sealed segment's live share is of its records' raw bytes
                    raw = _sealed_raw_size(fd, size) if seg_id in sealed else size
                    # an unsealed segment that sealing would take (its writer was killed
                    # before it retired it) is copied: the copy is sealed when it retires
                    unsealed = (
                        seg_id not in sealed
                        and seg_id not in judged
                        and self._seal_min is not None
                        and size >= max(self._seal_min, SEAL_MIN)
                    )
                    if count and not torn and not unsealed and used >= keep_ratio * raw:
                        continue  # mostly live and whole: not worth a copy
                    removed += 1
                    freed += size - (used * size // raw if raw else 0)
                    rewrite.append(seg_id)
                if rewrite and not dry_run:
                    records = self._live_records(db, {s for s in rewrite if s in live})
                    for seg_id in rewrite:
                        seg_name, fd, _size = held[seg_id]
                        moved += self._rewrite(
                            pack,
                            db,
                            seg_id,
                            seg_name,
                            fd,
                            records.pop(seg_id, []),
                            seg_id in sealed,
                        )
                removed += self._collect_orphans(pack, db, dry_run)
            finally:
                for _name, fd, _size in held.values():
                    os.close(fd)
            objects_removed = self._collect_objects(pack, db, dry_run)
            # Rows of `dirs` stay: other processes keep their ids, so one deleted under a
            # writer would hide the entries it adds next (a name costs a few bytes).
        return Compaction(removed, moved, freed, objects_removed, torn_segments, torn_bytes)

    @staticmethod
    def _live_records(
        db: sqlite3.Connection, segments: set[int]
    ) -> dict[int, list[tuple[int, str, int, int]]]:
        """(dir, leaf, offset, length) of the live records of `segments`, by segment."""
        out: dict[int, list[tuple[int, str, int, int]]] = {}
        if not segments:
            return out
        for dir_id, leaf, seg, offset, length in db.execute(
            "SELECT dir, leaf, segment, offset, length FROM entries WHERE object IS NULL"
        ):
            if seg in segments:
                out.setdefault(seg, []).append((dir_id, leaf, offset, length))
        return out

    def _rewrite(
        self,
        pack: FsRoot,
        db: sqlite3.Connection,
        seg_id: int,
        seg_name: str,
        fd: int,
        records: list[tuple[int, str, int, int]],
        sealed: bool = False,
    ) -> int:
        """Copy a locked segment's live records into this store's segment, switch their
        rows in one transaction, delete the segment; the records moved."""
        moves = []
        blocks: dict[int, bytes | None] = {}
        for dir_id, leaf, offset, length in records:
            if sealed:
                at, inner = divmod(offset, _BLOCK_SPAN)
                if at not in blocks:
                    blocks[at] = _read_block(fd, at)
                raw = blocks[at]
                record = b"" if raw is None else raw[inner : inner + length]
            else:
                record = os.pread(fd, length, offset)
            if len(record) != length:
                continue
            writer = self._segment(pack, db)
            _write_all(writer.fd, record)
            moves.append((writer.id, writer.size, dir_id, leaf, seg_id, offset))
            writer.size += length
        if self._writer is not None:
            os.fsync(self._writer.fd)  # the copies durable before a row names them
        # each row only if it still names the old place (a writer's newer record wins)
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                "UPDATE entries SET segment = ?, offset = ? WHERE dir = ? AND"
                " leaf = ? AND segment = ? AND offset = ?",
                moves,
            )
            db.execute("DELETE FROM segments WHERE id = ?", (seg_id,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        with contextlib.suppress(FsNotFound):
            pack.remove(f"{_SEGMENTS}/{seg_name}")
        return len(moves)

    def _collect_orphans(self, pack: FsRoot, db: sqlite3.Connection, dry_run: bool) -> int:
        """Segment files the index does not name (a writer killed before registering one).
        A file is judged once it is locked: a writer registers its segment before it
        lets go of the lock, so a registered name is then visible."""
        count = 0
        try:
            names = pack.listdir(_SEGMENTS)
        except FsNotFound:
            return 0
        for name in names:
            if not name.endswith(".seg"):
                continue
            held = _idle_segment(pack, name)
            if held is None:
                continue
            try:
                known = db.execute("SELECT 1 FROM segments WHERE name = ?", (name,)).fetchone()
                if known is None:
                    count += 1
                    if not dry_run:
                        pack.remove(f"{_SEGMENTS}/{name}", missing_ok=True)
            finally:
                os.close(held[0])
        return count

    def _collect_objects(self, pack: FsRoot, db: sqlite3.Connection, dry_run: bool) -> int:
        """Objects no entry names, judged under the objects lock held exclusively (a writer
        holds it shared from writing an object to committing the row that names it)."""
        lock = pack.open_lock_file(_OBJECTS_LOCK)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rows = db.execute("SELECT object FROM entries WHERE object IS NOT NULL")
            named = {row[0] for row in rows}
            count = 0
            try:
                shards = pack.listdir(_OBJECTS)
            except FsNotFound:
                return 0
            for shard in shards:
                for leaf in pack.listdir(f"{_OBJECTS}/{shard}"):
                    if leaf in named or leaf.startswith("."):
                        continue
                    count += 1
                    if not dry_run:
                        pack.remove(f"{_OBJECTS}/{shard}/{leaf}", missing_ok=True)
            return count
        finally:
            os.close(lock)

    def segment_count(self) -> int:
        """How many segment files the index knows (for reports and tests)."""
        db = self._reader()
        if db is None:
            return 0
        return int(db.execute("SELECT COUNT(*) FROM segments").fetchone()[0])

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Close the segment, descriptors and connections (idempotent)."""
        with self._lock:
            self._closed = True
            for fd in self._segment_fds.values():
                os.close(fd)
            self._segment_fds.clear()
            for db in self._connections:
                db.close()
            self._connections.clear()
        with self._write_lock:
            if self._writer is not None:
                self._retire(self._writer)
            if self._write_db is not None:
                _leave_wal(self._write_db)
                self._write_db.close()
                self._write_db = None
        with self._lock:
            if self._pack is not None:
                self._pack.close()
                self._pack = None


_V2_TABLES = """
    CREATE TABLE dirs (name BLOB PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE segments (
        id INTEGER PRIMARY KEY, name TEXT NOT NULL, sealed INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE entries (
        dir INTEGER NOT NULL,
        leaf BLOB NOT NULL,
        segment INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        length INTEGER NOT NULL,
        object TEXT,
        written INTEGER NOT NULL,
        PRIMARY KEY (dir, leaf)
    ) WITHOUT ROWID;
"""


def _create_schema(db: sqlite3.Connection) -> None:
    """Index schema 3 (docs/internals.md "Packed store"): schema 2 and `entries.facts`;
    names packed (`_pack_path`) and
    kept once (`dirs` is keyed by its name; no second index); ids of directories and
    segments from counters in `meta`, never reused: a process keeps the descriptors of
    the segments it read by id, and `RJPL`/`RJPC` records name their directory by id."""
    db.executescript(
        f"""
        BEGIN IMMEDIATE;
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO meta VALUES ('schema', {_SCHEMA}), ('dir', 0), ('segment', 0);
        {_V2_TABLES};
        {_FACTS_COLUMN};
        COMMIT;
        """
    )


def _schema_of(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return int(row[0]) if row is not None else 1


def _next(db: sqlite3.Connection, counter: str) -> int:
    """The next id of `counter` (inside the caller's write transaction)."""
    row = db.execute(
        "UPDATE meta SET value = value + 1 WHERE key = ? RETURNING value", (counter,)
    ).fetchone()
    return int(row[0])


def _migrate_v1(db: sqlite3.Connection) -> None:
    """Rewrite an index of schema 1 (names as text, `dirs` with a unique index, segment
    ids by AUTOINCREMENT) as schema 2, in one transaction: ids of directories and
    segments are kept (records and other processes name them), counters start past the
    highest. A reader that read schema 1 before finds nothing with its text keys and
    reads the schema again (`_schema_moved`)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if _schema_of(db) != 1:
            db.execute("COMMIT")
            return
        dirs = db.execute("SELECT name, id FROM dirs").fetchall()
        entries = db.execute(
            "SELECT dir, leaf, segment, offset, length, object, written FROM entries"
        ).fetchall()
        segments = db.execute("SELECT id, name FROM segments").fetchall()
        seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'segments'").fetchone()
        for table in ("dirs", "entries", "segments"):
            db.execute(f"DROP TABLE {table}")
        for statement in _V2_TABLES.split(";"):
            if statement.strip():
                db.execute(statement)
        db.executemany("INSERT INTO dirs VALUES (?, ?)", [(_pack_path(n), i) for n, i in dirs])
        db.executemany(
            "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(d, _pack_path(leaf), *rest) for d, leaf, *rest in entries],
        )
        db.executemany("INSERT INTO segments (id, name) VALUES (?, ?)", segments)
        last_segment = max([seq[0] if seq else 0, *(i for i, _ in segments)])
        db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [
                ("schema", 2),
                ("dir", max((i for _, i in dirs), default=0)),
                ("segment", last_segment),
            ],
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _migrate_v2(db: sqlite3.Connection) -> None:
    """Add `entries.facts` to an index of schema 2 (schema 3), in one transaction: the
    column is NULL for every record there (read as before, from the record), and a
    runjournal of schema 2 still reads and writes the index (its rows name their columns;
    a row it replaces has no facts)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if _schema_of(db) == 2:
            db.execute(_FACTS_COLUMN)
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (_SCHEMA,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _publish_index(pack: FsRoot) -> None:
    """Create the index whole: its schema is written to a temp file (0600), which is then
    linked into place, never over another process's index (the loser drops its temp);
    renamed where the file system has no hard links. So a reader never opens an index
    without its tables."""
    temp = f"index-{secrets.token_hex(8)}.new"
    os.close(pack.open_file(temp, create=True))
    try:
        db = sqlite3.connect(pack.fd_path(temp), isolation_level=None)
        try:
            _create_schema(db)
        finally:
            db.close()
        try:
            pack.link(_INDEX, pack, temp)
        except AlreadyExists:
            pass  # another process published it first: theirs is the index
        except FsError:
            # a file system without hard links (EXDEV, EPERM, ENOTSUP): a rename, which
            # refuses an existing index too (with a narrower guarantee: checked, then done)
            with contextlib.suppress(AlreadyExists):
                pack.rename(temp, _INDEX)
    finally:
        pack.remove(temp, missing_ok=True)


def _enter_wal(db: sqlite3.Connection) -> None:
    """Put the index in WAL mode. The switch needs the index to itself, and SQLite does
    not wait for that through the busy timeout: it is retried while other connections
    (a reader between two lookups, a writer leaving WAL) hold it, up to the busy time."""
    deadline = time.monotonic() + _BUSY_MS / 1000
    while True:
        try:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError:
            mode = None
            if time.monotonic() > deadline:
                raise
        if str(mode).lower() == "wal":
            return
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("the packed store's index stays out of WAL mode")
        time.sleep(0.005)


def _leave_wal(db: sqlite3.Connection) -> None:
    """Back to rollback mode when no other connection is open (else it stays WAL), so the
    next process that only reads finds no `-wal` to replay and creates no files."""
    with contextlib.suppress(sqlite3.Error):
        db.execute("PRAGMA busy_timeout=0")
        db.execute("PRAGMA journal_mode=DELETE")


def _object_name(digest: str) -> str:
    return f"{_OBJECTS}/{digest[:2]}/{digest}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def _idle_segment(pack: FsRoot, name: str) -> tuple[int, int] | None:
    """(descriptor, size) of a segment no writer holds, locked by us; None otherwise."""
    try:
        fd = pack.open_file(f"{_SEGMENTS}/{name}")
    except FsNotFound:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd, os.fstat(fd).st_size


def _record_span(head: bytes) -> tuple[int, int, int] | None:
    """(header size, name size, data size) of the record starting with `head` (at least
    `_LEAF_RECORD.size` bytes, or all that is left); None for anything else."""
    if head[:4] in (_MAGIC_LEAF, _MAGIC_PACKED) and len(head) >= _LEAF_RECORD.size:
        _magic, _dir, name_size, data_size = _LEAF_RECORD.unpack_from(head)
        return _LEAF_RECORD.size, name_size, data_size
    if head[:4] == _MAGIC and len(head) >= _RECORD.size:
        _magic, name_size, data_size = _RECORD.unpack_from(head)
        return _RECORD.size, name_size, data_size
    if head[:4] == _MAGIC_BLOCK and len(head) >= _BLOCK.size:
        _magic, frame_size, _raw_size = _BLOCK.unpack_from(head)
        return _BLOCK.size, 0, frame_size
    return None


_zstd_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor for sealed blocks: making one cost about 15 us, a third
    of decompressing a 32 KiB block (docs/performance.md "A corpus at scale: the packed
    store and what a no-op resume costs (issue 29)"). A decompressor is not for two
    threads at once; each call starts a new frame."""
    found = getattr(_zstd_local, "decompressor", None)
    if found is None:
        found = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return found


def _read_block(fd: int, at: int) -> bytes | None:
    """The records of the block at `at` of a sealed segment; None if it cannot be read."""
    head = os.pread(fd, _BLOCK.size, at)
    if len(head) != _BLOCK.size:
        return None
    magic, frame_size, raw_size = _BLOCK.unpack(head)
    frame = os.pread(fd, frame_size, at + _BLOCK.size)
    if magic != _MAGIC_BLOCK or len(frame) != frame_size:
        return None
    try:
        raw = _decompressor().decompress(frame, max_output_size=raw_size)
    except zstandard.ZstdError:
        return None
    return raw if len(raw) == raw_size else None


def segment_records(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each whole record of a segment's bytes, up to a torn tail (for
    tools that scan what the cache holds, such as the secret-leak tests). A record that
    names its entry by directory id gives its leaf name only."""
    offset = 0
    while (span := _record_span(data[offset : offset + _LEAF_RECORD.size])) is not None:
        head, name_size, data_size = span
        start = offset + head
        end = start + name_size + data_size
        if end > len(data):
            return
        if data[offset : offset + 4] == _MAGIC_BLOCK:  # a sealed segment's block
            raw = _read_block_bytes(data[offset:end])
            if raw is None:
                return
            yield from segment_records(raw)
            offset = end
            continue
        raw = data[start : start + name_size]
        try:
            name = _unpack_path(raw) if data[offset : offset + 4] == _MAGIC_PACKED else ""
        except ValueError:
            name = ""
        yield name or raw.decode("utf-8", "replace"), data[start + name_size : end]
        offset = end


def _sealed_raw_size(fd: int, size: int) -> int:
    """The records' raw bytes in a sealed segment's blocks (their headers read)."""
    offset = total = 0
    while offset + _BLOCK.size <= size:
        magic, frame_size, raw_size = _BLOCK.unpack(os.pread(fd, _BLOCK.size, offset))
        if magic != _MAGIC_BLOCK:
            break
        total += raw_size
        offset += _BLOCK.size + frame_size
    return total


def _read_block_bytes(block: bytes) -> bytes | None:
    _magic, frame_size, raw_size = _BLOCK.unpack_from(block)
    try:
        raw = _decompressor().decompress(
            block[_BLOCK.size : _BLOCK.size + frame_size], max_output_size=raw_size
        )
    except zstandard.ZstdError:
        return None
    return raw if len(raw) == raw_size else None


def segment_bytes(data: bytes) -> bytes:
    """A segment's records as appended: a sealed segment's blocks decompressed (up to the
    first that cannot be), any other segment as it is (for tools that measure it)."""
    if data[:4] != _MAGIC_BLOCK:
        return data
    out = bytearray()
    offset = 0
    while data[offset : offset + 4] == _MAGIC_BLOCK and offset + _BLOCK.size <= len(data):
        _magic, frame_size, _raw_size = _BLOCK.unpack_from(data, offset)
        end = offset + _BLOCK.size + frame_size
        raw = _read_block_bytes(data[offset:end]) if end <= len(data) else None
        if raw is None:
            break
        out += raw
        offset = end
    return bytes(out)


def _torn_tail(fd: int, size: int) -> int:
    """Bytes after the last whole record of a segment (a writer killed mid-append)."""
    offset = 0
    while offset < size:
        span = _record_span(os.pread(fd, _LEAF_RECORD.size, offset))
        if span is None:
            break
        end = offset + sum(span)
        if end > size:
            break
        offset = end
    return size - offset
