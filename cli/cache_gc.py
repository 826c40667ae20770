"""`gc --cache` / `--max-cache-size`: collect the cache root (docs/operations.md
"Retention and cleanup").

Reads what the kept runs reference from the journal, takes the cache root's lock alone
(a run holds it shared: nothing is collected while one runs), removes through
`adapters/cache_gc.py` and records the removal as a `CacheCollected` event.
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import click
from eventsourcing.utils import get_topic
from runjournal.adapters.cache_gc import collect
from runjournal.adapters.cache_lock import CacheLock, CacheLockBusy
from runjournal.adapters.fsroot import FsError
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.cli.compose import factories
from runjournal.cli.errors import CliError, ExitCode
from runjournal.cli.settings import EffectiveConfig
from runjournal.domain.cache_refs import (
    REFERENCE_EVENTS,
    RunReferences,
    collected,
    collection_id,
    references,
)
from runjournal.domain.lazy_pattern import LazyPattern

_SIZE = LazyPattern(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """`--max-cache-size`: bytes, or a number with K, M, G or T (powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise CliError(
            f"--max-cache-size {text!r}: expected a size such as 500M, 2G or 1048576 "
            "(units K, M, G, T: powers of 1024)"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def kept_references(store: JournalStore, dropped: set[str]) -> list[RunReferences]:
    """The references of every run in the journal but the `dropped` ones."""
    topics = [get_topic(cls) for cls in REFERENCE_EVENTS]
    try:
        runs = references(event for _, event in store.notifications(0, topics))
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
    return [refs for refs in runs.values() if refs.run_id not in dropped]


def collect_cache(
    store: JournalStore,
    config: EffectiveConfig,
    dropped: set[str],
    *,
    max_size: int | None,
    dry_run: bool,
) -> dict[str, Any]:
    """Collect the cache root; the `cache` part of `gc --json`. `store` is writable unless
    `dry_run` (the removal is recorded in it)."""
    doc: dict[str, Any] = {
        "root": config.cache_root,
        "dry_run": dry_run,
        "max_size": max_size,
        "skipped": None,
        "removed": [],
        "freed": 0,
        "size_before": None,
        "size_after": None,
    }
    if not os.path.isdir(config.cache_root):
        doc["skipped"] = "no cache root"
        return doc
    kept = kept_references(store, dropped)
    try:
        with factories().open_root(config.cache_root) as root:
            try:
                lock = CacheLock.exclusive(root)
            except CacheLockBusy as exc:
                doc["skipped"] = str(exc)
                return doc
            with lock:
                result = collect(root, kept, max_size, dry_run=dry_run)
    except (FsError, OSError) as exc:
        message = f"cannot collect cache root {config.cache_root}: {exc}"
        raise CliError(message, ExitCode.FAILED) from None
    removed = [
        {"kind": r.kind.value, "name": r.name, "size": r.size, "reason": r.reason.value}
        for r in result.removed
    ]
    doc.update(
        removed=removed,
        freed=result.freed,
        size_before=result.size_before,
        size_after=result.size_after,
        kept_runs=len(kept),
    )
    if not dry_run and result.removed:
        now = datetime.now(UTC)
        collection = collection_id(now, secrets.token_hex(4))
        event = collected(
            lambda: now,
            collection,
            cache_root=config.cache_root,
            removed=result.removed,
            freed=result.freed,
            size_before=result.size_before,
            size_after=result.size_after,
            kept_runs=len(kept),
            max_size=max_size,
        )
        try:
            store.record_maintenance(event)
        except JournalError as exc:
            raise CliError(
                f"removed {len(removed)} cache entries but could not record it: {exc}",
                ExitCode.FAILED,
            ) from None
        doc["collection"] = collection
    return doc


def echo_cache(doc: dict[str, Any]) -> None:
    """The text lines of the cache part."""
    if doc["skipped"]:
        click.echo(f"cache left alone: {doc['skipped']}")
        return
    verb = "would free" if doc["dry_run"] else "freed"
    kinds: dict[str, int] = {}
    for row in doc["removed"]:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    what = ", ".join(f"{n} {k.replace('_', ' ')}(s)" for k, n in sorted(kinds.items()))
    click.echo(
        f"cache {doc['root']}: {verb} {doc['freed']} bytes"
        f" ({what or 'nothing removed'}); {doc['size_before']} -> {doc['size_after']} bytes"
    )
