"""The journal's storage format: `EventMapper` between `RunEvent` Structs and stored rows.

The state bytes are one format byte (msgpack, or zstd-compressed msgpack when large),
an optional class version, then the event's fields minus the two origin fields; a
delta row holds a run of per-lane events, each after the first of its type as the fields
that changed (delta.py); packed rows of alike decisions (pack.py) are still read.
Decoding is typed and upcasts old class versions. See docs/internals.md "Storage format",
"Delta rows", "Packed rows" and "Decoding and upcasting".
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from hashlib import sha256
from typing import Any, Final
from uuid import UUID

import msgspec
import zstandard
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic
from runjournal.adapters.journal.chain import chain_link, type_part
from runjournal.adapters.journal.delta import DELTA_TOPIC, decode_items, encode_items, groups
from runjournal.adapters.journal.journal_errors import JournalCorrupt, describe, one_line
from runjournal.adapters.journal.pack import unpack
from runjournal.domain.events import EVENT_TYPES, MAINTENANCE_EVENT_TYPES, RunEvent, StageDecided

__all__ = [
    "COMPRESS_THRESHOLD",
    "FORMAT_MSGPACK",
    "FORMAT_ZSTD_MSGPACK",
    "EventMapper",
    "event_type_for_topic",
    "register_event_type",
]


# --- storage format --------------------------------------------------------------

FORMAT_MSGPACK: Final = 0x01
FORMAT_ZSTD_MSGPACK: Final = 0x02
_FLAG_CLASS_VERSION: Final = 0x10  # header is followed by class_version as uint16 BE
_FLAG_PACKED: Final = 0x20  # then by the row's event count as uint16 BE (pack.py)
_FLAG_DELTA: Final = 0x40  # a delta row (delta.py): its event count follows, as above
_COUNTED: Final = _FLAG_PACKED | _FLAG_DELTA
_KNOWN_BITS: Final = 0x0F | _FLAG_CLASS_VERSION | _COUNTED
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

    __slots__ = ("cls", "decoder", "headers", "topic", "type_part", "version")

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
        self.type_part = type_part(self.topic, self.version)


def _map_header(count: int) -> bytes:
    if count < 16:
        return bytes((0x80 | count,))
    if count < 0x10000:
        return b"\xde" + count.to_bytes(2, "big")
    return b"\xdf" + count.to_bytes(4, "big")


def _with_origin(body: bytes, origin: bytes) -> bytes:
    """Splice the two origin entries into the stored msgpack map (they come last, so win)."""
    count, skip = _map_count(body)
    return b"".join((_map_header(count + 2), memoryview(body)[skip:], origin))


_LINK_TAIL: Final = msgspec.msgpack.encode("~chain") + b"\xc4\x20"
"""The last map entry of a chained row: key `~chain` (no field can be named so), bin 32."""
_LINK_SIZE: Final = 32


def _map_count(body: bytes) -> tuple[int, int]:
    """(entries, header length) of a msgpack map; JournalCorrupt for anything else."""
    head = body[0] if body else -1
    if 0x80 <= head <= 0x8F:
        return head & 0x0F, 1
    if head == 0xDE:
        return int.from_bytes(body[1:3], "big"), 3
    if head == 0xDF:
        return int.from_bytes(body[1:5], "big"), 5
    raise JournalCorrupt("stored state is not a msgpack map")


def _with_link(body: bytes, link: bytes) -> bytes:
    return _with_entry(body, _LINK_TAIL + link)


def _with_entry(body: bytes, entry: bytes) -> bytes:
    """The map with one more entry (its key and value bytes) appended last."""
    head = body[0] if body else -1
    if 0x80 <= head < 0x8F:  # fixmap with room for one more entry: the common case
        return bytes((head + 1,)) + body[1:] + entry
    count, skip = _map_count(body)
    return b"".join((_map_header(count + 1), memoryview(body)[skip:], entry))


def _without_link(body: bytes) -> tuple[bytes, bytes | None]:
    """Split a chained row's map into the map as it was hashed and the link."""
    tail = len(_LINK_TAIL) + _LINK_SIZE
    if len(body) <= tail or body[-tail:-_LINK_SIZE] != _LINK_TAIL:
        return body, None
    count, skip = _map_count(body)
    if count < 1:
        return body, None
    link = body[-_LINK_SIZE:]
    return b"".join((_map_header(count - 1), memoryview(body)[skip:-tail])), link


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
        cls = event_type_for_topic(topic)
        if cls is None:
            # Never resolve (import) a topic read from the journal: it may name any module.
            raise JournalCorrupt(f"unknown event type {_shown_topic(topic)}: {_NEVER_IMPORTED}")
        codec = self.codec_for(cls)
        self._by_topic[topic] = codec  # also under an alias topic
        return codec

    # -- write ----------------------------------------------------------------------

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        """The row of an event without a chain link (exports, and runs recorded unchained)."""
        codec = self.codec_for(type(domain_event))
        return self._stored(domain_event, codec, self._body(domain_event))

    def leaf(self, event: RunEvent) -> bytes:
        """The event's leaf in its run's Merkle tree: sha256(0x00 ‖ entry), the entry as
        the chain defines it (docs/internals.md "Merkle tree and signed checkpoints"), so
        the tree does not depend on how events were packed into rows."""
        return sha256(
            b"\x00"
            + event.originator_id.bytes
            + event.originator_version.to_bytes(8, "big")
            + self.codec_for(type(event)).type_part
            + self._body(event)
        ).digest()

    def to_chained_stored_event(
        self, event: RunEvent, previous: bytes
    ) -> tuple[StoredEvent, bytes]:
        """The row of an event linked to `previous`, and the event's own link.

        See docs/internals.md "The journal's hash chain" for what the link covers.
        """
        codec = self.codec_for(type(event))
        body = self._body(event)
        # the class's type part computed once (its codec), not per event
        digest = chain_link(
            previous, event.originator_id, event.originator_version, codec.type_part, body
        )
        return self._stored(event, codec, _with_link(body, digest)), digest

    def to_stored_rows(
        self, events: Sequence[RunEvent], previous: bytes | None
    ) -> tuple[list[StoredEvent], bytes | None]:
        """The rows of consecutive events of one run, per-lane events as delta rows.

        Each row is chained to `previous` (None: the run is recorded unchained); returns
        the rows and the last link.
        """
        rows: list[StoredEvent] = []
        for group in groups(events):
            if len(group) == 1:
                if previous is None:
                    rows.append(self.to_stored_event(group[0]))
                else:
                    row, previous = self.to_chained_stored_event(group[0], previous)
                    rows.append(row)
                continue
            row, link = self._delta_row(group, previous)
            rows.append(row)
            previous = link if previous is not None else None
        return rows, previous

    def _delta_row(
        self, events: Sequence[RunEvent], previous: bytes | None
    ) -> tuple[StoredEvent, bytes | None]:
        """One row for consecutive per-lane events (delta.py), linked as one entry."""
        last = events[-1]
        body = b"\x82" + encode_items(events, self._body)  # a map of ~types and ~rows
        link = None
        if previous is not None:
            link = chain_link(
                previous, last.originator_id, last.originator_version, _DELTA_TYPE_PART, body
            )
            body = _with_link(body, link)
        fmt, body = self._compressed(body)
        head = bytes((fmt | _FLAG_DELTA,)) + len(events).to_bytes(2, "big")
        row = StoredEvent(
            originator_id=last.originator_id,
            originator_version=last.originator_version,
            topic=DELTA_TOPIC,
            state=head + body,
        )
        return row, link

    def _body(self, event: RunEvent) -> bytes:
        state = msgspec.structs.asdict(event)
        del state["originator_id"], state["originator_version"]
        return self._encoder.encode(state)

    def _compressed(self, body: bytes) -> tuple[int, bytes]:
        """(format, state body): zstd over `COMPRESS_THRESHOLD` bytes, when it is smaller."""
        if len(body) > COMPRESS_THRESHOLD:
            with self._lock:
                packed = self._compressor.compress(body)
            if len(packed) < len(body):
                return FORMAT_ZSTD_MSGPACK, packed
        return FORMAT_MSGPACK, body

    def _stored(self, event: RunEvent, codec: _ClassCodec, body: bytes) -> StoredEvent:
        fmt, body = self._compressed(body)
        return StoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=codec.topic,
            state=codec.headers[fmt] + body,
        )

    # -- read -----------------------------------------------------------------------

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """The event of a row that holds one (a packed row: `to_domain_events`)."""
        events = self.to_domain_events(stored_event)
        if len(events) != 1:
            raise JournalCorrupt(
                one_line(f"{_where(stored_event)} holds {len(events)} events, not one")
            )
        return events[0]

    def to_domain_events(self, stored_event: StoredEvent) -> list[RunEvent]:
        """The events of one row, in version order: one, or the events of a packed row."""
        try:
            if stored_event.topic == DELTA_TOPIC:
                return self._decode_delta(stored_event)
            return self._decode(self._codec_for_topic(stored_event.topic), stored_event)
        except JournalCorrupt as exc:
            raise JournalCorrupt(one_line(f"{_where(stored_event)}: {exc}")) from exc
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
                one_line(f"{_where(stored_event)} does not decode: {describe(exc)}")
            ) from exc

    def split_state(self, state: bytes) -> tuple[int, bytes, bytes | None]:
        """(class_version, the msgpack map without its chain link, the link or None)."""
        version, _, body, link = self.split_row(state)
        return version, body, link

    def event_count(self, state: bytes) -> int:
        """How many events a row's state holds (1 unless packed); from the header only."""
        head = state[0] if state else 0
        if not head & _COUNTED:
            return 1
        at = 3 if head & _FLAG_CLASS_VERSION else 1
        return int.from_bytes(state[at : at + 2], "big")

    def split_row(self, state: bytes) -> tuple[int, int, bytes, bytes | None]:
        """(class_version, events in the row, the map without its chain link, the link)."""
        head = state[0]
        fmt = head & 0x0F
        if head & ~_KNOWN_BITS:
            raise JournalCorrupt(f"unknown state format 0x{head:02x}")
        if head & _FLAG_CLASS_VERSION:
            version, offset = int.from_bytes(state[1:3], "big"), 3
        else:
            version, offset = 1, 1
        count = 1
        if head & _COUNTED:
            count, offset = int.from_bytes(state[offset : offset + 2], "big"), offset + 2
            if count < 2:
                raise JournalCorrupt(f"a packed row of {count} event(s)")
        body = bytes(state[offset:])
        if fmt == FORMAT_ZSTD_MSGPACK:
            size = zstandard.frame_content_size(body)
            if not 0 <= size <= _MAX_STATE_BYTES:
                raise JournalCorrupt(f"compressed state of unknown or excessive size ({size})")
            with self._lock:
                body = self._decompressor.decompress(body)
        elif fmt != FORMAT_MSGPACK:
            raise JournalCorrupt(f"unknown state format 0x{head:02x}")
        body, link = _without_link(body)
        return version, count, body, link

    def _decode_delta(self, stored: StoredEvent) -> list[RunEvent]:
        if not stored.state or not stored.state[0] & _FLAG_DELTA:
            raise JournalCorrupt("a delta row without its header flag")
        _, count, body, _ = self.split_row(stored.state)
        first = stored.originator_version - count + 1
        if first < 1:
            raise JournalCorrupt(
                f"a row of {count} events ending at version {stored.originator_version}"
            )

        def cls_for(topic: str) -> type[RunEvent]:
            return self._codec_for_topic(topic).cls

        def full(topic: str, version: int, item: bytes, at: int) -> RunEvent:
            return self._decode_one(self._codec_for_topic(topic), stored, version, item, at)

        def upcast(cls: type[RunEvent], version: int, data: dict[str, Any], at: int) -> RunEvent:
            return self._upcast(self.codec_for(cls), stored, version, data, at)

        return decode_items(body, count, first, cls_for, full, upcast)

    def _decode(self, codec: _ClassCodec, stored: StoredEvent) -> list[RunEvent]:
        version, count, body, _ = self.split_row(stored.state)
        if stored.state[0] & _FLAG_DELTA:
            raise JournalCorrupt(f"a delta row stored under {_shown_topic(stored.topic)}")
        if count == 1:
            return [self._decode_one(codec, stored, version, body, stored.originator_version)]
        if codec.cls is not StageDecided:
            raise JournalCorrupt(f"{codec.cls.__name__} rows are never packed")
        first = stored.originator_version - count + 1
        if first < 1:
            raise JournalCorrupt(
                f"a packed row of {count} events ending at version {first + count - 1}"
            )
        template = self._decode_one(codec, stored, version, body, first)
        return unpack(template, body, count)  # type: ignore[arg-type]

    def _decode_one(
        self, codec: _ClassCodec, stored: StoredEvent, version: int, body: bytes, at: int
    ) -> RunEvent:
        if version == codec.version:
            origin = self._origin(stored.originator_id, at)
            return codec.decoder.decode(_with_origin(body, origin))
        if version > codec.version:
            raise JournalCorrupt(
                f"written by a newer {codec.cls.__name__} (class_version {version} > "
                f"{codec.version}): upgrade runjournal to read it"
            )
        data = self._generic.decode(body)
        if not isinstance(data, dict):
            raise JournalCorrupt("stored state is not a map")
        return self._upcast(codec, stored, version, data, at)

    def _upcast(
        self, codec: _ClassCodec, stored: StoredEvent, version: int, data: dict[str, Any], at: int
    ) -> RunEvent:
        """The event from its map as written by an older class version (or with fields
        the class no longer declares)."""
        if version > codec.version:
            raise JournalCorrupt(
                f"written by a newer {codec.cls.__name__} (class_version {version} > "
                f"{codec.version}): upgrade runjournal to read it"
            )
        for v in range(version, codec.version):
            upcast = getattr(codec.cls, f"upcast_v{v}_v{v + 1}", None)
            if upcast is None:
                raise JournalCorrupt(f"{codec.cls.__name__} has no upcast_v{v}_v{v + 1}")
            result = upcast(data)
            if result is not None:
                data = result
        data.pop("~pack", None)
        data["originator_id"] = stored.originator_id
        data["originator_version"] = at
        return msgspec.convert(data, codec.cls)

    def _origin(self, originator_id: Any, originator_version: int) -> bytes:
        cached_id, id_part = self._origin_cache
        if cached_id != originator_id:
            id_part = _ORIGINATOR_ID_KEY + self._encoder.encode(str(originator_id))
            self._origin_cache = (originator_id, id_part)
        return id_part + _ORIGINATOR_VERSION_KEY + self._encoder.encode(originator_version)


