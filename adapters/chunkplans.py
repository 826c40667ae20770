"""The source-addressed chunk-plan store and the accepted chunk map encoder.

Plans live under ``<cache root>/chunkplans/<key[:2]>/<key>.plan`` in a self-checking
envelope; a file that fails any check is reported CORRUPT and never trusted, and ``get``
never raises for what it finds on disk. Only accepted plans are published, atomically
through :class:`FsRoot`, so concurrent runs publishing the same plan leave one valid file.
Bypass mode constructs no store at all
(docs/internals.md "Chunk-plan store and accepted chunk map").
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Self

import msgspec
import zstandard
from runjournal.adapters.fsroot import FsError, FsNotFound, FsRoot
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.chunking import ChunkingSettings, Span
from runjournal.domain.events import PlanOutcome
from runjournal.domain.plan_keys import (
    CacheMode,
    ChunkMapEntry,
    PlanFacts,
    is_plan_key,
    is_sha256_hex,
    plan_key,
)
from runjournal.domain.ports import PlanLookup, PlanPublishError

__all__ = [
    "CHUNK_MAP_INDEX_NAME",
    "CHUNK_MAP_INDEX_SCHEMA",
    "CHUNK_MAP_NAME",
    "CHUNK_MAP_SCHEMA",
    "MAGIC",
    "PLAN_DIR",
    "VERSION",
    "ChunkMapEncoder",
    "ChunkPlanFileStore",
    "ChunkPlanStoreError",
    "PlanEnvelopeError",
    "PlanStoreOpenError",
    "PlanStoreWriteError",
    "decode_plan",
    "encode_chunk_map",
    "encode_chunk_map_index",
    "encode_plan",
    "plan_file_name",
]

PLAN_DIR = "chunkplans"
MAGIC = b"RJPL"
VERSION = 1
_PREFIX = struct.Struct(">4sHI")  # magic, version, header length
_LENGTH = struct.Struct(">I")  # payload length
_DIGEST_SIZE = 32
_ZSTD_LEVEL = 3
_MAX_SPANS = 1 << 28
_MAX_HEADER_BYTES = 1 << 16


class ChunkPlanStoreError(Exception):
    """Base of the chunk-plan store's errors (messages are one line)."""


class PlanStoreSyncError(ChunkPlanStoreError, PlanPublishError):
    """The group sync of published plans failed: they may not be durable."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        text = " ".join(str(cause).split()) or type(cause).__name__
        super().__init__(f"chunk plans may not be durable: {text}")


class PlanStoreWriteError(ChunkPlanStoreError, PlanPublishError):
    """An accepted plan could not be published; the run still uses the plan."""

    def __init__(self, key: str, cause: BaseException) -> None:
        self.key = key
        self.cause = cause
        text = " ".join(str(cause).split()) or type(cause).__name__
        super().__init__(f"cannot publish chunk plan {key}: {text}")


class PlanStoreOpenError(ChunkPlanStoreError):
    """The store's directory could not be opened or created."""


class PlanEnvelopeError(ChunkPlanStoreError):
    """The bytes are not a valid plan envelope for the key asked for (get says CORRUPT)."""


