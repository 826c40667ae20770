"""Delta rows: a run of consecutive per-lane events of mixed types stored as one row.

A resume of one-paragraph documents records, per lane, a `ChunkPlanResolved`, a
`LaneResolved`, three `StageDecided`, an `ArtifactGenerated` and an `OutputWritten`,
which differ from the previous lane's events of the same types in a few fields (the
lane, its digests, the timestamp). One row per event costs a full map and SQLite's row
overhead each; a delta row stores the first event of each type in full and every
further one as the fields that differ from the previous event of its type in the row
(docs/internals.md "Delta rows"). Reading gives back exactly the events written:
`msgspec.structs.replace` of the previous event with the decoded fields.

In a changed field, a top-level string of at least `_MIN_SHARED` characters that an
earlier changed field of the row already held is stored as a 2-byte reference (a lane's
name, a chunk id that is also an extract's input, an artifact's digest that is also its
output's), a new one as its bytes (a lowercase 64-hex digest as its 32 bytes), a
timestamp as microseconds after the previous event's. These are msgpack extension
values: only they add to the row's strings, so the reader never has to guess a type.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import msgspec
from eventsourcing.utils import get_topic
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWritten,
    ChunkPlanResolved,
    LaneResolved,
    LaneReused,
    OutputWritten,
    RunEvent,
    StageDecided,
    StageExecuted,
)
from runjournal.domain.identity import raw_sha256

__all__ = ["DELTA_TOPIC", "MAX_ROW", "PACKABLE", "decode_items", "encode_items", "groups"]

DELTA_TOPIC: Final = "runjournal:delta-row"
"""The stored topic of a delta row: no event class has it, and it names no module."""
ROWS_KEY: Final = msgspec.msgpack.encode("~rows")
TYPES_KEY: Final = msgspec.msgpack.encode("~types")
MAX_ROW: Final = 4096
"""At most this many events in one row (the count is a uint16; rows stay small)."""
PACKABLE: Final[frozenset[type[RunEvent]]] = frozenset(
    (
        ChunkPlanResolved,
        LaneResolved,
        StageDecided,
        StageExecuted,
        CheckpointWritten,
        ArtifactGenerated,
        OutputWritten,
        LaneReused,  # a fully reused lane's summary (docs/internals.md "Reuse summaries")
    )
)
"""The per-lane and per-stage events, which repeat with few changes; none has an `Any`
field (whose unchanged-value test would be ambiguous, 1 == True)."""

_REF: Final = 1  # a string an earlier item of the row holds: uint16 index
_HEX: Final = 2  # a lowercase 64-hex string: its 32 bytes
_STEP: Final = 3  # a timestamp: signed microseconds after the previous event's
_ODD: Final = 4  # a short string UTF-8 cannot hold (lone surrogates): surrogatepass bytes
_NEW: Final = 5  # a string an item may refer to later: its UTF-8 (surrogatepass) bytes
_MIN_SHARED: Final = 8  # shorter strings are stored as they are (a reference is 4 bytes)
_MAX_SHARED: Final = 0xFFFF
_ORIGIN: Final = ("originator_id", "originator_version")
_ONE_US: Final = timedelta(microseconds=1)
_PLAIN: Final = (str, int, bool, str | None)  # decoded as msgpack gives them

_encoder = msgspec.msgpack.Encoder()
_generic = msgspec.msgpack.Decoder()
_Ext = msgspec.msgpack.Ext


def groups(events: Sequence[RunEvent]) -> Iterator[Sequence[RunEvent]]:
    """Consecutive events split into delta rows (runs of packable events with contiguous
    versions) and single events, in order."""
    start = 0
    for i, event in enumerate(events):
        if (
            i > start
            and type(event) in PACKABLE
            and type(events[i - 1]) in PACKABLE
            and i - start < MAX_ROW
            and event.originator_version == events[i - 1].originator_version + 1
        ):
            continue
        if i > start:
            yield events[start:i]
        start = i
    if start < len(events):
        yield events[start:]


def _names(cls: type[RunEvent]) -> tuple[str, ...]:
    return tuple(f for f in cls.__struct_fields__ if f not in _ORIGIN)


_GETTERS: dict[type, Callable[[RunEvent], tuple[Any, ...]]] = {}


def _getter(cls: type[RunEvent]) -> Callable[[RunEvent], tuple[Any, ...]]:
    """The event's stored fields as one tuple (`timestamp` first), built once per class."""
    getter = _GETTERS.get(cls)
    if getter is None:
        names = _names(cls)
        assert names[0] == "timestamp" and len(names) > 1
        getter = _GETTERS[cls] = operator.attrgetter(*names)
    return getter


