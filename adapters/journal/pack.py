"""Packed rows: a run of alike `StageDecided` events stored as one journal row (read only).

Journals written before delta rows (delta.py) hold a lane's consecutive alike decisions
as one row: the first event's map (the template) and, per further event, its chunk,
input digest, stage and time step (docs/internals.md "Packed rows"). They are still
read, as exactly the events that were written; new rows are delta rows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import msgspec
from runjournal.domain.decisions import Stage
from runjournal.domain.events import RunEvent, StageDecided

__all__ = ["unpack"]

_CHUNK_HEX: Final = 1  # the chunk is a lowercase 64-hex digest, stored as its 32 bytes
_INPUT_HEX: Final = 2  # the same for the input digest
_INPUT_IS_CHUNK: Final = 4  # the input equals the chunk id (an extract's input): not stored
_STAGE_SHIFT: Final = 3  # bits 3-4: 0 the first event's stage, else 1 + its index here
_STAGES: Final = (Stage.EXTRACT, Stage.MERGE, Stage.NORMALIZE)


class _Items(msgspec.Struct):
    items: list[tuple[int, int, bytes, bytes]] = msgspec.field(name="~pack")


_items_decoder = msgspec.msgpack.Decoder(_Items)


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
