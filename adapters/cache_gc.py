"""Cache retention: which checkpoints and chunk plans under a cache root `gc` removes.

Every `.ckpt` under `workspaces/<pipeline>/steps/` and every `.plan` under `chunkplans/`
is an entry; an entry is kept when a kept run of any registered journal references it
(`domain/cache_refs.py`, `adapters/cache_registry.py`), when its journal could not be
read, or when it predates the registry; then, with a size bound, the least recently used
entries only this gc's own journal references go until the rest fit (docs/operations.md
"Cache retention"). Only called with the cache root's exclusive
lock held (`adapters/cache_lock.py`), so no run is reading or writing meanwhile;
`compact` runs after, with the lock released.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

import msgspec
from runjournal.adapters.checkpoints import LATEST, Workspace
from runjournal.adapters.fsroot import FsNotFound, FsRoot
from runjournal.adapters.llm.batch_records import BatchRecords
from runjournal.adapters.packed_store import Compaction, PackedStore
from runjournal.domain.cache_refs import RunReferences
from runjournal.domain.decisions import Stage
from runjournal.domain.events import CacheEntryKind, CacheRemoval, RemovalReason
from runjournal.domain.ports import CheckpointKey

WORKSPACES = "workspaces"
CHUNKPLANS = "chunkplans"
_NORMALIZE = f"/{Stage.NORMALIZE.value}.ckpt"  # a lane identity's normalize checkpoint


class CacheEntry(msgspec.Struct, frozen=True):
    kind: CacheEntryKind
    name: str  # relative to the cache root
    size: int
    mtime_ns: int = 0  # when it was written (compared with the registry's start)
    packed: bool = False  # an entry of the packed store, not a file


class Collection(msgspec.Struct, frozen=True):
    removed: list[CacheRemoval]
    size_before: int
    size_after: int
    # entries kept for another journal, by why: other_journal (it references them),
    # unread_journal (it could not be read), unregistered (older than the registry)
    protected: dict[str, int] = msgspec.field(default_factory=dict)

    @property
    def freed(self) -> int:
        return sum(r.size for r in self.removed)


def _walk(root: FsRoot, base: str, suffix: str) -> Iterator[tuple[str, int, int]]:
    """(name, size, mtime in ns) of the regular files ending in `suffix` below `base`;
    symlinks skipped."""
    try:
        handle = root.subroot(base)
    except FsNotFound:
        return
    with handle:
        for name in handle.listdir():
            try:
                info = os.stat(handle.fd_path(name), follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                yield from _walk(root, f"{base}/{name}", suffix)
            elif stat.S_ISREG(info.st_mode) and name.endswith(suffix):
                yield f"{base}/{name}", info.st_size, info.st_mtime_ns


def scan(
    root: FsRoot, packed: PackedStore | None = None, lanes: LaneCensus | None = None
) -> list[CacheEntry]:
    """Every checkpoint and chunk plan under the cache root (files, and the entries of
    `packed`), sorted by name. `lanes` is told every packed name under `workspaces/`
    (the lanes' pointers among them), in the same pass."""
    entries = [
        CacheEntry(CacheEntryKind.CHECKPOINT, name, size, mtime)
        for name, size, mtime in _walk(root, WORKSPACES, ".ckpt")
    ]
    entries += [
        CacheEntry(CacheEntryKind.CHUNK_PLAN, name, size, mtime)
        for name, size, mtime in _walk(root, CHUNKPLANS, ".plan")
    ]
    if packed is not None:
        for base, suffix, kind in (
            (WORKSPACES, ".ckpt", CacheEntryKind.CHECKPOINT),
            (CHUNKPLANS, ".plan", CacheEntryKind.CHUNK_PLAN),
        ):
            for e in packed.entries(f"{base}/"):
                if lanes is not None and base == WORKSPACES:
                    lanes.see(e.name)
                if e.name.endswith(suffix):
                    entries.append(CacheEntry(kind, e.name, e.size, e.written_ns, packed=True))
    return sorted(entries, key=lambda e: e.name)


def last_uses(
    kept: Iterable[RunReferences], present: Iterable[str] | None = None
) -> dict[str, datetime]:
    """Each referenced entry name and the start of the newest kept run referencing it.

    With `present` (the names the scan found), only those are kept, as the scan's own
    string objects: a run references two names per checkpoint (the scoped layout and the
    one before scopes) and holding both for every reference doubled gc's memory.
    """
    uses: dict[str, datetime] = {}
    canonical = None if present is None else {name: name for name in present}

    def use(name: str, when: datetime) -> None:
        if canonical is not None:
            found = canonical.get(name)
            if found is None:
                return
            name = found
        if name not in uses or uses[name] < when:
            uses[name] = when

    for refs in kept:
        prefix = f"{WORKSPACES}/{refs.pipeline}/"
        for key in _by_lane(refs.checkpoints):
            try:
                use(prefix + Workspace.checkpoint_name(key), refs.started)
                # the layout before scopes: the file at the stage's position (still read)
                use(prefix + Workspace.checkpoint_name(key.position), refs.started)
            except ValueError:
                continue
        for key in refs.plans:
            use(f"{CHUNKPLANS}/{key[:2]}/{key}.plan", refs.started)
    return uses


def _by_lane(keys: Iterable[CheckpointKey]) -> Iterator[CheckpointKey]:
    """`keys` a lane after another: naming a key caches its lane's directories (4,096
    lanes, `Workspace.checkpoint_name`), which a set's order missed beyond that many lanes
    (each name made its lane's directory again: docs/performance.md "gc, audit and explain
    at scale")."""
    lanes: dict[tuple[str, str], list[CheckpointKey]] = {}
    for key in keys:
        lanes.setdefault((key.step, key.lane), []).append(key)
    for lane in lanes.values():
        yield from lane


def _restored(kept: Iterable[RunReferences]) -> dict[tuple[str, str], datetime]:
    """(lane directory, lane identity) of normalize artifacts restored under --recompute."""
    out: dict[tuple[str, str], datetime] = {}
    for refs in kept:
        for step, lane, lid in refs.restored:
            try:
                lane_dir = Workspace.pointer_name(step, lane, Stage.NORMALIZE).rpartition("/")[0]
            except ValueError:
                continue
            where = (f"{WORKSPACES}/{refs.pipeline}/{lane_dir}/", lid)
            if where not in out or out[where] < refs.started:
                out[where] = refs.started
    return out


@dataclass(frozen=True)
class Retention:
    """What keeps an entry besides this `gc`'s own journal (docs/operations.md "Cache
    retention"): the cache root is shared by every journal in its registry."""

    others: list[RunReferences] = field(default_factory=list)  # never removed, never sized
    pinned: frozenset[str] = frozenset()  # pipelines of registered journals not read
    keep_plans: bool = False  # a journal was not read: the plans it uses are unknown
    epoch_ns: int | None = None  # the registry's start (None: no registry yet)
    include_unregistered: bool = False  # collect unreferenced entries older than it too


def _uses(entries: list[CacheEntry], refs: list[RunReferences]) -> dict[str, datetime]:
    """`last_uses` plus the normalize files of lane identities restored under --recompute."""
    uses = last_uses(refs, (e.name for e in entries))
    # by lane identity: the entries are walked once, not once per restored identity (that
    # was entries x restored lanes: docs/performance.md "gc, audit and explain at scale")
    by_lid: dict[str, list[tuple[str, datetime]]] = {}
    for (lane_dir, lid), when in _restored(refs).items():
        by_lid.setdefault(lid, []).append((lane_dir, when))
    if not by_lid:
        return uses
    for entry in entries:
        name = entry.name
        if not name.endswith(_NORMALIZE):
            continue
        lid = name[: -len(_NORMALIZE)].rpartition("/")[2]
        for lane_dir, when in by_lid.get(lid, ()):
            if name.startswith(lane_dir) and (name not in uses or uses[name] < when):
                uses[name] = when
    return uses


def _protected(entry: CacheEntry, others: dict[str, datetime], keep: Retention) -> str | None:
    """Why `entry` holds another journal's work, or work of no known journal (None: it
    does not)."""
    if entry.name in others:
        return "other_journal"
    if entry.kind is CacheEntryKind.CHUNK_PLAN:
        if keep.keep_plans:
            return "unread_journal"
    elif entry.name.split("/", 2)[1] in keep.pinned:
        return "unread_journal"
    if keep.include_unregistered:
        return None
    # written before the registry existed: maybe by a journal that is not registered
    if keep.epoch_ns is None or entry.mtime_ns < keep.epoch_ns:
        return "unregistered"
    return None


def select(
    entries: list[CacheEntry],
    kept: list[RunReferences],
    max_size: int | None,
    keep: Retention | None = None,
    protected: dict[str, int] | None = None,
) -> list[CacheRemoval]:
    """What to remove: entries nothing keeps, then least recently used ones of this gc's
    own journal (`kept`) over `max_size`. Without `keep`, `kept` is all there is.
    `protected` (when given) counts the entries kept for another journal, by why."""
    keep = keep or Retention(epoch_ns=-1)
    uses = _uses(entries, kept)
    others = _uses(entries, keep.others) if keep.others else {}
    removed: list[CacheRemoval] = []
    own: list[CacheEntry] = []  # entries only this gc's journal uses: the size bound's
    total = 0
    for entry in entries:
        why = _protected(entry, others, keep)
        if why is not None:
            total += entry.size
            if protected is not None:
                protected[why] = protected.get(why, 0) + 1
        elif entry.name in uses:
            own.append(entry)
            total += entry.size
        else:
            reason = RemovalReason.UNREFERENCED
            removed.append(CacheRemoval(entry.kind, entry.name, entry.size, reason))
    if max_size is not None:
        for entry in sorted(own, key=lambda e: (uses[e.name], e.name)):
            if total <= max_size:
                break
            over = CacheRemoval(entry.kind, entry.name, entry.size, RemovalReason.OVER_SIZE)
            removed.append(over)
            total -= entry.size
    return sorted(removed, key=lambda r: r.name)


def collect(
    root: FsRoot,
    kept: list[RunReferences],
    max_size: int | None,
    *,
    dry_run: bool,
    keep: Retention | None = None,
) -> Collection:
    """Remove (unless `dry_run`) what `select` chose (packed entries lose their index row,
    their bytes go at `compact`); prune the directories left empty."""
    packed = _store(root)
    try:
        lanes = LaneCensus()
        entries = scan(root, packed, lanes)
        protected: dict[str, int] = {}
        removed = select(entries, kept, max_size, keep, protected)
        before = sum(e.size for e in entries)
        if not dry_run:
            going = {r.name for r in removed}
            in_pack = [e.name for e in entries if e.packed and e.name in going]
            in_files = [e.name for e in entries if not e.packed and e.name in going]
            del entries
            packed.remove(in_pack)
            for name in in_files:
                root.remove(name, missing_ok=True)
            _prune(root, WORKSPACES)
            _prune(root, CHUNKPLANS)
            if packed.exists:
                packed.remove(lanes.orphan_pointers(in_pack))
    finally:
        packed.close()
    return Collection(
        removed=_merged(removed),
        size_before=before,
        size_after=before - sum(r.size for r in removed),
        protected=protected,
    )


def compact(root: FsRoot) -> Compaction | None:
    """Compact the cache root's packed store (None: it has none). Safe while runs write:
    called after `collect`, with the cache root's lock released (docs/internals.md
    "Packed store")."""
    packed = _store(root)
    try:
        return packed.compact() if packed.exists else None
    finally:
        packed.close()


def _store(root: FsRoot) -> PackedStore:
    """The cache root's store: its packed store, or for the mirror of an `s3://` cache
    root, the bucket (listed by prefix, entries deleted by reference: docs/internals.md
    "Object-storage cache")."""
    from runjournal.adapters.s3_store import open_store

    return open_store(root)  # type: ignore[return-value]  # the same interface


def _merged(removed: list[CacheRemoval]) -> list[CacheRemoval]:
    """One removal per name (a name both packed and a file of the old layout is one entry
    for the report, its sizes added)."""
    by_name: dict[str, CacheRemoval] = {}
    for removal in removed:
        seen = by_name.get(removal.name)
        if seen is None:
            by_name[removal.name] = removal
        else:
            by_name[removal.name] = msgspec.structs.replace(seen, size=seen.size + removal.size)
    return sorted(by_name.values(), key=lambda r: r.name)


class LaneCensus:
    """Which lanes of the packed store hold anything but their `latest.<stage>` pointers,
    counted from the scan's own pass over the store (the store's names were listed a
    second time for it, all of them held at once beside the scan's entries)."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}  # lane directory -> entries other than pointers
        self._pointers: dict[str, list[str]] = {}  # lane directory -> its pointers

    @staticmethod
    def _lane(name: str) -> tuple[str, bool] | None:
        """(lane directory, whether `name` is one of its pointers); None: no lane's."""
        parts = name.split("/", 5)
        if len(parts) < 5 or parts[2] != "steps":
            return None
        pointer = len(parts) == 6 and "/" not in parts[5] and parts[5].startswith(f"{LATEST}.")
        return "/".join(parts[:5]), pointer

    def see(self, name: str) -> None:
        found = self._lane(name)
        if found is None:
            return
        lane, pointer = found
        if pointer:
            self._pointers.setdefault(lane, []).append(name)
        self._held[lane] = self._held.get(lane, 0) + (not pointer)

    def orphan_pointers(self, removed: Iterable[str]) -> list[str]:
        """The pointers of lanes left with nothing once `removed` (packed names the scan
        saw) are gone: they point at nothing, as `_prune` removes their files."""
        for name in removed:
            found = self._lane(name)
            if found is not None and not found[1] and found[0] in self._held:
                self._held[found[0]] -= 1
        return [p for lane, ps in self._pointers.items() if not self._held[lane] for p in ps]


def _prune(root: FsRoot, base: str, depth: int = 0) -> bool:
    """Remove directories below `base` holding no file; True when `base` is now empty.

    A lane directory left with only its `latest.<stage>` pointers goes too (they point at
    nothing).
    `workspace.json` keeps its workspace.
    """
    try:
        names = root.listdir(base)
    except FsNotFound:
        return True
    left = []
    for name in names:
        child = f"{base}/{name}"
        try:
            is_dir = root.subroot(child)
        except (FsNotFound, OSError):
            left.append(name)
            continue
        is_dir.close()
        if not _prune(root, child, depth + 1):
            left.append(name)
        else:
            root.remove_tree(child, missing_ok=True)
    pointers_only = all(name.startswith(f"{LATEST}.") for name in left)
    return not left or (pointers_only and depth > 0)


# --- provider batch records (`llm/batches/`) -------------------------------------------

BATCHES = "llm/batches"


class BatchRecordsCollection(msgspec.Struct, frozen=True):
    """The batch records `gc --cache` removed (their request sets) and those it kept."""

    removed: list[str]
    kept: int


def collect_batches(
    directory: str, refs: Iterable[RunReferences], *, keep_all: bool, dry_run: bool
) -> BatchRecordsCollection:
    """Remove the records of batches whose results were collected (`collected`) and that
    no kept run references (it submitted or followed them); a record still in flight is
    a run's to resume, and `keep_all` (a journal could not be read) keeps every one
    (docs/operations.md "Cache retention"). Called under the cache root's lock."""
    records = BatchRecords(directory)
    referenced = {local for r in refs for local in r.batches}
    removed: list[str] = []
    kept = 0
    for record in records.load_all():
        if keep_all or record.state != "collected" or record.local in referenced:
            kept += 1
            continue
        removed.append(record.local)
        if not dry_run:
            records.remove(record.local)
    return BatchRecordsCollection(removed=sorted(removed), kept=kept)
