"""Packed rows: a run of alike `StageDecided` events stored as one journal row.

A resume records one `StageDecided` per chunk, and consecutive decisions of a lane
differ only in their chunk, their input digest and their timestamp (and a lane's merge
and normalize only in their stage). A packed row stores the first event's map once (the
template) and, per further event, only those
(docs/internals.md "Packed rows"), so a reused decision costs tens of bytes instead of a
full row. Reading gives back exactly the events that were written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, Final

import msgspec
from runjournal.domain.decisions import Stage
from runjournal.domain.events import RunEvent, StageDecided

__all__ = ["MAX_PACK", "PACK_KEY", "groups", "pack_items", "unpack"]

PACK_KEY: Final = msgspec.msgpack.encode("~pack")
"""The map key of a packed row's items (no event field can be named so)."""
MAX_PACK: Final = 4096
"""At most this many events in one row (the count is a uint16; rows stay small)."""

_VARYING: Final = frozenset(("originator_version", "timestamp", "stage", "chunk", "input"))
_COMMON: Final = tuple(f for f in StageDecided.__struct_fields__ if f not in _VARYING)
_CHUNK_HEX: Final = 1  # the chunk is a lowercase 64-hex digest, stored as its 32 bytes
_INPUT_HEX: Final = 2  # the same for the input digest
_INPUT_IS_CHUNK: Final = 4  # the input equals the chunk id (an extract's input): not stored
_STAGE_SHIFT: Final = 3  # bits 3-4: 0 the first event's stage, else 1 + its index here
_STAGES: Final = (Stage.EXTRACT, Stage.MERGE, Stage.NORMALIZE)
_STAGE_CODE: Final = {stage: i + 1 for i, stage in enumerate(_STAGES)}
_ONE_US: Final = timedelta(microseconds=1)


class _Items(msgspec.Struct):
    items: list[tuple[int, int, bytes, bytes]] = msgspec.field(name="~pack")


_items_decoder = msgspec.msgpack.Decoder(_Items)
_encoder = msgspec.msgpack.Encoder()


def _key(event: RunEvent) -> tuple[Any, ...] | None:
    """What every event of one pack shares; None for an event that is never packed."""
    if (
        type(event) is not StageDecided
        or event.timestamp.tzinfo is None
        or event.stage not in _STAGE_CODE
    ):
        return None
    return (event.originator_id, *(getattr(event, name) for name in _COMMON))


def groups(events: Sequence[RunEvent]) -> Iterator[Sequence[RunEvent]]:
    """Consecutive events split into packs (alike decisions) and single events, in order."""
    start, key = 0, None
    for i, event in enumerate(events):
        this = _key(event)
        if (
            this is not None
            and this == key
            and i - start < MAX_PACK
            and event.originator_version == events[i - 1].originator_version + 1
        ):
            continue
        if i > start:
            yield events[start:i]
        start, key = i, this
    if start < len(events):
        yield events[start:]


def _digest_bytes(value: str) -> bytes | None:
    if len(value) != 64:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if raw.hex() == value else None


def pack_items(events: Sequence[StageDecided]) -> bytes:
    """Every event after the first as [µs since the previous, flags, chunk, input]; the
    flags also carry the stage."""
    out: list[tuple[int, int, bytes, bytes]] = []
    previous = events[0].timestamp
    stage = events[0].stage
    for event in events[1:]:
        flags = 0 if event.stage is stage else _STAGE_CODE[event.stage] << _STAGE_SHIFT
        chunk = _digest_bytes(event.chunk)
        if chunk is None:
            chunk = event.chunk.encode("utf-8", "surrogatepass")
        else:
            flags |= _CHUNK_HEX
        if event.input == event.chunk:
            flags |= _INPUT_IS_CHUNK
            given = b""
        else:
            raw = _digest_bytes(event.input)
            if raw is None:
                given = event.input.encode("utf-8", "surrogatepass")
            else:
                flags |= _INPUT_HEX
                given = raw
        step = (event.timestamp - previous) // _ONE_US
        previous = event.timestamp
        out.append((step, flags, chunk, given))
    return _encoder.encode(out)


def unpack(template: StageDecided, body: bytes, count: int) -> list[RunEvent]:
    """The `count` events of a packed row from its first event and its map bytes."""
    items = _items_decoder.decode(body).items
    if len(items) != count - 1:
        raise ValueError(f"a packed row of {count} events holds {len(items) + 1}")
    events: list[RunEvent] = [template]
    replace = msgspec.structs.replace
    version, timestamp = template.originator_version, template.timestamp
    for step, flags, chunk_bytes, given in items:
        stage_code = (flags >> _STAGE_SHIFT) & 3
        version += 1
        timestamp += timedelta(microseconds=step)
        chunk = (
            chunk_bytes.hex()
            if flags & _CHUNK_HEX
            else chunk_bytes.decode("utf-8", "surrogatepass")
        )
        if flags & _INPUT_IS_CHUNK:
            value = chunk
        elif flags & _INPUT_HEX:
            value = given.hex()
        else:
            value = given.decode("utf-8", "surrogatepass")
        events.append(
            replace(
                template,
                stage=_STAGES[stage_code - 1] if stage_code else template.stage,
                originator_version=version,
                timestamp=timestamp,
                chunk=chunk,
                input=value,
            )
        )
    return events