class _Strings:
    """The row's shared strings, in the order both the writer and the reader meet them."""

    __slots__ = ("index", "values")

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def note(self, value: Any) -> None:
        if (
            isinstance(value, str)
            and len(value) >= _MIN_SHARED
            and value not in self.index
            and len(self.values) <= _MAX_SHARED
        ):
            self.index[value] = len(self.values)
            self.values.append(value)


def _stored(value: Any, strings: _Strings) -> Any:
    """A top-level value as an item stores it (a reference, 32 bytes, or itself)."""
    if not isinstance(value, str):
        return value
    if len(value) >= _MIN_SHARED:
        at = strings.index.get(value)
        if at is not None:
            return _Ext(_REF, at.to_bytes(2, "big"))
        strings.note(value)
        raw = raw_sha256(value) if type(value) is str else None
        if raw is not None:
            return _Ext(_HEX, raw)
        return _Ext(_NEW, value.encode("utf-8", "surrogatepass"))
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _Ext(_ODD, value.encode("utf-8", "surrogatepass"))
    return value


def _step(now: datetime, before: datetime) -> int | None:
    """Microseconds from `before` to `now`, when both are fixed-offset aware times (the
    reader adds them to the instant it decoded, so the instant is exact)."""
    if isinstance(now.tzinfo, timezone) and isinstance(before.tzinfo, timezone):
        return (now - before) // _ONE_US
    return None


def encode_items(events: Sequence[RunEvent], body: Callable[[RunEvent], bytes]) -> bytes:
    """The `~types` and `~rows` map entries of a delta row (key and value bytes).

    An item is `[type, map]` (the event's full map, as a single row stores it) for the
    first event of its type, else `[type, mask, *values]`: bit i of the mask for each
    field that differs from the previous event of the type, its value following.
    """
    types: list[tuple[str, int]] = []
    slot: dict[type, int] = {}
    previous: dict[int, tuple[Any, ...]] = {}
    strings = _Strings()
    items: list[Any] = []
    last_time: datetime | None = None
    for event in events:
        cls = type(event)
        t = slot.get(cls)
        if t is None:
            t = slot[cls] = len(types)
            types.append((get_topic(cls), int(getattr(cls, "class_version", 1))))
        now = _getter(cls)(event)
        before = previous.get(t)
        previous[t] = now
        if before is None:
            items.append((t, body(event)))
        else:
            mask, values = 0, []
            value = now[0]  # the timestamp
            if value is not before[0] and value != before[0]:
                mask = 1
                step = _step(value, last_time) if last_time is not None else None
                if step is None:
                    values.append(value)
                else:
                    size = (step.bit_length() + 8) // 8
                    values.append(_Ext(_STEP, step.to_bytes(size, "big", signed=True)))
            for i in range(1, len(now)):
                value, old = now[i], before[i]
                if value is old or (type(value) is type(old) and value == old):
                    continue
                mask |= 1 << i
                values.append(_stored(value, strings) if isinstance(value, str) else value)
            items.append((t, mask, *values))
        last_time = event.timestamp
    return b"".join(
        (TYPES_KEY, _encoder.encode(types), ROWS_KEY, _encoder.encode(items)),
    )


class _Row(msgspec.Struct):
    types: list[tuple[str, int]] = msgspec.field(name="~types")
    rows: list[list[Any]] = msgspec.field(name="~rows")


_row_decoder = msgspec.msgpack.Decoder(_Row)

FullDecoder = Callable[[str, int, bytes, int], RunEvent]
"""(topic, class_version, map bytes, version in the run) -> the event (typed, upcast)."""


class _Kind:
    """How to read one type's items: its fields as stored, and a converter for each
    (None: the value is used as msgpack gives it). Built once per class, version and
    field list (`_kind`)."""

    __slots__ = ("cls", "convert", "fast", "names")

    def __init__(self, cls: type[RunEvent], version: int, names: tuple[str, ...]) -> None:
        current = {f.name: f for f in msgspec.structs.fields(cls) if f.name not in _ORIGIN}
        self.cls, self.names = cls, names
        self.fast = version == int(getattr(cls, "class_version", 1)) and all(
            n in current for n in names
        )
        self.convert: tuple[Callable[[Any], Any] | None, ...] = tuple(
            None if not self.fast or current[n].type in _PLAIN else _converter(current[n].type)
            for n in names
        )


