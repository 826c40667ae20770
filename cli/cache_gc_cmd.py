"""`gc --cache` / `--max-cache-size`: collect the cache root (docs/operations.md
"Cache retention").

Takes the cache root's lock alone (a run holds it shared: nothing is collected while one
runs), reads what the kept runs of this journal and of every other journal registered in
the cache root reference (`cli/cache_journals.py`), removes through `adapters/cache_gc.py`
and records the removal as a `CacheCollected` event (docs/operations.md "Cache retention").
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import click
from runjournal.adapters.cache_gc import Retention, collect
from runjournal.adapters.cache_lock import CacheLock, CacheLockBusy
from runjournal.adapters.cache_registry import forget, journal_identity, read_registry
from runjournal.adapters.fsroot import FsError
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.cli.cache_journals import read_others, run_references
from runjournal.cli.compose import factories
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.settings import EffectiveConfig
from runjournal.domain.cache_refs import RunReferences, collected, collection_id
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
    try:
        return run_references(store, dropped)
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None


def collect_cache(
    store: JournalStore,
    config: EffectiveConfig,
    dropped: set[str],
    *,
    max_size: int | None,
    dry_run: bool,
    forget_missing: bool = False,
    include_unregistered: bool = False,
) -> dict[str, Any]:
    """Collect the cache root; the `cache` part of `gc --json`. `store` is writable unless
    `dry_run` (the removal is recorded in it).

    Under the cache root's lock (no run is using it), every journal in its registry is
    read, so nothing another project's journal references goes (docs/operations.md
    "Cache retention")."""
    doc: dict[str, Any] = {
        "root": config.cache_root,
        "dry_run": dry_run,
        "max_size": max_size,
        "skipped": None,
        "removed": [],
        "freed": 0,
        "size_before": None,
        "size_after": None,
        "journals": [],
    }
    if not os.path.isdir(config.cache_root):
        doc["skipped"] = "no cache root"
        return doc
    try:
        with factories().open_root(config.cache_root) as root:
            try:
                lock = CacheLock.exclusive(root)
            except CacheLockBusy as exc:
                doc["skipped"] = str(exc)
                return doc
            with lock:
                registry = read_registry(root)
                if registry.unreadable:
                    name, why = next(iter(sorted(registry.unreadable.items())))
                    doc["skipped"] = f"cannot read the journal registry entry {name}: {why}"
                    return doc
                kept = kept_references(store, dropped)
                others = read_others(
                    registry,
                    journal_identity(config.journal),
                    forget_missing=forget_missing,
                    timeout=config.journal_timeout,
                )
                doc["journals"] = others.rows
                if others.forget and not dry_run:
                    forget(root, others.forget)
                keep = Retention(
                    others=others.refs,
                    pinned=frozenset(others.pinned),
                    keep_plans=others.unread,
                    epoch_ns=registry.epoch_ns,
                    include_unregistered=include_unregistered,
                )
                result = collect(root, kept, max_size, dry_run=dry_run, keep=keep)
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
        kept_runs=len(kept) + len(others.refs),
        kept=dict(sorted(result.protected.items())),
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
            kept_runs=len(kept) + len(others.refs),
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
    for row in doc["journals"]:
        pipelines = ", ".join(row["pipelines"])
        if row["status"] in ("missing", "unreadable"):
            click.echo(
                f"cache: kept everything of pipeline(s) {pipelines} and every chunk plan: "
                f"journal {row['journal']} is {row['status']} ({row['error']})"
                + ("; gc --forget-missing forgets it" if row["status"] == "missing" else "")
            )
        elif row["status"] == "forgotten":
            verb = "would forget" if doc["dry_run"] else "forgot"
            click.echo(f"cache: {verb} journal {row['journal']} ({pipelines}): it is gone")
    unregistered = doc.get("kept", {}).get("unregistered")
    if unregistered:
        click.echo(
            f"cache: kept {unregistered} entries written before the journal registry "
            "(gc --include-unregistered collects them)"
        )
    verb = "would free" if doc["dry_run"] else "freed"
    kinds: dict[str, int] = {}
    for row in doc["removed"]:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    what = ", ".join(f"{n} {k.replace('_', ' ')}(s)" for k, n in sorted(kinds.items()))
    click.echo(
        f"cache {doc['root']}: {verb} {doc['freed']} bytes"
        f" ({what or 'nothing removed'}); {doc['size_before']} -> {doc['size_after']} bytes"
    )
