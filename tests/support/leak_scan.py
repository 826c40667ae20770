"""Looking for planted secrets in everything a run wrote, compressed bytes included.

- `files_under(*roots)`: every file under the roots;
- `leaks(haystack, needles)`: the names whose needles occur in the bytes;
- `Expanded`: a file's bytes plus its decompressed contents (checkpoint payloads, chunk
  plans, any zstd frame), counting what it looked into;
- `journal_states(db)`: every stored event of a SQLite journal decoded to msgpack.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from uuid import UUID

import msgspec
import zstandard
from eventsourcing.persistence import StoredEvent
from runjournal.adapters.checkpoints import Compression, EnvelopeCodec, EnvelopeHeader
from runjournal.adapters.chunkplans import decode_plan
from runjournal.adapters.journal import EventMapper
from runjournal.adapters.packed_store import segment_records
from runjournal.domain.ports import CheckpointKey


def files_under(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def leaks(haystack: bytes, needles: dict[str, tuple[str, ...]]) -> list[str]:
    return [name for name, parts in needles.items() if any(p.encode() in haystack for p in parts)]


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ENVELOPE_PREFIX = 4 + 2 + 4  # magic, version (u16), header length (u32): checkpoints.py


def zstd_frames(data: bytes) -> list[bytes]:
    """Every zstd frame in `data`, decompressed (journal rows, plan and checkpoint payloads)."""
    frames = []
    at = data.find(ZSTD_MAGIC)
    while at != -1:
        with contextlib.suppress(zstandard.ZstdError):  # bytes that only look like a frame
            frames.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[at:]))
        at = data.find(ZSTD_MAGIC, at + 1)
    return frames


def checkpoint_payload(data: bytes) -> tuple[bytes, bool]:
    """The decompressed payload of a checkpoint envelope (verified for versions 1 and 2,
    whose header names its key), and whether it was stored compressed (a small one is
    stored as it is). A version 3 header is fixed binary fields plus a msgpack tail
    (warnings, provenance) that a byte scan reads as it is; its payload is cut out by the
    layout of docs/internals.md "Envelope format"."""
    size = int.from_bytes(data[6:_ENVELOPE_PREFIX], "big")
    if int.from_bytes(data[4:6], "big") == 3:
        stored = data[_ENVELOPE_PREFIX + size : -32]
        compressed = bool(data[_ENVELOPE_PREFIX] & 0x01)
        if compressed:
            stored = zstandard.ZstdDecompressor().decompressobj().decompress(stored)
        return stored, compressed
    header = msgspec.msgpack.decode(
        data[_ENVELOPE_PREFIX : _ENVELOPE_PREFIX + size], type=EnvelopeHeader
    )
    key = CheckpointKey(header.step, header.lane, header.stage, header.chunk)
    header, payload = EnvelopeCodec().open(data, key)
    return payload, header.compression is Compression.ZSTD


class Expanded:
    """Each file's bytes plus everything compressed inside it, with counts per kind."""

    def __init__(self) -> None:
        self.checkpoints = 0
        self.compressed_checkpoints = 0
        self.plans = 0
        self.frames = 0

    def __call__(self, path: Path) -> bytes:
        data = path.read_bytes()
        parts = [data]
        if path.suffix == ".seg":  # the packed store's records (docs/internals.md "Packed store")
            for name, record in segment_records(data):
                parts.extend(self._entry(name, record))
        else:
            parts.extend(self._entry(path.name, data))
        frames = zstd_frames(data)
        self.frames += len(frames)
        return b"".join(parts + frames)

    def _entry(self, name: str, data: bytes) -> list[bytes]:
        """What a checkpoint or chunk plan named `name` holds once decoded."""
        if name.endswith(".ckpt"):
            payload, compressed = checkpoint_payload(data)
            self.checkpoints += 1
            self.compressed_checkpoints += compressed
            return [payload]
        if name.endswith(".plan"):
            spans = decode_plan(name.rsplit("/", 1)[-1].removesuffix(".plan"), data)
            self.plans += 1
            return [msgspec.msgpack.encode(spans)]
        return []


# The stored event state (docs/internals.md "Storage format"): a format byte, then the
# class version when flagged, then the event count of a packed or delta row, then
# msgpack, zstd-compressed for format 0x02.
_FORMAT_MSGPACK, _FORMAT_ZSTD_MSGPACK, _FLAG_CLASS_VERSION = 0x01, 0x02, 0x10
_COUNTED = 0x20 | 0x40  # a packed row, a delta row


def journal_states(db: Path) -> tuple[list[bytes], int]:
    """Every stored row's state decoded to msgpack bytes, and how many were compressed.

    A packed or delta row also gives each of its events as a whole msgpack map: the row
    stores digests as their bytes and repeated strings by reference (docs/internals.md
    "Delta rows"), which a scan of the row alone would not see.
    """
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
        ).fetchall()
    states, compressed = [], 0
    mapper = EventMapper()
    for aggregate, version, topic, state in rows:
        head = state[0]
        skip = (3 if head & _FLAG_CLASS_VERSION else 1) + (2 if head & _COUNTED else 0)
        body = bytes(state[skip:])
        fmt = head & 0x0F
        if head & _COUNTED:
            row = StoredEvent(UUID(aggregate), version, topic, bytes(state))
            states += [msgspec.msgpack.encode(e) for e in mapper.to_domain_events(row)]
        if fmt == _FORMAT_ZSTD_MSGPACK:
            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
            compressed += 1
        else:
            assert fmt == _FORMAT_MSGPACK, f"unknown state format 0x{head:02x}"
        assert isinstance(msgspec.msgpack.decode(body), dict)  # really an event map
        states.append(body)
    return states, compressed


PIECE = 8
"""The shortest piece of a secret that must not be found (docs/internals.md "Known
secrets"): any longer piece holds one of this length, so these are enough to look for."""


def encodings(secret: str) -> dict[str, str]:
    """`secret` as text may carry it, computed here independently of the product:
    URL-encoded, JSON-escaped, and base64 (standard, URL-safe) at each of the three
    alignments inside a longer base64 text (only the characters made of its own bits)."""
    import base64
    import json
    from urllib.parse import quote

    forms = {"plain": secret, "url": quote(secret, safe=""), "json": json.dumps(secret)[1:-1]}
    data = secret.encode()
    for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
        forms[name] = encode(data).decode()
        for pad in (1, 2):
            text = encode(b"\0" * pad + data).decode().rstrip("=")
            forms[f"{name}+{pad}"] = text[-(-8 * pad // 6) : 8 * (pad + len(data)) // 6]
    return forms


def secret_pieces(*secrets: str) -> tuple[str, ...]:
    """Every `PIECE`-character piece of every secret and of each of its encodings."""
    out: set[str] = set()
    for secret in secrets:
        for form in encodings(secret).values():
            out |= {form[i : i + PIECE] for i in range(len(form) - PIECE + 1)}
    return tuple(sorted(out))
