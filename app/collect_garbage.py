"""The gc use-case: `gc` (docs/operations.md "Retention and cleanup", "Cache retention").

Deletes the run directories (and debug bundles) of finished runs beyond the retention,
finishes what a killed gc left, prunes output objects no run directory links and, with
`cache`, collects the cache root. Cleanup deletes only paths the journal recorded, always
through the confined filesystem adapter (the composition root's `open_root`). Every
handle is owned by one `ExitStack` per step; the result is a typed `GcReport` (its
`document()` the `gc --json` document), a failure a `RunFailedError`.

The cache collection takes the cache root's lock alone (a run holds it shared: nothing
is collected while one runs), reads what the kept runs of this journal and of every other
journal registered in the cache root reference (app/cache_journals.py), removes through
`adapters/cache_gc.py` and records the removal as a `CacheCollected` event.
"""

from __future__ import annotations

import contextlib
import gc
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runjournal.adapters.cache_gc import (
    BATCHES,
    RefIndex,
    Retention,
    collect,
    collect_batches,
    compact,
)
from runjournal.adapters.cache_lock import CacheLock, CacheLockBusy
from runjournal.adapters.cache_registry import forget, journal_identity, read_registry
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.adapters.s3_store import prepare_remote_cache
from runjournal.app.cache_journals import index_references, read_others
from runjournal.app.errors import RunFailedError, UsageError
from runjournal.app.journals import MaintenancePorts, existing_journal
from runjournal.domain.cache_refs import collected, collection_id
from runjournal.domain.events import RunStatus
from runjournal.domain.names import is_valid_run_id, recorded_run_parent

TOMBSTONE_PREFIX = ".rj-gc-"
"""A run directory being removed by `gc` is first renamed `<root>/.rj-gc-<run id>`."""


@dataclass(frozen=True)
class GcRequest:
    """What to collect: the retention of run directories and the cache collection."""

    keep: int | None = None  # keep the N newest finished runs
    older_than: timedelta | None = None  # remove runs started longer ago than this
    cache: bool = False  # collect the cache root too
    max_cache_size: int | None = None  # bytes the cache root may keep (implies cache)
    forget_missing: bool = False  # drop registry entries of journals that are gone
    include_unregistered: bool = False  # collect entries from before the registry
    dry_run: bool = False

    @property
    def collects_cache(self) -> bool:
        return (
            self.cache
            or self.max_cache_size is not None
            or self.forget_missing
            or self.include_unregistered
        )


@dataclass
class GcReport:
    """What gc removed (or, with `dry_run`, would remove)."""

    dry_run: bool
    runs: list[str] = field(default_factory=list)  # the runs whose directories went
    removed: list[str] = field(default_factory=list)  # run directories, bundles, tombstones
    objects_removed: int = 0  # output objects no run directory linked
    cache: dict[str, Any] | None = None  # the cache root's collection (`gc --json` `cache`)

    def document(self) -> dict[str, Any]:
        """`gc --json`."""
        return {
            "dry_run": self.dry_run,
            "runs": self.runs,
            "removed": self.removed,
            "objects_removed": self.objects_removed,
            "cache": self.cache,
        }