_DELTA_TYPE_PART: Final = type_part(DELTA_TOPIC, 1)


def _where(stored: StoredEvent) -> str:
    cls = event_type_for_topic(stored.topic)
    kind = f" ({cls.__name__})" if cls is not None else ""
    return f"event {stored.originator_version} of aggregate {stored.originator_id}{kind}"


def _shown_topic(topic: str) -> str:
    return repr(topic if len(topic) <= 80 else topic[:80] + "…")


# --- the event types a journal may hold --------------------------------------------

_NEVER_IMPORTED: Final = "not a runjournal event (a topic read from a journal is never imported)"
_CANONICAL_MODULE: Final = "runjournal.domain.events"
_EVENT_TYPES_BY_TOPIC: dict[str, type[RunEvent]] = {}


def register_event_type(cls: type[RunEvent]) -> None:
    """Let journals hold `cls` (decoding looks topics up here and imports nothing).

    Every class of `EVENT_TYPES` is registered, under its topic and under the canonical
    `runjournal.domain.events:<Name>`, so rows stay readable if a class moves.
    """
    if not (isinstance(cls, type) and issubclass(cls, RunEvent)):
        raise TypeError(f"not a run event class: {cls!r}")
    _EVENT_TYPES_BY_TOPIC[get_topic(cls)] = cls
    _EVENT_TYPES_BY_TOPIC.setdefault(f"{_CANONICAL_MODULE}:{cls.__name__}", cls)


def event_type_for_topic(topic: str) -> type[RunEvent] | None:
    """The registered event class stored under `topic`, or None: a table lookup only."""
    return _EVENT_TYPES_BY_TOPIC.get(topic)


for _cls in (*EVENT_TYPES, *MAINTENANCE_EVENT_TYPES):
    register_event_type(_cls)
