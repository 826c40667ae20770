"""Editing a SQLite journal's rows the way a database writer would (the tamper suites).

"Naive" edits change rows in place, their chain links as they were; `rechain` rewrites a
run with a consistent chain over forged events, with runjournal's own encoder (a careful
attacker who knows the format but holds no signing key).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import zstandard
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic
from runjournal.adapters.journal import EventMapper
from runjournal.adapters.journal.chain import genesis
from runjournal.adapters.journal.delta import DELTA_TOPIC
from runjournal.domain.events import RunEvent
from runjournal.domain.run import run_aggregate_id

MAPPER = EventMapper()


def rows_of(db: sqlite3.Connection, run_id: str) -> list[tuple[int, str, bytes]]:
    return db.execute(
        "SELECT originator_version, topic, state FROM stored_events "
        "WHERE originator_id = ? ORDER BY originator_version",
        (run_aggregate_id(run_id).hex,),
    ).fetchall()


def decode_row(run_id: str, version: int, topic: str, state: bytes) -> list[RunEvent]:
    """The events of one row: one, or several for a delta row (docs/internals.md)."""
    return MAPPER.to_domain_events(StoredEvent(run_aggregate_id(run_id), version, topic, state))


def row_name(topic: str, state: bytes) -> str:
    """What the audit names a row by: its event's class, or a delta row and its size."""
    if topic == DELTA_TOPIC:
        return f"delta row of {MAPPER.event_count(state)} events"
    return topic.rpartition(":")[2]


def row_at(db: sqlite3.Connection, run_id: str, version: int) -> tuple[int, str, bytes]:
    return next(r for r in rows_of(db, run_id) if r[0] == version)


def next_row(db: sqlite3.Connection, run_id: str, version: int) -> tuple[int, str, bytes]:
    return next(r for r in rows_of(db, run_id) if r[0] > version)


def version_of(db: sqlite3.Connection, run_id: str, cls: type[RunEvent], nth: int = 0) -> int:
    """The version of the row that holds the `nth` `cls` event (a delta row: its last)."""
    found = [
        v
        for v, t, s in rows_of(db, run_id)
        for e in decode_row(run_id, v, t, s)
        if isinstance(e, cls)
    ]
    return found[nth]


def edit_in_place(
    journal: Path, run_id: str, cls: type[RunEvent], change: Callable[[dict[str, Any]], None]
) -> int:
    """Change one field of the first `cls` event in its msgpack map; the link stays.

    Returns the row's version; in a delta row the event is the first of its type, so its
    map is whole (docs/internals.md "Delta rows")."""
    with sqlite3.connect(journal) as db:
        version = version_of(db, run_id, cls)
        _, topic, state = row_at(db, run_id, version)
        head = state[0]
        prefix = (3 if head & 0x10 else 1) + (2 if head & 0x60 else 0)  # + a row's count
        body = state[prefix:]
        compressed = head & 0x0F == 0x02
        if compressed:
            body = zstandard.ZstdDecompressor().decompress(body)
        fields = msgspec.msgpack.decode(body)
        assert "~chain" in fields  # the journal is chained
        if topic == DELTA_TOPIC:
            t = [topic for topic, _ in fields["~types"]].index(get_topic(cls))
            item = next(i for i in fields["~rows"] if i[0] == t)
            event = msgspec.msgpack.decode(item[1])
            change(event)
            item[1] = msgspec.msgpack.encode(event)
        else:
            change(fields)
        body = msgspec.msgpack.encode(fields)
        if compressed:
            body = zstandard.ZstdCompressor().compress(body)
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (state[:prefix] + body, run_aggregate_id(run_id).hex, version),
        )
    return version


def rechain(journal: Path, run_id: str, forge: Callable[[list[RunEvent]], list[RunEvent]]) -> None:
    """Rewrite the run with a consistent chain over forged events (a careful attacker)."""
    aggregate = run_aggregate_id(run_id)
    with sqlite3.connect(journal) as db:
        per_row = [decode_row(run_id, v, t, s) for v, t, s in rows_of(db, run_id)]
        sizes = [len(events) for events in per_row]
        events = forge([e for events in per_row for e in events])
        db.execute("DELETE FROM stored_events WHERE originator_id = ?", (aggregate.hex,))
        previous: bytes | None = genesis(aggregate)
        version = 0
        for size in sizes:  # the rows as runjournal wrote them (one commit, one pack)
            group = [
                msgspec.structs.replace(event, originator_version=version + i + 1)
                for i, event in enumerate(events[version : version + size])
            ]
            version += size
            stored, previous = MAPPER.to_stored_rows(group, previous)
            for row in stored:
                db.execute(
                    "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
                    (aggregate.hex, row.originator_version, row.topic, row.state),
                )
