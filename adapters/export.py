"""Portable run exports: one run's events in a self-describing, hash-chained file.

Layout (all integers big-endian)::

    magic      8 bytes  b"RJEXPORT"
    format     uint16   EXPORT_FORMAT
    header     uint32 length + msgpack map (uncompressed, so `head -c` shows it):
               format, tool_version, run_id, aggregate_id, events, created_by, chain
    body       one zstd frame (content size and checksum written) holding, per event,
               uint32 length + frame bytes + 32-byte chain hash, then the trailer
               uint32 length + msgpack map {events, final_hash}

A frame is msgpack {topic, version, state}: the journal mapper's stored form of the
event. The chain starts at sha256(magic ‖ format ‖ header) and each frame carries
sha256(previous hash ‖ frame bytes); the trailer repeats the last hash. Import accepts
only registered event topics (a table lookup: it never imports a module named in a
file) and decodes each event with the journal mapper, so older class versions are upcast.
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec
import zstandard
from eventsourcing.persistence import StoredEvent
from runjournal.adapters.journal import EventMapper, JournalCorrupt, JournalStore
from runjournal.adapters.journal.codec import event_type_for_topic
from runjournal.adapters.journal.sealer import note_for
from runjournal.domain.events import RunAllocated, RunEvent, SealReason
from runjournal.domain.merkle import (
    PackedLeaves,
    consistency_proof,
    root_of,
    verify_consistency,
)
from runjournal.domain.run import run_aggregate_id
from runjournal.domain.seal import origin
from runjournal.domain.signed_note import NoteError, parse_checkpoint, parse_note

if TYPE_CHECKING:
    from runjournal.adapters.signing import Signer

__all__ = [
    "EXPORT_FORMAT",
    "IMPORT_BATCH",
    "MAGIC",
    "ExportCheckpoint",
    "ExportError",
    "ExportHeader",
    "ImportConflict",
    "ImportResult",
    "NotAnExport",
    "RunExport",
    "VerificationFailed",
    "decode_export",
    "encode_export",
    "export_checkpoints",
    "export_events",
    "export_run",
    "import_checkpoints",
    "import_run",
    "import_stream",
    "verify_export",
]

MAGIC: Final = b"RJEXPORT"
EXPORT_FORMAT: Final = 1
_PREFIX = struct.Struct(">8sH")
_LEN = struct.Struct(">I")
_HASH_BYTES: Final = 32
_MAX_HEADER: Final = 64 * 1024
_MAX_FRAME: Final = 64 * 1024 * 1024
_MAX_BODY: Final = 4 * 1024 * 1024 * 1024
_ZSTD_LEVEL: Final = 9
IMPORT_BATCH: Final = 5000


class ExportError(Exception):
    """An export could not be written, read or imported (the message is one line)."""


class NotAnExport(ExportError):
    """The file is not a runjournal export, or of a format this version cannot read."""


class VerificationFailed(ExportError):
    """The file claims to be an export but is truncated, corrupt or inconsistent."""


class ImportConflict(ExportError):
    """The journal already holds other events for the exported run."""


class ExportHeader(msgspec.Struct, frozen=True, kw_only=True):
    format: int
    tool_version: str
    run_id: str
    aggregate_id: str
    events: int
    created_by: str
    chain: str = "sha256"


class _Frame(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    version: int
    state: bytes


class ExportCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A checkpoint of the run carried by its export: one of the run's seals, or the one
    made at export (`reason` "exported"), with a consistency proof (hex hashes) from its
    tree to the export's (docs/operations.md "Signed checkpoints")."""

    note: str
    size: int
    key: str | None = None
    reason: str = "terminated"
    proof: list[str] = []


class _Trailer(msgspec.Struct, frozen=True, kw_only=True):
    events: int
    final_hash: str
    # Added with a default: a format-1 file written before it reads as "none carried".
    checkpoints: list[ExportCheckpoint] = []


class RunExport(msgspec.Struct, frozen=True, kw_only=True):
    """A verified export: its header and the run's typed events, in order."""

    header: ExportHeader
    events: list[RunEvent]
    final_hash: str


