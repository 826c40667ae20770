"""The live journal's hash chain: each event commits to its predecessor's link.

A chained row carries, as the last entry of its msgpack map, its own link::

    link(1) = sha256(TAG ‖ genesis(run) ‖ entry(1))
    link(n) = sha256(TAG ‖ link(n-1) ‖ entry(n))
    genesis(run) = sha256(TAG ‖ aggregate id)
    entry(n) = aggregate id (16 bytes) ‖ version (u64) ‖ topic length (u16) ‖ topic
               ‖ class_version (u16) ‖ the event's msgpack map without the link

So a link covers the event's content, type, run and position, and every event before
it; the terminal event's link is the run's chain head. `verify_chain` recomputes the
links of a run's rows in order. See docs/internals.md "The journal's hash chain".
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

import msgspec

if TYPE_CHECKING:
    from eventsourcing.persistence import StoredEvent
    from runjournal.adapters.journal.codec import EventMapper

__all__ = [
    "ChainBreak",
    "ChainReport",
    "ChainStatus",
    "genesis",
    "link_digest",
    "verify_chain",
]

TAG: Final = b"runjournal chain v1\x00"


def genesis(aggregate_id: UUID) -> bytes:
    """The link before a run's first event."""
    return hashlib.sha256(TAG + aggregate_id.bytes).digest()


def link_digest(
    previous: bytes,
    aggregate_id: UUID,
    version: int,
    topic: str,
    class_version: int,
    body: bytes,
) -> bytes:
    """The link of one event (see the module docstring)."""
    return chain_link(previous, aggregate_id, version, type_part(topic, class_version), body)


def chain_link(
    previous: bytes, aggregate_id: UUID, version: int, type_bytes: bytes, body: bytes
) -> bytes:
    """The one place a link is computed: of an event row (its class's `type_part`) and of
    a delta row (the delta type part), so the writer and every checker agree."""
    return hashlib.sha256(
        b"".join((TAG, previous, aggregate_id.bytes, version.to_bytes(8, "big"), type_bytes, body))
    ).digest()


def type_part(topic: str, class_version: int) -> bytes:
    """The bytes of `entry(n)` that depend only on the event class (cached by the codec)."""
    topic_bytes = topic.encode("utf-8", "surrogatepass")
    return len(topic_bytes).to_bytes(2, "big") + topic_bytes + class_version.to_bytes(2, "big")


class ChainStatus(enum.StrEnum):
    VERIFIED = "verified"  # every row carries a link and every link holds
    UNCHAINED = "unchained"  # no row carries a link: recorded before the chain existed
    BROKEN = "broken"  # some link does not hold, or only some rows carry one
    EMPTY = "empty"  # no rows


class ChainBreak(msgspec.Struct, frozen=True, kw_only=True):
    """Where the chain stops holding: one line naming the first event of a stretch."""

    version: int
    event: str
    message: str


class ChainReport(msgspec.Struct, frozen=True, kw_only=True):
    status: ChainStatus
    events: int
    head: str | None  # hex link of the last row, when that row carries one
    breaks: list[ChainBreak]


def verify_chain(
    rows: Iterable[StoredEvent], aggregate_id: UUID, mapper: EventMapper
) -> ChainReport:
    """Recompute the links of one run's rows (in version order) and report every break.

    A run none of whose rows carries a link is `unchained` (recorded before the chain
    existed). Otherwise every row must carry a link that holds. A row that does not
    starts a stretch of breaks; the rows after it are checked against the links they
    carry, so one edited row is one break, while a deletion or insertion that renumbers
    the rest is one break that counts the rows after it.
    """
    from runjournal.adapters.journal.codec import event_type_for_topic
    from runjournal.adapters.journal.delta import DELTA_TOPIC
    from runjournal.adapters.journal.journal_errors import JournalCorrupt

    # One pass, holding no row: a run whose rows carry no link at all is unchained, which
    # is known only at the end, so breaks are gathered as if chained and dropped then.
    events = rows_seen = linked = 0  # a delta or packed row holds several events
    breaks: list[ChainBreak] = []
    stretch: list[Any] = []  # [version, event, message, rows after it]
    previous = genesis(aggregate_id)
    last_link: bytes | None = None
    for row in rows:
        rows_seen += 1
        try:
            class_version, count, body, link = mapper.split_row(bytes(row.state))
            problem = ""
        except (JournalCorrupt, ValueError, TypeError, IndexError) as exc:
            class_version, count, body, link = 0, 1, b"", None
            problem = f"its stored state cannot be read ({type(exc).__name__})"
        events += count
        last_link = link
        if link is None and not problem:
            problem = "carries no chain link in a chained run (it was inserted or rewritten)"
        elif link is not None:
            linked += 1
            expected = link_digest(
                previous, row.originator_id, row.originator_version, row.topic, class_version, body
            )
            if expected != link:
                problem = (
                    "hash chain broken: the event does not match its link (it was changed, "
                    "or an event before it was deleted, inserted, reordered or moved)"
                )
            previous = link
        if problem and stretch:
            stretch[3] += 1
        elif problem:
            cls = event_type_for_topic(row.topic)
            name = cls.__name__ if cls is not None else f"unknown type {row.topic[:60]!r}"
            if row.topic == DELTA_TOPIC:  # docs/internals.md "Delta rows"
                name = f"delta row of {count} events"
            stretch = [row.originator_version, name, problem, 0]
        elif stretch:
            breaks.append(_break(*stretch))
            stretch = []
    if not rows_seen:
        return ChainReport(status=ChainStatus.EMPTY, events=0, head=None, breaks=[])
    if not linked:
        return ChainReport(status=ChainStatus.UNCHAINED, events=events, head=None, breaks=[])
    if stretch:
        breaks.append(_break(*stretch))
    return ChainReport(
        status=ChainStatus.BROKEN if breaks else ChainStatus.VERIFIED,
        events=events,
        head=last_link.hex() if last_link is not None else None,
        breaks=breaks,
    )


def _break(version: int, event: str, message: str, rows_after: int) -> ChainBreak:
    if rows_after:
        message += f"; the {rows_after} event(s) after it do not verify either"
    return ChainBreak(version=version, event=event, message=message)