def collect_garbage(config: Any, request: GcRequest, ports: MaintenancePorts) -> GcReport:
    """Apply the retention of `request` to the journal's finished runs (and the cache)."""
    keep, older, dry_run = request.keep, request.older_than, request.dry_run
    if keep is None and older is None and not request.collects_cache:
        raise UsageError("gc needs a retention (keep, older than) or the cache collection")
    with existing_journal(config, ports, read_only=True) as store:
        every_run = store.list_runs()
        runs = [r for r in every_run if r.status is not RunStatus.RUNNING]
        bundles = {r.run_id: _bundle_of(store, r.run_id) for r in runs}
    runs.sort(key=lambda r: r.started, reverse=True)
    now = datetime.now(UTC)
    doomed = []
    for index, summary in enumerate(runs):
        beyond_keep = keep is not None and index >= keep
        too_old = older is not None and now - summary.started > older
        if keep is None and older is None:
            continue  # the cache alone: every run is kept
        if (keep is None or beyond_keep) and (older is None or too_old):
            doomed.append(summary)
    # A gc killed mid-way left its run directories renamed to tombstones: finish them, in
    # the roots and wherever the journal recorded a run directory or bundle.
    recorded = [(r.run_id, r.run_dir) for r in every_run]
    recorded += [(run_id, path) for run_id, path in bundles.items() if path]
    homes = (recorded_run_parent(run_id, path) for run_id, path in recorded)
    removed = [
        path
        for root in dict.fromkeys((config.output_root, config.debug_root, *filter(None, homes)))
        for path in _finish_tombstones(ports, root, dry_run)
    ]
    for summary in doomed:
        for path in (summary.run_dir, bundles.get(summary.run_id)):
            if path and _delete_child(ports, path, summary.run_id, dry_run):
                removed.append(path)
    # Objects live beside the run directories: in each output root a removed run was in.
    output_roots = (recorded_run_parent(r.run_id, r.run_dir) for r in doomed)
    objects_removed = sum(
        _prune_output_objects(ports, root, dry_run)
        for root in dict.fromkeys((config.output_root, *filter(None, output_roots)))
    )
    report = GcReport(dry_run, [r.run_id for r in doomed], removed, objects_removed)
    if request.collects_cache:
        with existing_journal(config, ports, read_only=dry_run) as store:
            report.cache = collect_cache(
                store,
                config,
                {r.run_id for r in doomed},
                ports,
                max_size=request.max_cache_size,
                dry_run=dry_run,
                forget_missing=request.forget_missing,
                include_unregistered=request.include_unregistered,
            )
    return report


def _compaction(done: Any) -> dict[str, int] | None:
    """The packed store's compaction for `gc --json` (docs/internals.md "Packed store")."""
    if done is None:
        return None
    return {
        "segments_removed": done.segments_removed,
        "records_moved": done.records_moved,
        "bytes_freed": done.bytes_freed,
        "objects_removed": done.objects_removed,
        "torn_segments": done.torn_segments,
        "torn_bytes": done.torn_bytes,
    }


def _prune_output_objects(ports: MaintenancePorts, output_root: str, dry_run: bool) -> int:
    """Objects no run directory links any more (docs/operations.md "Retention and cleanup")."""
    if dry_run or not os.path.isdir(output_root):
        return 0
    try:
        with ports.open_root(output_root) as fs:
            return len(ports.output_objects(fs).prune())
    except FsError as exc:
        raise RunFailedError(f"cannot prune output objects: {exc}") from None


def _bundle_of(store: JournalStore, run_id: str) -> str | None:
    try:
        for event in store.events(run_id):
            return getattr(event, "debug_bundle", None)
    except JournalError as exc:
        raise RunFailedError(f"cannot read run {run_id}: {exc}") from None
    return None


def _delete_child(ports: MaintenancePorts, path: str, run_id: str, dry_run: bool) -> bool:
    """Delete `path` only if the journal recorded it as `<dir>/<run id>` (docs/operations.md
    "Where a run lives"), wherever that is: the command's roots do not matter.

    The directory is renamed to its tombstone first (atomic), then the tombstone is
    removed: a gc killed in between leaves the run directory either whole or gone, and the
    next gc finishes the tombstone. A directory another gc removed meanwhile counts as
    removed.
    """
    root = recorded_run_parent(run_id, path)
    if root is None or not os.path.isdir(path):
        return False
    if dry_run:
        return True
    tombstone = TOMBSTONE_PREFIX + run_id
    try:
        with ports.open_root(root) as fs:
            try:
                fs.rename(run_id, tombstone)
            except FsNotFound:
                return True  # another gc got there first
            except AlreadyExists:
                fs.remove_tree(tombstone, missing_ok=True)  # a stale one of the same run
                fs.rename(run_id, tombstone)
            fs.remove_tree(tombstone, missing_ok=True)
    except FsNotFound:
        return True
    except FsError as exc:
        raise RunFailedError(f"cannot remove {path}: {exc}") from None
    return True