class _PlanHeader(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The envelope header; the facts are empty when the publisher did not supply them."""

    key: str
    planner_fingerprint: str
    settings: ChunkingSettings | None
    source_sha256: str
    source_size: int
    count: int


_HEADER_DECODER = msgspec.msgpack.Decoder(_PlanHeader)
_SPANS_DECODER = msgspec.msgpack.Decoder(list[Span])
_MSGPACK = msgspec.msgpack.Encoder(order="deterministic")


# --------------------------------------------------------------------------- envelope


def plan_file_name(key: str) -> str:
    """The logical name of `key`'s plan beneath the store root (key checked first)."""
    if not is_plan_key(key):
        raise ValueError("a chunk-plan key is 64 lowercase hex characters")
    return f"{key[:2]}/{key}.plan"


def _check_spans(spans: Sequence[Span], source_size: int | None) -> int:
    """Spans start at 0, are non-empty and contiguous; return where the last one ends."""
    position = 0
    for span in spans:
        if not isinstance(span, Span) or span.start != position or span.end <= span.start:
            raise PlanEnvelopeError("spans are not contiguous, non-empty and ordered from 0")
        position = span.end
    if source_size is not None and position != source_size:
        raise PlanEnvelopeError("spans do not cover the source")
    return position


def encode_plan(key: str, spans: Sequence[Span], facts: PlanFacts | None = None) -> bytes:
    """The envelope bytes for `spans` under `key`; identical inputs give identical bytes."""
    plan_file_name(key)
    spans = list(spans)
    if len(spans) > _MAX_SPANS:
        raise ValueError("too many spans for one chunk plan")
    try:
        size = _check_spans(spans, None if facts is None else facts.source_size)
    except PlanEnvelopeError as exc:
        raise ValueError(f"refusing to publish an invalid chunk plan: {exc}") from None
    if facts is None:
        header = _PlanHeader(
            key=key,
            planner_fingerprint="",
            settings=None,
            source_sha256="",
            source_size=size,
            count=len(spans),
        )
    else:
        if facts.key() != key:
            raise ValueError("the plan facts do not hash to the plan key")
        header = _PlanHeader(
            key=key,
            planner_fingerprint=facts.planner_fingerprint,
            settings=facts.settings,
            source_sha256=facts.source_sha256,
            source_size=facts.source_size,
            count=len(spans),
        )
    header_bytes = _MSGPACK.encode(header)
    payload = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(_MSGPACK.encode(spans))
    body = b"".join(
        (
            _PREFIX.pack(MAGIC, VERSION, len(header_bytes)),
            header_bytes,
            _LENGTH.pack(len(payload)),
            payload,
        )
    )
    return body + hashlib.sha256(body).digest()


def decode_plan(key: str, data: bytes) -> list[Span]:
    """The spans in envelope `data` if it is a valid plan for `key`, else PlanEnvelopeError."""
    if len(data) < _PREFIX.size + _LENGTH.size + _DIGEST_SIZE:
        raise PlanEnvelopeError("truncated")
    body, digest = data[:-_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    if hashlib.sha256(body).digest() != digest:
        raise PlanEnvelopeError("digest mismatch")
    magic, version, header_size = _PREFIX.unpack_from(body, 0)
    if magic != MAGIC:
        raise PlanEnvelopeError("not a chunk-plan file")
    if version != VERSION:
        raise PlanEnvelopeError(f"unsupported envelope version {version}")
    if header_size > _MAX_HEADER_BYTES:
        raise PlanEnvelopeError("header too large")
    offset = _PREFIX.size
    header_bytes = body[offset : offset + header_size]
    offset += header_size
    if len(body) < offset + _LENGTH.size:
        raise PlanEnvelopeError("truncated")
    (payload_size,) = _LENGTH.unpack_from(body, offset)
    offset += _LENGTH.size
    if len(body) != offset + payload_size:
        raise PlanEnvelopeError("payload length mismatch")
    try:
        header = _HEADER_DECODER.decode(header_bytes)
    except (msgspec.DecodeError, ValueError) as exc:
        raise PlanEnvelopeError(f"bad header: {exc}") from None
    _check_header(key, header)
    spans = _decode_spans(body[offset:], header.count)
    _check_spans(spans, header.source_size)
    return spans


def _check_header(key: str, header: _PlanHeader) -> None:
    if header.key != key:
        raise PlanEnvelopeError("stored under another key")
    if not 0 <= header.count <= _MAX_SPANS or header.source_size < 0:
        raise PlanEnvelopeError("counts out of range")
    facts = (header.planner_fingerprint, header.settings, header.source_sha256)
    if facts == ("", None, ""):
        return
    if header.settings is None or not is_sha256_hex(header.source_sha256):
        raise PlanEnvelopeError("incomplete plan facts")
    try:
        recomputed = plan_key(header.source_sha256, header.settings, header.planner_fingerprint)
    except (TypeError, ValueError) as exc:
        raise PlanEnvelopeError(f"bad plan facts: {exc}") from None
    if recomputed != key:
        raise PlanEnvelopeError("plan facts do not hash to the key")


def _decode_spans(payload: bytes, count: int) -> list[Span]:
    # msgpack [[start, end], ...]: at most 5 bytes of list header and 19 bytes per span,
    # so a frame declaring more is refused before anything is inflated.
    bound = 5 + 19 * count
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as exc:
        raise PlanEnvelopeError(f"bad payload frame: {exc}") from None
    if not 0 <= declared <= bound:  # -1: size not declared, which we never write
        raise PlanEnvelopeError("payload size out of range")
    inflater = zstandard.ZstdDecompressor().decompressobj()
    try:
        raw = inflater.decompress(payload)
    except zstandard.ZstdError as exc:
        raise PlanEnvelopeError(f"bad payload: {exc}") from None
    if not inflater.eof or inflater.unused_data or len(raw) != declared:
        raise PlanEnvelopeError("payload is not exactly one complete frame")
    try:
        spans = _SPANS_DECODER.decode(raw)
    except (msgspec.DecodeError, ValueError) as exc:
        raise PlanEnvelopeError(f"bad spans: {exc}") from None
    if len(spans) != count:
        raise PlanEnvelopeError("span count mismatch")
    return spans


# --------------------------------------------------------------------------- store


class ChunkPlanFileStore:
    """Plans as files beneath one root; the mode decides what is read and written.

    ``root`` may be None only in read-only mode, for a store directory that does not
    exist: every lookup is then COMPUTED and nothing is ever created.
    """

    def __init__(
        self,
        root: FsRoot | None,
        *,
        mode: CacheMode | str,
        parent: FsRoot | None = None,
        packed: PackedStore | None = None,
    ) -> None:
        mode = CacheMode(mode)
        if mode is CacheMode.BYPASS:
            raise ValueError("bypass mode constructs no chunk-plan store")
        if root is None and parent is None and mode is not CacheMode.READ_ONLY:
            raise ValueError("a writing chunk-plan store needs its directory or its parent")
        self._root = root
        self._parent = parent  # where `chunkplans/` is created on the first publish
        self._mode = mode
        self._owns_root = False
        self._owned_parent: FsRoot | None = None
        # `get` and `publish` run on the job threads and may both open `chunkplans/`
        # late: the handle is set once, under this lock, so none is opened twice and
        # leaked (docs/internals.md "Objects shared between threads").
        self._root_lock = threading.Lock()
        self._unsynced = False  # a plan was published with durable=False since the last sync
        # With the cache root's packed store, plans are packed entries named as their files
        # were (`chunkplans/<key[:2]>/<key>.plan`); files are still read (docs/internals.md
        # "Packed store").
        self._packed = packed
        # What a cold cache root lacks, found once: a run looks up every source's plan
        # before it publishes any, and each miss would otherwise try to open `pack/` and
        # `chunkplans/` again (two directory opens per source before the first request,
        # docs/performance.md "Concurrency: `--jobs N` against an LLM endpoint"). A plan
        # another process publishes meanwhile is then computed again, as it would have
        # been a moment earlier; this store's own publish clears them.
        self._no_pack = False
        self._no_dir = False

    @classmethod
    def open_for_mode(
        cls,
        cache_root: FsRoot | str | os.PathLike[str],
        mode: CacheMode | str,
        *,
        packed: PackedStore | None = None,
    ) -> Self:
        """The store under ``<cache root>/chunkplans``.

        Nothing is created here: the directory appears with the first published plan, so
        a run that publishes nothing (a failed `--recompute`, say) leaves the cache root
        exactly as it was. Until then every lookup is COMPUTED.
        """
        mode = CacheMode(mode)
        if mode is CacheMode.BYPASS:
            raise ValueError("bypass mode constructs no chunk-plan store")
        writes = mode is not CacheMode.READ_ONLY
        owned: FsRoot | None = None
        try:
            if isinstance(cache_root, FsRoot):
                parent = cache_root
            else:
                parent = owned = FsRoot.open(cache_root, create=writes)
            try:
                root: FsRoot | None = parent.subroot(PLAN_DIR)
            except FsNotFound:
                root = None
        except FsNotFound:
            if writes:
                raise PlanStoreOpenError("cannot open the chunk-plan store: not found") from None
            return cls(None, mode=mode, packed=packed)
        except FsError as exc:
            if owned is not None:
                owned.close()
            raise PlanStoreOpenError(f"cannot open the chunk-plan store: {exc}") from exc
        store = cls(root, mode=mode, parent=parent if writes else None, packed=packed)
        store._owns_root = root is not None
        if writes:
            store._owned_parent = owned
        elif owned is not None:
            owned.close()
        return store

    @property
    def mode(self) -> CacheMode:
        return self._mode

    @property
    def root(self) -> FsRoot | None:
        return self._root

    def get(self, key: str) -> PlanLookup:
        """REUSED with spans, COMPUTED (nothing usable stored) or CORRUPT; never raises on data."""
        name = plan_file_name(key)
        if self._mode is CacheMode.REFRESH:
            return PlanLookup(PlanOutcome.COMPUTED)
        packed = self._packed_get(f"{PLAN_DIR}/{name}")
        if packed is not None:
            data = packed
        else:
            root = self._root or (None if self._no_dir else self._open_existing())
            if root is None:
                return PlanLookup(PlanOutcome.COMPUTED)
            try:
                data = root.read_bytes(name)
            except FsNotFound:
                return PlanLookup(PlanOutcome.COMPUTED)
            except OSError:  # a symlink, FIFO, directory or I/O error where the plan should be
                return PlanLookup(PlanOutcome.CORRUPT)
        try:
            spans = decode_plan(key, data)
        except PlanEnvelopeError:
            return PlanLookup(PlanOutcome.CORRUPT)
        return PlanLookup(PlanOutcome.REUSED, spans)

    def _packed_get(self, name: str) -> bytes | None:
        """The packed entry `name`; None without one, or while the cache root has no
        packed store (looked for once, until this store publishes)."""
        packed = self._packed
        if packed is None or self._no_pack:
            return None
        found = packed.get(name)
        if found is None and not packed.exists:
            self._no_pack = True
        return found

    def _open_existing(self) -> FsRoot | None:
        """The directory, if another run (or an earlier publish) created it since."""
        if self._parent is None:
            return None
        with self._root_lock:
            if self._root is None:
                try:
                    self._root = self._parent.subroot(PLAN_DIR)
                except FsError:  # not found yet, or unusable: compute the plan
                    self._no_dir = True
                    return None
                self._owns_root = True
            return self._root

    def publish(
        self,
        key: str,
        spans: list[Span],
        facts: PlanFacts | None = None,
        *,
        durable: bool = True,
    ) -> bool:
        """Atomically store an accepted plan; False in read-only mode (nothing written).

        `facts` (recommended) are recorded in the header and must hash to `key`. With
        `durable=False` no fsync is made: the plan is durable after the next `sync()`
        (until then a crash may lose or tear it, and a torn plan reads as CORRUPT).
        """
        name = plan_file_name(key)
        if self._mode is CacheMode.READ_ONLY:
            return False
        data = encode_plan(key, spans, facts)
        try:
            if self._packed is not None:
                self._packed.put(f"{PLAN_DIR}/{name}", data)
                self._no_pack = False
                self._unsynced = True
                if durable:
                    self.sync()
                return True
            root = self._root or self._created_root()
            root.write_bytes(name, data, overwrite=True, durable=durable)
        except OSError as exc:
            raise PlanStoreWriteError(key, exc) from exc
        self._unsynced = self._unsynced or not durable
        return True

    def sync(self) -> None:
        """One `syncfs` of the store's file system for every plan published with
        `durable=False` since the last sync (nothing when there is none)."""
        target = self._root or self._parent
        if not self._unsynced or target is None:
            return
        try:
            target.sync()
        except OSError as exc:
            raise PlanStoreSyncError(exc) from exc
        self._unsynced = False

    def _created_root(self) -> FsRoot:
        """`chunkplans/`, created by the first publish (once, whichever thread gets here)."""
        assert self._parent is not None  # a writing store has one (see __init__)
        with self._root_lock:
            if self._root is None:
                self._root = self._parent.subroot(PLAN_DIR, create=True)
                self._owns_root = True
            return self._root

    def close(self) -> None:
        """Close the directory handle if this store opened it (open_for_mode); called
        once the run's threads are done with the store."""
        if self._owns_root and self._root is not None:
            self._root.close()
        if self._owned_parent is not None:
            self._owned_parent.close()
            self._owned_parent = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


# --------------------------------------------------------------------------- chunk map

CHUNK_MAP_NAME = "chunk-map.json"
CHUNK_MAP_INDEX_NAME = "chunk-map.index.json"
CHUNK_MAP_SCHEMA = "runjournal.chunk-map/v1"
CHUNK_MAP_INDEX_SCHEMA = "runjournal.chunk-map-index/v1"

_JSON = msgspec.json.Encoder(order="deterministic")


class _MappedChunk(msgspec.Struct, frozen=True):
    source: str
    start: int
    end: int
    sha256: str


class _ChunkMap(msgspec.Struct, frozen=True):
    schema: str
    chunks: dict[str, _MappedChunk]


class _ChunkMapIndex(msgspec.Struct, frozen=True):
    schema: str
    map: str
    count: int
    sha256: str
    size: int


def _unique_chunks(entries: Iterable[ChunkMapEntry]) -> dict[str, _MappedChunk]:
    """One value per chunk id: the same bytes twice in a source share an id, so the
    occurrence first in (source, start) order is kept whatever order entries came in."""
    chosen: dict[str, _MappedChunk] = {}
    for entry in entries:
        if not isinstance(entry, ChunkMapEntry):
            raise TypeError("chunk map entries must be ChunkMapEntry")
        value = _MappedChunk(entry.source, entry.start, entry.end, entry.sha256)
        current = chosen.get(entry.chunk_id)
        if current is None or (value.source, value.start) < (current.source, current.start):
            chosen[entry.chunk_id] = value
    return chosen


def encode_chunk_map(entries: Iterable[ChunkMapEntry]) -> bytes:
    """Canonical JSON of the accepted chunk map: chunk id -> source, span and digest."""
    return _JSON.encode(_ChunkMap(CHUNK_MAP_SCHEMA, _unique_chunks(entries)))


def encode_chunk_map_index(map_bytes: bytes, count: int) -> bytes:
    """The index descriptor that pins `map_bytes` by digest and size."""
    index = _ChunkMapIndex(
        CHUNK_MAP_INDEX_SCHEMA,
        CHUNK_MAP_NAME,
        count,
        hashlib.sha256(map_bytes).hexdigest(),
        len(map_bytes),
    )
    return _JSON.encode(index)


class ChunkMapEncoder(msgspec.Struct, frozen=True, kw_only=True):
    """Decides which chunk-map files a run writes; the index implies the map."""

    write_map: bool = False
    write_index: bool = False

    @property
    def writes_map(self) -> bool:
        return self.write_map or self.write_index

    def files(self, entries: Iterable[ChunkMapEntry]) -> list[tuple[str, bytes]]:
        """The logical files (name, bytes) to write beneath the run directory."""
        if not self.writes_map:
            return []
        chunks = _unique_chunks(entries)
        map_bytes = _JSON.encode(_ChunkMap(CHUNK_MAP_SCHEMA, chunks))
        files = [(CHUNK_MAP_NAME, map_bytes)]
        if self.write_index:
            files.append((CHUNK_MAP_INDEX_NAME, encode_chunk_map_index(map_bytes, len(chunks))))
        return files
