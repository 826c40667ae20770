"""Pack objects of an object-storage cache root: many small entries in one object
(docs/internals.md "Object-storage cache": packs).

A pack is written once, with `If-None-Match: *`, under a key that names its writer's clock
and its own sha256, `packs/<ts:016x>-<sha256>`; it carries its index in front of its
records, so the pack and its index become visible together (one PUT, nothing renamed):

    magic `RJSPACK1`, index length (u32)
    index: ts (u64), count (u32), then per record:
           kind (u8: 0 bytes, 1 removal), size (u32), sha256 (32), name length (u16), name
    sha256 of the index (32)
    the records' bytes, one after the other, in index order

A reader reads the front of the pack (its index), checks the index against its digest,
then reads records by range (or the whole pack, whose key names its sha256) and checks
each record against its sha256. A truncated or torn pack is refused (`PackError`).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "HEAD_BYTES",
    "PACK_PREFIX",
    "PackError",
    "PackIndex",
    "PackRecord",
    "decode_index",
    "encode_pack",
    "index_span",
    "pack_key",
    "parse_pack_key",
    "records_of",
]

PACK_PREFIX = "packs"
_MAGIC = b"RJSPACK1"
_HEAD = struct.Struct(">8sI")
_INDEX_HEAD = struct.Struct(">QI")
_ENTRY = struct.Struct(">BI32sH")
_DIGEST = 32
HEAD_BYTES = _HEAD.size
BYTES = 0
REMOVED = 1
# An index larger than this is refused (a million names of 64 bytes is ~100 MiB; a pack
# holds at most a few thousand).
_INDEX_LIMIT = 64 << 20
_KEY = LazyPattern(r"([0-9a-f]{16})-([0-9a-f]{64})")


class PackError(ValueError):
    """Bytes that are not a whole, intact pack (or its index)."""


@dataclass(frozen=True, slots=True)
class PackRecord:
    """One record of a pack: its name, kind, sha256, size, and offset in the pack."""

    name: str
    removed: bool
    sha256: str
    size: int
    offset: int


@dataclass(frozen=True, slots=True)
class PackIndex:
    """A pack's index: its writer's clock (`ts`) and its records."""

    ts: int
    records: tuple[PackRecord, ...]
    data_start: int

    @property
    def size(self) -> int:
        """The pack's whole size, as its index gives it."""
        return self.data_start + sum(r.size for r in self.records)


def pack_key(ts: int, data: bytes) -> str:
    return f"{PACK_PREFIX}/{ts:016x}-{hashlib.sha256(data).hexdigest()}"


def parse_pack_key(key: str) -> tuple[int, str] | None:
    """(ts, sha256) of `packs/<ts>-<sha256>`; None for anything else."""
    leaf = key.rpartition("/")[2]
    match = _KEY.fullmatch(leaf)
    if match is None or key != f"{PACK_PREFIX}/{leaf}":
        return None
    return int(match.group(1), 16), match.group(2)


def encode_pack(ts: int, records: list[tuple[str, bytes | None]]) -> bytes:
    """A pack of `records` (name, bytes; None for a removal), in order."""
    if not 0 <= ts < 1 << 64:
        raise ValueError("a pack's clock is a u64")
    parts = [_INDEX_HEAD.pack(ts, len(records))]
    for name, data in records:
        raw = name.encode()
        body = data if data is not None else b""
        kind = REMOVED if data is None else BYTES
        parts.append(_ENTRY.pack(kind, len(body), hashlib.sha256(body).digest(), len(raw)))
        parts.append(raw)
    index = b"".join(parts)
    out = [_HEAD.pack(_MAGIC, len(index)), index, hashlib.sha256(index).digest()]
    out.extend(data for _name, data in records if data is not None)
    return b"".join(out)


def index_span(head: bytes) -> int:
    """How many bytes from the pack's start hold its index (and its digest), from its
    first `HEAD_BYTES`; PackError when they are not a pack's."""
    if len(head) < HEAD_BYTES:
        raise PackError("a pack shorter than its header")
    magic, length = _HEAD.unpack_from(head)
    if magic != _MAGIC or length < _INDEX_HEAD.size or length > _INDEX_LIMIT:
        raise PackError("not a pack header")
    return HEAD_BYTES + length + _DIGEST


def decode_index(front: bytes) -> PackIndex:
    """The index of a pack from its first `index_span` bytes (or more); PackError when
    they are short, torn or not an index."""
    span = index_span(front)
    if len(front) < span:
        raise PackError("a pack shorter than its index")
    index = front[HEAD_BYTES : span - _DIGEST]
    if hashlib.sha256(index).digest() != front[span - _DIGEST : span]:
        raise PackError("a pack index that does not match its digest")
    ts, count = _INDEX_HEAD.unpack_from(index)
    at = _INDEX_HEAD.size
    offset = span
    records = []
    try:
        for _ in range(count):
            kind, size, digest, name_len = _ENTRY.unpack_from(index, at)
            at += _ENTRY.size
            if (
                kind not in (BYTES, REMOVED)
                or (kind == REMOVED and size)
                or at + name_len > len(index)
            ):
                raise PackError("a damaged pack index entry")
            name = index[at : at + name_len].decode()
            at += name_len
            records.append(PackRecord(name, kind == REMOVED, digest.hex(), size, offset))
            offset += size
    except (struct.error, UnicodeDecodeError):
        raise PackError("a damaged pack index") from None
    if at != len(index):
        raise PackError("a pack index with trailing bytes")
    return PackIndex(ts, tuple(records), span)


def records_of(data: bytes) -> tuple[PackIndex, dict[str, bytes]]:
    """A whole pack's index and the bytes of its records that verify (the last record of a
    name wins within a pack); PackError when the pack is truncated, torn or overlong."""
    index = decode_index(data)
    if index.size != len(data):
        raise PackError("a pack whose length is not its index's")
    out: dict[str, bytes] = {}
    for record in index.records:
        if record.removed:
            out.pop(record.name, None)
            continue
        body = data[record.offset : record.offset + record.size]
        if hashlib.sha256(body).hexdigest() == record.sha256:
            out[record.name] = body
    return index, out