def _converter(kind: Any) -> Callable[[Any], Any]:
    """The typed value of a msgpack value: an enum by a table lookup, else msgspec's."""
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        members = kind._value2member_map_
        return lambda value: members.get(value) or msgspec.convert(value, kind)
    if isinstance(kind, type):  # a datetime from a step is one already
        return lambda value: value if type(value) is kind else msgspec.convert(value, kind)
    return lambda value: msgspec.convert(value, kind)


_KINDS: dict[tuple[type, int, tuple[str, ...]], _Kind] = {}


def _kind(cls: type[RunEvent], version: int, names: tuple[str, ...]) -> _Kind:
    kind = _KINDS.get((cls, version, names))
    if kind is None:
        kind = _KINDS[cls, version, names] = _Kind(cls, version, names)
    return kind


def _value(raw: msgspec.msgpack.Ext, strings: _Strings, last_time: datetime | None) -> Any:
    """The value an extension stands for (delta.py's module docstring)."""
    if raw.code == _REF:
        return strings.values[int.from_bytes(raw.data, "big")]
    if raw.code == _HEX and len(raw.data) == 32:
        value = raw.data.hex()
        strings.note(value)
        return value
    if raw.code == _NEW:
        value = raw.data.decode("utf-8", "surrogatepass")
        strings.note(value)
        return value
    if raw.code == _ODD:
        return raw.data.decode("utf-8", "surrogatepass")
    if raw.code == _STEP and last_time is not None:
        return last_time + timedelta(microseconds=int.from_bytes(raw.data, "big", signed=True))
    raise ValueError(f"a delta row holds an unknown value (extension {raw.code})")


def decode_items(
    body: bytes,
    count: int,
    first: int,
    cls_for: Callable[[str], type[RunEvent]],
    full: FullDecoder,
    upcast: Callable[[type[RunEvent], int, dict[str, Any], int], RunEvent],
) -> list[RunEvent]:
    """The `count` events of a delta row whose first event is version `first` in its run.

    `full` decodes a first event's map; `upcast` builds an event of an older class
    version (or with fields no longer declared) from its whole map.
    """
    row = _row_decoder.decode(body)
    if len(row.rows) != count:
        raise ValueError(f"a delta row of {count} events holds {len(row.rows)}")
    kinds: list[_Kind | None] = [None] * len(row.types)
    raws: dict[int, dict[str, Any]] = {}  # the previous event's map, for the slow path
    previous: dict[int, RunEvent] = {}
    strings = _Strings()
    events: list[RunEvent] = []
    replace = msgspec.structs.replace
    last_time: datetime | None = None
    for at, item in enumerate(row.rows, start=first):
        t = item[0]
        topic, version = row.types[t]
        if len(item) == 2 and type(item[1]) is bytes:
            data = _generic.decode(item[1])
            if not isinstance(data, dict):
                raise ValueError("a delta row's full item is not a map")
            kind = kinds[t] = _kind(cls_for(topic), version, tuple(data))
            if kind.fast:
                event = full(topic, version, item[1], at)
            else:
                raws[t] = data
                event = upcast(kind.cls, version, dict(data), at)
        else:
            kind = kinds[t]
            before = previous.get(t)
            if kind is None or before is None:
                raise ValueError("a delta row's item precedes the full event of its type")
            mask, values = item[1], item[2:]
            if mask >> len(kind.names) or mask.bit_count() != len(values):
                raise ValueError("a delta row's item does not match its mask")
            changes: dict[str, Any] = {}
            for value in values:
                bit = mask & -mask  # the lowest field left, in field order
                mask ^= bit
                i = bit.bit_length() - 1
                if type(value) is _Ext:
                    value = _value(value, strings, last_time)
                convert = kind.convert[i]
                if convert is not None and value is not None:
                    value = convert(value)
                changes[kind.names[i]] = value
            if kind.fast:
                event = replace(before, originator_version=at, **changes)
            else:
                raws[t] = {**raws[t], **changes}
                event = upcast(kind.cls, version, dict(raws[t]), at)
        previous[t] = event
        last_time = event.timestamp
        events.append(event)
    return events
