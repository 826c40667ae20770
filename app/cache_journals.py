"""`gc --cache`: read every journal of the cache root's registry for what it references
(docs/operations.md "Cache retention").

The cache root is shared by every project on the machine, so what another journal's runs
reference is kept; a journal that cannot be read (gone, unreadable, unreachable) keeps
its pipelines' workspaces and every chunk plan whole, and the command says so.
`--forget-missing` drops the registry entries of a SQLite journal that is gone.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.utils import get_topic
from runjournal.adapters.cache_gc import RefIndex
from runjournal.adapters.cache_registry import Registry, journal_host, this_host
from runjournal.adapters.journal import (
    JournalError,
    JournalMissing,
    JournalStore,
    open_existing_journal,
)
from runjournal.domain.cache_refs import REFERENCE_EVENTS, reference_facts


@dataclass
class OtherJournals:
    """What the registered journals other than this gc's own keep."""

    runs: int = 0  # their kept runs (their references are in the index)
    pinned: set[str] = field(default_factory=set)  # pipelines of journals not read
    rows: list[dict[str, Any]] = field(default_factory=list)  # `journals` of `gc --json`
    forget: list[str] = field(default_factory=list)  # registry entries to drop

    @property
    def unread(self) -> bool:
        return bool(self.pinned)


def index_references(
    store: JournalStore, index: RefIndex, *, own: bool, dropped: Collection[str] = ()
) -> int:
    """Add what every run in `store` but the `dropped` ones references to `index`, read
    as the journal streams (JournalError); the runs kept."""
    topics = [get_topic(cls) for cls in REFERENCE_EVENTS]
    facts = reference_facts(event for _, event in store.notifications(0, topics))
    return index.add_journal(facts, own=own, dropped=dropped)


def read_others(
    registry: Registry, own: str, index: RefIndex, *, forget_missing: bool, timeout: float
) -> OtherJournals:
    """Read each registered journal but `own` (an identity) into `index`; one row per
    journal."""
    out = OtherJournals()
    for (identity, host), names in registry.journals().items():
        pipelines = sorted({registry.entries[name].pipeline for name in names})
        row: dict[str, Any] = {"journal": identity, "pipelines": pipelines, "runs": None}
        if host:
            row["host"] = host
        out.rows.append(row)
        if identity == own and host == journal_host(own):
            row["status"] = "this"
            continue
        if host and host != this_host():  # its path is another machine's
            row.update(status="unreadable", error=f"a SQLite journal of host {host}")
            out.pinned.update(pipelines)
            continue
        try:
            store = open_existing_journal(identity, timeout=timeout)
            try:
                runs = index_references(store, index, own=False)
            finally:
                store.close()
        except JournalMissing as exc:
            if forget_missing:
                row.update(status="forgotten", error=str(exc))
                out.forget.extend(names)
                continue
            row.update(status="missing", error=str(exc))
        except (JournalError, OSError) as exc:
            row.update(status="unreadable", error=str(exc))
        else:
            row.update(status="read", runs=runs)
            out.runs += runs
            continue
        out.pinned.update(pipelines)
    return out