def _finish_tombstones(ports: MaintenancePorts, root: str, dry_run: bool) -> list[str]:
    """Remove the tombstones a killed gc left under `root`; their run paths, sorted."""
    if not os.path.isdir(root):
        return []
    finished = []
    try:
        with ports.open_root(root) as fs:
            for name in fs.listdir():
                run_id = name[len(TOMBSTONE_PREFIX) :]
                if not name.startswith(TOMBSTONE_PREFIX) or not is_valid_run_id(run_id):
                    continue
                if not dry_run:
                    fs.remove_tree(name, missing_ok=True)
                finished.append(os.path.join(root, run_id))
    except FsError as exc:
        raise RunFailedError(f"cannot finish removing under {root}: {exc}") from None
    return finished


# --- the cache root --------------------------------------------------------------------


@contextlib.contextmanager
def cycles_paused() -> Iterator[None]:
    """Python's cycle collector paused while the cache is collected: what gc builds (a
    key per referenced checkpoint, an entry per stored one) holds no cycles, and each
    full collection walked all of it again, a cost per decision that grew with the cache
    (about 18% of `gc --cache`'s cpu at 10k documents, 7% at 1k: docs/performance.md
    "gc, audit and explain at scale"). Restored as it was on the way out."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def kept_references(store: JournalStore, index: RefIndex, dropped: set[str]) -> int:
    """Add the references of every run in the journal but the `dropped` ones to `index`
    (on disk: docs/performance.md "gc, audit and explain at scale"); the runs kept."""
    try:
        return index_references(store, index, own=True, dropped=dropped)
    except JournalError as exc:
        raise RunFailedError(str(exc)) from None


def collect_cache(
    store: JournalStore,
    config: Any,
    dropped: set[str],
    ports: MaintenancePorts,
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
    remote = getattr(config, "cache_remote", None)
    if remote:
        doc["root"] = remote
        try:
            # the bucket's mirror directory on this machine
            prepare_remote_cache(config, ports.open_root)
        except FsError as exc:
            raise RunFailedError(f"cannot collect cache root {remote}: {exc}") from None
    elif not os.path.isdir(config.cache_root):
        doc["skipped"] = "no cache root"
        return doc
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(cycles_paused())
            root = stack.enter_context(ports.open_root(config.cache_root))
            try:
                lock = CacheLock.exclusive(root)
            except CacheLockBusy as exc:
                doc["skipped"] = str(exc)
                return doc
            locked = stack.enter_context(contextlib.ExitStack())
            locked.enter_context(lock)
            registry = read_registry(root)
            if registry.unreadable:
                name, why = next(iter(sorted(registry.unreadable.items())))
                doc["skipped"] = f"cannot read the journal registry entry {name}: {why}"
                return doc
            index = stack.enter_context(RefIndex())
            kept_references(store, index, dropped)
            others = read_others(
                registry,
                journal_identity(config.journal),
                index,
                forget_missing=forget_missing,
                timeout=config.journal_timeout,
            )
            index.finish()
            doc["journals"] = others.rows
            if others.forget and not dry_run:
                forget(root, others.forget)
            keep = Retention(
                pinned=frozenset(others.pinned),
                keep_plans=others.unread,
                epoch_ns=registry.epoch_ns,
                include_unregistered=include_unregistered,
            )
            result = collect(root, index, max_size, dry_run=dry_run, keep=keep)
            batches = collect_batches(
                os.path.join(config.cache_root, BATCHES),
                index.batches,
                keep_all=bool(others.unread),
                dry_run=dry_run,
            )
            locked.close()  # runs go on while the packed store is compacted
            compaction = None if dry_run else compact(root)
    except (FsError, OSError) as exc:
        raise RunFailedError(
            f"cannot collect cache root {config.cache_remote or config.cache_root}: {exc}"
        ) from None
    removed = [
        {"kind": r.kind.value, "name": r.name, "size": r.size, "reason": r.reason.value}
        for r in result.removed
    ]
    doc.update(
        removed=removed,
        freed=result.freed,
        size_before=result.size_before,
        size_after=result.size_after,
        kept_runs=index.kept_runs,
        kept=dict(sorted(result.protected.items())),
        packed=_compaction(compaction),
        batches={"removed": batches.removed, "kept": batches.kept},
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
            kept_runs=index.kept_runs,
            max_size=max_size,
        )
        try:
            store.record_maintenance(event)
        except JournalError as exc:
            raise RunFailedError(
                f"removed {len(removed)} cache entries but could not record it: {exc}"
            ) from None
        doc["collection"] = collection
    return doc