class ImportResult(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    events: int
    already_imported: bool
    resumed_after: int = 0  # events of an earlier, interrupted import of the same file


_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(ExportHeader)
_frame_decoder = msgspec.msgpack.Decoder(_Frame)
_trailer_decoder = msgspec.msgpack.Decoder(_Trailer)


def frame_link(previous: bytes, frame: bytes) -> bytes:
    """The export chain's link of one frame: sha256(previous hash ‖ frame bytes), the one
    place it is computed (docs/internals.md "Export and import")."""
    return hashlib.sha256(previous + frame).digest()


def _chain_start(prefix: bytes, header: bytes) -> bytes:
    return hashlib.sha256(prefix + _LEN.pack(len(header)) + header).digest()


# --- writing -----------------------------------------------------------------------


def encode_export(
    run_id: str,
    events: Sequence[RunEvent],
    *,
    tool_version: str,
    created_by: str,
    checkpoints: Sequence[ExportCheckpoint] = (),
) -> bytes:
    """The export file's bytes for `events` (one run's, in order), carrying
    `checkpoints` as given."""
    if not events or not isinstance(events[0], RunAllocated) or events[0].run_id != run_id:
        raise ExportError(f"run {run_id!r} has no events that start with its allocation")
    mapper = EventMapper()
    header = _encoder.encode(
        ExportHeader(
            format=EXPORT_FORMAT,
            tool_version=tool_version,
            run_id=run_id,
            aggregate_id=str(run_aggregate_id(run_id)),
            events=len(events),
            created_by=created_by,
        )
    )
    prefix = _PREFIX.pack(MAGIC, EXPORT_FORMAT)
    digest = _chain_start(prefix, header)
    body: list[bytes] = []
    for event in events:
        stored = mapper.to_stored_event(event)
        frame = _encoder.encode(_Frame(stored.topic, stored.originator_version, stored.state))
        digest = frame_link(digest, frame)
        body += (_LEN.pack(len(frame)), frame, digest)
    trailer = _encoder.encode(
        _Trailer(events=len(events), final_hash=digest.hex(), checkpoints=list(checkpoints))
    )
    body += (_LEN.pack(len(trailer)), trailer)
    compressed = zstandard.ZstdCompressor(
        level=_ZSTD_LEVEL, write_checksum=True, write_content_size=True
    ).compress(b"".join(body))
    content = b"".join((prefix, _LEN.pack(len(header)), header, compressed))
    # A digest of the whole file: the chain covers the events, this covers every byte
    # (zstd has bits that do not change what decompresses), so any flipped bit is refused.
    return content + hashlib.sha256(content).digest()


def export_run(
    store: JournalStore,
    run_id: str,
    *,
    tool_version: str,
    created_by: str,
    signer: Signer | None = None,
) -> tuple[bytes, int]:
    """Read `run_id` from the journal and encode it; returns (file bytes, event count).

    Streamed in two passes over the run, holding no event list: the first measures the
    body (the zstd frame records its content size, which readers require), the second
    compresses it, so memory does not grow with the run (docs/performance.md "Reading
    commands on a large run"; the Merkle leaves, 32 bytes an event packed in one buffer,
    are kept). The bytes
    are the same format `encode_export` writes. The trailer carries the run's seals and a
    checkpoint of the exported events, signed when there is a `signer`.
    """
    count = size = 0
    leaves = PackedLeaves()
    for frame in _frames(store, run_id, leaves):
        count += 1
        size += _LEN.size + len(frame) + _HASH_BYTES
    checkpoints = _checkpoints(store, run_id, leaves, signer)
    trailer_size = len(
        _encoder.encode(_Trailer(events=count, final_hash="0" * 64, checkpoints=checkpoints))
    )
    size += _LEN.size + trailer_size
    header = _encoder.encode(
        ExportHeader(
            format=EXPORT_FORMAT,
            tool_version=tool_version,
            run_id=run_id,
            aggregate_id=str(run_aggregate_id(run_id)),
            events=count,
            created_by=created_by,
        )
    )
    prefix = _PREFIX.pack(MAGIC, EXPORT_FORMAT)
    out = io.BytesIO()
    out.write(b"".join((prefix, _LEN.pack(len(header)), header)))
    digest = _chain_start(prefix, header)
    compressor = zstandard.ZstdCompressor(
        level=_ZSTD_LEVEL, write_checksum=True, write_content_size=True
    )
    written = 0
    again = _LeafDigest()
    with compressor.stream_writer(out, size=size, closefd=False) as writer:
        for frame in _frames(store, run_id, again):
            written += 1
            digest = frame_link(digest, frame)
            writer.write(b"".join((_LEN.pack(len(frame)), frame, digest)))
        if written != count or again.digest() != leaves.digest():
            raise ExportError(f"run {run_id!r} changed while it was exported")
        trailer = _encoder.encode(
            _Trailer(events=count, final_hash=digest.hex(), checkpoints=checkpoints)
        )
        writer.write(_LEN.pack(len(trailer)) + trailer)
    content = out.getvalue()
    return content + hashlib.sha256(content).digest(), count


class _LeafDigest:
    """Takes the leaves of the second pass over a run and keeps only their digest."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def append(self, leaf: bytes) -> None:
        self._hash.update(leaf)

    def digest(self) -> bytes:
        return self._hash.digest()


class _LeafSink(Protocol):
    def append(self, leaf: bytes, /) -> None: ...


def _checkpoints(
    store: JournalStore, run_id: str, leaves: PackedLeaves, signer: Signer | None
) -> list[ExportCheckpoint]:
    """The run's seals that hold for the exported events, then the export's own."""
    carried = []
    for seal in store.seals(run_id):
        if 0 < seal.size <= len(leaves) and root_of(leaves[: seal.size]).hex() == seal.root:
            carried.append(
                ExportCheckpoint(
                    note=seal.note,
                    size=seal.size,
                    key=seal.key,
                    reason=seal.reason.value,
                    proof=[h.hex() for h in consistency_proof(seal.size, leaves)],
                )
            )
    carried.append(
        ExportCheckpoint(
            note=note_for(run_id, len(leaves), root_of(leaves), signer),
            size=len(leaves),
            key=signer.verifier.text() if signer is not None else None,
            reason=SealReason.EXPORTED.value,
        )
    )
    return carried


def _frames(store: JournalStore, run_id: str, leaves: _LeafSink) -> Iterator[bytes]:
    """The export frame of each of the run's events, in order; the first must be the
    run's allocation (as `encode_export` requires). Appends each event's Merkle leaf."""
    mapper = EventMapper()
    first = True
    for event in store.events(run_id):
        if first and (not isinstance(event, RunAllocated) or event.run_id != run_id):
            break
        first = False
        leaves.append(mapper.leaf(event))
        stored = mapper.to_stored_event(event)
        yield _encoder.encode(_Frame(stored.topic, stored.originator_version, stored.state))
    if first:
        raise ExportError(f"run {run_id!r} has no events that start with its allocation")


# --- reading -----------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, size: int, what: str) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise VerificationFailed(f"truncated: the file ends inside the {what}")
        chunk = bytes(self.data[self.pos : end])
        self.pos = end
        return chunk

    def record(self, what: str, limit: int) -> bytes:
        (size,) = _LEN.unpack(self.take(_LEN.size, what))
        if size > limit:
            raise VerificationFailed(f"corrupt: {what} of {size} bytes is larger than allowed")
        return self.take(size, what)


def _open_export(data: bytes) -> tuple[ExportHeader, bytes, bytes, memoryview]:
    """(header, prefix, header bytes, compressed body) of a file whose digest holds."""
    if len(data) < _PREFIX.size or data[: len(MAGIC)] != MAGIC:
        raise NotAnExport("not a runjournal export (no RJEXPORT magic at the start)")
    _, fmt = _PREFIX.unpack(data[: _PREFIX.size])
    if fmt != EXPORT_FORMAT:
        raise NotAnExport(
            f"export format {fmt} is not supported (this runjournal reads format {EXPORT_FORMAT})"
        )
    if len(data) < _PREFIX.size + _HASH_BYTES:
        raise VerificationFailed("truncated: no file digest")
    view = memoryview(data)
    content, file_digest = view[:-_HASH_BYTES], bytes(view[-_HASH_BYTES:])
    if hashlib.sha256(content).digest() != file_digest:
        raise VerificationFailed("corrupt or truncated: the file digest does not match")
    outer = _Reader(content)  # type: ignore[arg-type]
    prefix = outer.take(_PREFIX.size, "prefix")
    header_bytes = outer.record("header", _MAX_HEADER)
    try:
        header = _header_decoder.decode(header_bytes)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise VerificationFailed(f"corrupt header: {exc}") from None
    if header.format != fmt or header.chain != "sha256":
        raise VerificationFailed("corrupt header: format or chain does not match the file")
    if header.aggregate_id != str(run_aggregate_id(header.run_id)):
        raise VerificationFailed("corrupt header: aggregate id is not the run's")
    return header, prefix, header_bytes, content[outer.pos :]


def decode_export(data: bytes) -> RunExport:
    """Verify and decode an export file; raises `NotAnExport` or `VerificationFailed`."""
    header, prefix, header_bytes, compressed = _open_export(data)
    aggregate = run_aggregate_id(header.run_id)
    body = _decompress(bytes(compressed))
    digest = _chain_start(prefix, header_bytes)
    reader = _Reader(body)
    mapper = EventMapper()
    events: list[RunEvent] = []
    for version in range(1, header.events + 1):
        frame_bytes = reader.record(f"event frame {version}", _MAX_FRAME)
        carried = reader.take(_HASH_BYTES, f"hash of event frame {version}")
        digest = frame_link(digest, frame_bytes)
        if carried != digest:
            raise VerificationFailed(f"hash chain broken at event {version}")
        events.append(_decode_frame(mapper, frame_bytes, aggregate, version))
    trailer_bytes = reader.record("trailer", _MAX_HEADER)
    try:
        trailer = _trailer_decoder.decode(trailer_bytes)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise VerificationFailed(f"corrupt trailer: {exc}") from None
    if trailer.events != header.events or trailer.final_hash != digest.hex():
        raise VerificationFailed("the trailer does not match the events (count or final hash)")
    if reader.pos != len(body):
        raise VerificationFailed("corrupt: data after the trailer")
    first = events[0] if events else None
    if not isinstance(first, RunAllocated) or first.run_id != header.run_id:
        raise VerificationFailed(f"the events do not start with the allocation of {header.run_id}")
    return RunExport(header=header, events=events, final_hash=digest.hex())


def _decompress(compressed: bytes) -> bytes:
    try:
        size = zstandard.frame_content_size(compressed)
    except zstandard.ZstdError:
        raise VerificationFailed("truncated or corrupt: no readable zstd frame") from None
    if not 0 <= size <= _MAX_BODY:
        raise VerificationFailed("corrupt: the compressed body has no or an excessive size")
    try:
        return zstandard.ZstdDecompressor().decompress(compressed, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        text = str(exc)
        kind = "truncated" if "full frame" in text else "corrupt"
        raise VerificationFailed(f"{kind}: compressed body does not decompress ({text})") from None


def _decode_frame(mapper: EventMapper, data: bytes, aggregate: Any, version: int) -> RunEvent:
    try:
        frame = _frame_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise VerificationFailed(f"event frame {version} does not decode: {exc}") from None
    if frame.version != version:
        raise VerificationFailed(f"event frame {version} carries version {frame.version}")
    if event_type_for_topic(frame.topic) is None:
        # Never resolve a topic from a file: it would import whatever module it names.
        raise VerificationFailed(f"event {version} has an unknown type {frame.topic[:80]!r}")
    try:
        event = mapper.to_domain_event(StoredEvent(aggregate, version, frame.topic, frame.state))
    except JournalCorrupt as exc:
        raise VerificationFailed(str(exc)) from None
    return event  # type: ignore[no-any-return]


# --- importing ---------------------------------------------------------------------


def import_run(
    store: JournalStore, export: RunExport, *, batch: int = IMPORT_BATCH
) -> ImportResult:
    """Append the exported run; a second import of the same events changes nothing.

    Events are appended in transactions of `batch` (one huge insert stalls the PostgreSQL
    recorder), so an interrupted import can leave a prefix of the run: importing the same
    file again appends the rest. Any other events already there for the run are refused.
    """
    run_id = export.header.run_id
    existing = list(store.events(run_id))
    if existing != export.events[: len(existing)]:
        raise ImportConflict(
            f"run {run_id} is already in the journal with other events "
            f"({len(existing)} there, {len(export.events)} in the file)"
        )
    if len(existing) == len(export.events):
        return ImportResult(
            run_id=run_id, events=len(existing), already_imported=True, resumed_after=0
        )
    store.append_events(run_id, export.events[len(existing) :], batch=batch)
    return ImportResult(
        run_id=run_id,
        events=len(export.events),
        already_imported=False,
        resumed_after=len(existing),
    )


# --- streaming import ----------------------------------------------------------------


class _BodyStream:
    """The decompressed body read record by record, never whole."""

    def __init__(self, compressed: memoryview) -> None:
        try:
            size = zstandard.frame_content_size(compressed)
        except zstandard.ZstdError:
            raise VerificationFailed("truncated or corrupt: no readable zstd frame") from None
        if not 0 <= size <= _MAX_BODY:
            raise VerificationFailed("corrupt: the compressed body has no or an excessive size")
        self.size = size
        self.pos = 0
        self._reader = zstandard.ZstdDecompressor().stream_reader(
            compressed, read_across_frames=False
        )

    def take(self, size: int, what: str) -> bytes:
        try:
            # Almost always one read: a record lies inside zstd's output buffer.
            parts = [self._reader.read(size)]
            left = size - len(parts[0])
            while left:
                if not parts[-1]:
                    raise VerificationFailed(f"truncated: the file ends inside the {what}")
                parts.append(self._reader.read(left))
                left -= len(parts[-1])
        except zstandard.ZstdError as exc:
            raise VerificationFailed(
                f"corrupt: compressed body does not decompress ({exc})"
            ) from None
        self.pos += size
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def record(self, what: str, limit: int, *, extra: int = 0) -> bytes:
        """A length-prefixed record, and the `extra` bytes that follow it."""
        (size,) = _LEN.unpack(self.take(_LEN.size, what))
        if size > limit:
            raise VerificationFailed(f"corrupt: {what} of {size} bytes is larger than allowed")
        return self.take(size + extra, what)

    def at_end(self) -> bool:
        try:
            return self.pos == self.size and not self._reader.read(1)
        except zstandard.ZstdError:
            return False


def _records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(version, frame bytes) of each event, the hash chain and trailer checked as read."""
    header, prefix, header_bytes, compressed = _open_export(data)
    body = _BodyStream(compressed)
    digest = _chain_start(prefix, header_bytes)
    for version in range(1, header.events + 1):
        # The frame and the hash after it, in one read.
        framed = body.record(f"event frame {version}", _MAX_FRAME, extra=_HASH_BYTES)
        frame_bytes, carried = framed[:-_HASH_BYTES], framed[-_HASH_BYTES:]
        digest = frame_link(digest, frame_bytes)
        if carried != digest:
            raise VerificationFailed(f"hash chain broken at event {version}")
        yield version, frame_bytes
    trailer_bytes = body.record("trailer", _MAX_HEADER)
    try:
        trailer = _trailer_decoder.decode(trailer_bytes)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise VerificationFailed(f"corrupt trailer: {exc}") from None
    if trailer.events != header.events or trailer.final_hash != digest.hex():
        raise VerificationFailed("the trailer does not match the events (count or final hash)")
    if not body.at_end():
        raise VerificationFailed("corrupt: data after the trailer")


def verify_export(data: bytes) -> ExportHeader:
    """Check a whole export without holding its events: digest, chain, trailer, topics.

    Each frame's topic must be a registered event type and its class version one this
    runjournal reads; the first event (decoded) must be the run's allocation. Decoding
    the rest is left to `export_events`, so a file refused here leaves the journal as
    it was (docs/internals.md "Import").
    """
    header = _open_export(data)[0]
    aggregate = run_aggregate_id(header.run_id)
    mapper = EventMapper()
    for version, frame_bytes in _records(data):
        try:
            frame = _frame_decoder.decode(frame_bytes)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise VerificationFailed(f"event frame {version} does not decode: {exc}") from None
        if frame.version != version:
            raise VerificationFailed(f"event frame {version} carries version {frame.version}")
        cls = event_type_for_topic(frame.topic)
        if cls is None:
            raise VerificationFailed(f"event {version} has an unknown type {frame.topic[:80]!r}")
        if version == 1:
            first = _decode_frame(mapper, frame_bytes, aggregate, 1)
            if not isinstance(first, RunAllocated) or first.run_id != header.run_id:
                raise VerificationFailed(
                    f"the events do not start with the allocation of {header.run_id}"
                )
        elif _class_version(frame.state) > int(getattr(cls, "class_version", 1)):
            raise VerificationFailed(
                f"event {version} was written by a newer {cls.__name__}: upgrade runjournal"
            )
    if header.events == 0:
        raise VerificationFailed(f"the events do not start with the allocation of {header.run_id}")
    return header


def export_checkpoints(data: bytes) -> list[ExportCheckpoint]:
    """The checkpoints an export carries, each checked against its events: the root of
    its first `size` events and the consistency proof to the whole export. Raises
    `VerificationFailed` naming the first that does not hold (a file whose events were
    rewritten after they were sealed)."""
    header = _open_export(data)[0]
    mapper = EventMapper()
    leaves = [mapper.leaf(event) for event in export_events(data)]
    trailer_bytes = _trailer_bytes(data)
    try:
        carried = _trailer_decoder.decode(trailer_bytes).checkpoints
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise VerificationFailed(f"corrupt trailer: {exc}") from None
    root = root_of(leaves)
    for number, checkpoint in enumerate(carried, 1):
        try:
            text = parse_note(checkpoint.note)[0] if "\n\n" in checkpoint.note else checkpoint.note
            claimed = parse_checkpoint(text)
            proof = [bytes.fromhex(h) for h in checkpoint.proof]
        except (NoteError, ValueError) as exc:
            raise VerificationFailed(f"checkpoint {number} does not parse: {exc}") from None
        if (
            claimed.origin != origin(header.run_id)
            or claimed.size != checkpoint.size
            or not 0 < claimed.size <= len(leaves)
            or root_of(leaves[: claimed.size]) != claimed.root
            or (
                claimed.size < len(leaves)
                and not verify_consistency(claimed.size, len(leaves), claimed.root, root, proof)
            )
        ):
            raise VerificationFailed(
                f"checkpoint {number} ({checkpoint.reason}, {checkpoint.size} events) does not "
                "hold for the exported events: they were changed after it was made"
            )
    return carried


def import_checkpoints(
    store: JournalStore, run_id: str, checkpoints: Sequence[ExportCheckpoint]
) -> int:
    """Record the checkpoints an export carried (checked by `export_checkpoints`) as the
    imported run's seals, those the journal does not hold yet; returns how many."""
    held = {seal.note for seal in store.seals(run_id)}
    added = 0
    for checkpoint in checkpoints:
        if checkpoint.note in held:
            continue
        text = parse_note(checkpoint.note)[0] if "\n\n" in checkpoint.note else checkpoint.note
        reason = (
            SealReason(checkpoint.reason)
            if checkpoint.reason in SealReason.__members__.values()
            else SealReason.EXPORTED
        )
        store.add_seal(
            run_id,
            size=checkpoint.size,
            root=parse_checkpoint(text).root.hex(),
            note=checkpoint.note,
            key=checkpoint.key,
            reason=reason,
        )
        held.add(checkpoint.note)
        added += 1
    return added


def _trailer_bytes(data: bytes) -> bytes:
    """The trailer record of a verified export (read to the end of the body)."""
    header, _, _, compressed = _open_export(data)
    body = _BodyStream(compressed)
    for version in range(1, header.events + 1):
        body.record(f"event frame {version}", _MAX_FRAME, extra=_HASH_BYTES)
    return body.record("trailer", _MAX_HEADER)


def _class_version(state: bytes) -> int:
    if not state:
        raise VerificationFailed("an event frame has an empty state")
    return int.from_bytes(state[1:3], "big") if state[0] & 0x10 else 1


def export_events(data: bytes) -> Iterator[RunEvent]:
    """The events of an export (verified with `verify_export` first), decoded one by one."""
    header = _open_export(data)[0]
    aggregate = run_aggregate_id(header.run_id)
    mapper = EventMapper()
    for version, frame_bytes in _records(data):
        yield _decode_frame(mapper, frame_bytes, aggregate, version)


def import_stream(
    store: JournalStore,
    header: ExportHeader,
    events: Callable[[], Iterator[RunEvent]],
    *,
    batch: int = IMPORT_BATCH,
) -> ImportResult:
    """`import_run` for a verified export read as a stream (`events()` starts it afresh).

    The run's stored events are compared with the file's first ones as both are read,
    then the rest is appended in transactions of `batch`: memory holds one batch, not
    the run (docs/performance.md "Reading commands on a large run").
    """
    run_id = header.run_id
    incoming = events()
    existing = 0
    for stored in store.events(run_id):
        if next(incoming, None) != stored:
            raise ImportConflict(
                f"run {run_id} is already in the journal with other events "
                f"({store.last_version(run_id)} there, {header.events} in the file)"
            )
        existing += 1
    if existing == header.events:
        return ImportResult(run_id=run_id, events=existing, already_imported=True, resumed_after=0)
    store.append_stream(run_id, incoming, batch=batch)
    return ImportResult(
        run_id=run_id, events=header.events, already_imported=False, resumed_after=existing
    )
