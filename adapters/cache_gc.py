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

import hashlib
import os
import sqlite3
import stat
from collections.abc import Collection as Sized
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from runjournal.adapters.checkpoints import LATEST, Workspace
from runjournal.adapters.fsroot import FsNotFound, FsRoot
from runjournal.adapters.llm.batch_records import BatchRecords
from runjournal.adapters.packed_store import Compaction, PackedStore
from runjournal.domain.cache_refs import (
    BATCH,
    BLOCK,
    KEY,
    LANE,
    PLAN,
    RESTORED,
    RUN,
    SCOPE,
    STAGE_SLOTS,
    STAGES_BY_SLOT,
    SUMMARY,
    RunReferences,
)
from runjournal.domain.decisions import Stage
from runjournal.domain.events import BlockKind, CacheEntryKind, CacheRemoval, RemovalReason
from runjournal.domain.ports import CheckpointKey, StoreScope

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
) -> Iterator[CacheEntry]:
    """Every checkpoint and chunk plan under the cache root (files, and the entries of
    `packed`), in no order, one at a time (listing them all first held a name per entry
    of the store: docs/performance.md "gc, audit and explain at scale"). `lanes` (when
    given) is told every packed name under `workspaces/`, in the same pass."""
    for name, size, mtime in _walk(root, WORKSPACES, ".ckpt"):
        yield CacheEntry(CacheEntryKind.CHECKPOINT, name, size, mtime)
    for name, size, mtime in _walk(root, CHUNKPLANS, ".plan"):
        yield CacheEntry(CacheEntryKind.CHUNK_PLAN, name, size, mtime)
    if packed is not None:
        for base, suffix, kind in (
            (WORKSPACES, ".ckpt", CacheEntryKind.CHECKPOINT),
            (CHUNKPLANS, ".plan", CacheEntryKind.CHUNK_PLAN),
        ):
            # the bucket's store (s3_store) lists sorted only
            listing = getattr(packed, "entries_unordered", packed.entries)
            for e in listing(f"{base}/"):
                if lanes is not None and base == WORKSPACES:
                    lanes.see(e.name)
                if e.name.endswith(suffix):
                    yield CacheEntry(kind, e.name, e.size, e.written_ns, packed=True)


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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LOOKUP = 500  # names looked up in one query (SQLite allows 32,766 parameters)


def _micros(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def _digest(name: str) -> bytes:
    return hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=16).digest()


class RefIndex:
    """What the kept runs reference, held on disk: a private temporary SQLite database
    (deleted when closed), so gc's memory does not grow with the checkpoints
    (docs/performance.md "gc, audit and explain at scale").

    Fed with each journal's `reference_facts` (`add_journal`) or with `RunReferences`
    (`add_references`, a few runs in memory); `finish` names what the kept runs reference
    (the scoped name and the one before scopes of each checkpoint, each chunk plan) with
    the newest start of this gc's own kept runs that use it and whether another journal's
    do; `use` looks a name up. The lane and block summaries of a journal are expanded
    from their source runs as `with_summarized` does (lane summaries first, runs in
    journal order), by SQL over the stored rows.
    """

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None)  # "": temporary, on disk
        self._db.executescript(
            """
            PRAGMA cache_size = -1024;
            PRAGMA temp_store = FILE;
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            CREATE TABLE runs (id INTEGER PRIMARY KEY, journal INTEGER, run_id TEXT,
                pipeline TEXT, started INTEGER, own INTEGER, kept INTEGER);
            CREATE TABLE scope (id INTEGER PRIMARY KEY, sid TEXT, deps TEXT, lid TEXT);
            CREATE TABLE ck (run INTEGER, step TEXT, lane TEXT, slot INTEGER, chunk TEXT,
                scope INTEGER);
            CREATE TABLE lanes (run INTEGER, step TEXT, idx INTEGER, lane TEXT);
            CREATE TABLE plans (run INTEGER, idx INTEGER, key TEXT);
            CREATE TABLE summaries (run INTEGER, source TEXT, step TEXT, lane TEXT,
                first INTEGER);
            CREATE TABLE lane_use (run INTEGER, step TEXT, lane TEXT, user INTEGER);
            CREATE INDEX lane_use_by ON lane_use (user, step, lane);
            CREATE TABLE blocks (run INTEGER, source TEXT, kind TEXT, step TEXT,
                first INTEGER, units INTEGER);
            CREATE TABLE names (name BLOB, started INTEGER, other INTEGER);
            CREATE TABLE refs (name BLOB PRIMARY KEY, started INTEGER, other INTEGER)
                WITHOUT ROWID;
            CREATE TABLE own (name TEXT, kind TEXT, size INTEGER, started INTEGER,
                packed INTEGER);
            """
        )
        self._journals = 0
        self._scopes = 0  # scope ids handed out so far (each journal's start at this)
        self.kept_runs = 0
        self.batches: set[str] = set()  # request sets of the kept runs' provider batches
        # normalize artifacts restored under --recompute, by lane identity: (lane
        # directory prefix, newest start of an own kept run, or None: another journal's)
        self.restored: dict[str, list[tuple[str, int | None]]] = {}

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RefIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ feeding

    def add_journal(
        self, facts: Iterable[tuple[Any, ...]], *, own: bool, dropped: Sized[str] = ()
    ) -> int:
        """One journal's `reference_facts`; the runs kept (all but `dropped`)."""
        db = self._db
        journal = self._journals = self._journals + 1
        base = self._scopes
        runs: dict[Any, int] = {}
        restored: list[tuple[int, str, str, str]] = []
        batches: list[tuple[int, str]] = []
        lane_idx: dict[tuple[int, str], int] = {}
        plan_idx: dict[int, int] = {}
        keys: list[tuple[Any, ...]] = []
        scopes: list[tuple[Any, ...]] = []
        lanes: list[tuple[Any, ...]] = []
        top = base
        db.execute("BEGIN")
        try:
            for fact in facts:
                tag = fact[0]
                if tag == KEY:
                    _, owner, step, lane, slot, chunk, scope_id = fact
                    keys.append((runs[owner], step, lane, slot, chunk, base + scope_id))
                    if len(keys) >= 4096:
                        self._flush(keys, scopes, lanes)
                elif tag == SCOPE:
                    scope = fact[2]
                    top = max(top, base + fact[1] + 1)
                    scopes.append(
                        (base + fact[1], scope.step_identity, scope.dependencies,
                         scope.lane_identity),
                    )  # fmt: skip
                elif tag == LANE:
                    run = runs[fact[1]]
                    n = lane_idx.get((run, fact[2]), 0)
                    lane_idx[(run, fact[2])] = n + 1
                    lanes.append((run, fact[2], n, fact[3]))
                elif tag == PLAN:
                    run = runs[fact[1]]
                    n = plan_idx.get(run, 0)
                    plan_idx[run] = n + 1
                    db.execute("INSERT INTO plans VALUES (?, ?, ?)", (run, n, fact[2]))
                elif tag == RUN:
                    _, owner, run_id, pipeline, started = fact
                    kept = run_id not in dropped
                    cursor = db.execute(
                        "INSERT INTO runs (journal, run_id, pipeline, started, own, kept)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (journal, run_id, pipeline, _micros(started), own, kept),
                    )
                    runs[owner] = cursor.lastrowid or 0
                elif tag == SUMMARY:
                    _, owner, source, step, lane, first = fact
                    db.execute(
                        "INSERT INTO summaries VALUES (?, ?, ?, ?, ?)",
                        (runs[owner], source, step, lane, base + first),
                    )
                elif tag == BLOCK:
                    _, owner, source, kind, step, first, units = fact
                    db.execute(
                        "INSERT INTO blocks VALUES (?, ?, ?, ?, ?, ?)",
                        (runs[owner], source, kind.value, step, first, units),
                    )
                elif tag == RESTORED:
                    restored.append((runs[fact[1]], *fact[2:]))
                elif tag == BATCH:
                    batches.append((runs[fact[1]], fact[2]))
            self._flush(keys, scopes, lanes)
            db.execute("CREATE INDEX IF NOT EXISTS ck_lane ON ck (run, step, lane)")
            self._expand(journal)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._scopes = top
        kept_ids = {
            run: (pipeline, datetime.fromtimestamp(0, UTC) + timedelta(microseconds=started))
            for run, pipeline, started in db.execute(
                "SELECT id, pipeline, started FROM runs WHERE journal = ? AND kept", (journal,)
            )
        }
        self.batches.update(b for run, b in batches if run in kept_ids)
        for run, step, lane, lid in restored:
            if run not in kept_ids:
                continue
            pipeline, started = kept_ids[run]
            try:
                lane_dir = Workspace.pointer_name(step, lane, Stage.NORMALIZE).rpartition("/")[0]
            except ValueError:
                continue
            when = _micros(started) if own else None
            self.restored.setdefault(lid, []).append((f"{WORKSPACES}/{pipeline}/{lane_dir}/", when))
        self.kept_runs += len(kept_ids)
        return len(kept_ids)

    def _flush(self, *rows: list[tuple[Any, ...]]) -> None:
        """Write the rows gathered for `ck`, `scope` and `lanes` (cleared)."""
        for table, gathered in zip(("ck", "scope", "lanes"), rows, strict=True):
            if gathered:
                marks = ", ".join("?" * len(gathered[0]))
                self._db.executemany(f"INSERT INTO {table} VALUES ({marks})", gathered)
                gathered.clear()

    def _expand(self, journal: int) -> None:
        """The journal's lane summaries, then its block summaries, run by run in journal
        order, as rows of the runs that hold them (`with_summarized`)."""
        db = self._db
        ids = {
            run_id: run
            for run, run_id in db.execute(
                "SELECT id, run_id FROM runs WHERE journal = ? ORDER BY id", (journal,)
            )
        }
        summarized = [r for (r,) in db.execute("SELECT DISTINCT run FROM summaries ORDER BY run")]
        for run in summarized:
            for source, step, lane, first in db.execute(
                "SELECT source, step, lane, first FROM summaries WHERE run = ?", (run,)
            ).fetchall():
                found = ids.get(source)
                if found is None:
                    continue
                db.execute(
                    "INSERT INTO ck SELECT ?, step, lane, slot, chunk, ? + slot FROM ck"
                    " WHERE run = ? AND step = ? AND lane = ?"
                    " AND ? + slot IN (SELECT id FROM scope)",
                    (run, first, found, step, lane, first),
                )
        db.execute("DELETE FROM summaries")
        blocked = [r for (r,) in db.execute("SELECT DISTINCT run FROM blocks ORDER BY run")]
        for run in blocked:
            for source, kind, step, first, units in db.execute(
                "SELECT source, kind, step, first, units FROM blocks WHERE run = ?", (run,)
            ).fetchall():
                found = ids.get(source)
                if found is None:
                    continue
                last = first + units - 1
                if kind == BlockKind.PLANS.value:
                    db.execute(
                        "INSERT INTO plans SELECT ?, -1, key FROM plans"
                        " WHERE run = ? AND idx BETWEEN ? AND ?",
                        (run, found, first, last),
                    )
                    continue
                # the units' lanes, as uses of the source's rows (not copies of them: a
                # row per decision per kept run); and what the source's own blocks
                # made its lanes reference, as `with_summarized` reads the source
                units = (found, step, first, last)
                db.execute(
                    "INSERT INTO lane_use SELECT run, step, lane, ? FROM lanes"
                    " WHERE run = ? AND step = ? AND idx BETWEEN ? AND ?",
                    (run, *units),
                )
                db.execute(
                    "INSERT INTO lane_use SELECT u.run, u.step, u.lane, ? FROM lanes l"
                    " JOIN lane_use u ON u.user = l.run AND u.step = l.step"
                    " AND u.lane = l.lane"
                    " WHERE l.run = ? AND l.step = ? AND l.idx BETWEEN ? AND ?",
                    (run, *units),
                )
        db.execute("DELETE FROM blocks")

    def add_references(self, refs: Iterable[RunReferences], *, own: bool) -> None:
        """Runs whose references are already in memory (expanded, all kept)."""
        self.add_journal(_facts_of(refs), own=own)

    def finish(self) -> None:
        """Name every checkpoint and plan the kept runs reference (`use` then answers)."""
        db = self._db
        # each lane a kept run's block summaries use: one row per (lane, pipeline)
        db.execute(
            "CREATE TABLE lane_uses AS SELECT u.run, u.step, u.lane, r.pipeline,"
            " MAX(CASE WHEN r.own THEN r.started END) AS started, MAX(NOT r.own) AS other"
            " FROM lane_use u JOIN runs r ON r.id = u.user WHERE r.kept"
            " GROUP BY u.run, u.step, u.lane, r.pipeline"
        )
        rows = db.execute(
            "SELECT u.pipeline, c.step, c.lane, c.slot, c.chunk, s.sid, s.deps, s.lid,"
            " MAX(u.started), MAX(u.other) FROM ("
            " SELECT c.run, c.step, c.lane, r.pipeline,"
            " CASE WHEN r.own THEN r.started END AS started, NOT r.own AS other"
            " FROM ck c JOIN runs r ON r.id = c.run WHERE r.kept"
            " GROUP BY c.run, c.step, c.lane"
            " UNION ALL SELECT run, step, lane, pipeline, started, other FROM lane_uses"
            " ) u JOIN ck c ON c.run = u.run AND c.step = u.step AND c.lane = u.lane"
            " JOIN scope s ON s.id = c.scope"
            " GROUP BY u.pipeline, c.step, c.lane, c.slot, c.chunk, c.scope"
            " ORDER BY c.step, c.lane"
        )
        batch: list[tuple[bytes, int | None, int]] = []
        # appended unordered, then folded into `refs` in name order by one GROUP BY (an
        # upsert per name into `refs` was a random insert each, through a small cache)
        add = "INSERT INTO names VALUES (?, ?, ?)"
        pending = rows.fetchmany(1024)
        while pending:
            for pipeline, step, lane, slot, chunk, sid, deps, lid, started, other in pending:
                key = CheckpointKey(
                    step, lane, STAGES_BY_SLOT[slot], chunk, StoreScope(sid, deps, lid)
                )
                prefix = f"{WORKSPACES}/{pipeline}/"
                try:
                    batch.append((_digest(prefix + Workspace.checkpoint_name(key)), started, other))
                    # the layout before scopes: the file at the stage's position (still read)
                    batch.append(
                        (_digest(prefix + Workspace.checkpoint_name(key.position)), started, other)
                    )
                except ValueError:
                    continue
            pending = rows.fetchmany(1024)
            # written between reads of the cursor: the rows read are another table's
            db.executemany(add, batch)
            batch.clear()
        plans = db.execute(
            "SELECT p.key, MAX(CASE WHEN r.own THEN r.started END), MAX(NOT r.own)"
            " FROM plans p JOIN runs r ON r.id = p.run WHERE r.kept GROUP BY p.key"
        ).fetchall()
        db.executemany(
            add,
            [
                (_digest(f"{CHUNKPLANS}/{k[:2]}/{k}.plan"), started, other)
                for k, started, other in plans
            ],
        )
        db.execute(
            "INSERT INTO refs SELECT name, MAX(started), MAX(other) FROM names GROUP BY name"
        )
        for table in ("ck", "lanes", "plans", "scope", "lane_use", "lane_uses", "names"):
            db.execute(f"DELETE FROM {table}")

    def uses(self, names: list[str]) -> list[tuple[int | None, bool]]:
        """`use` of each of `names` (a few hundred at a time: one query for them)."""
        digests = [_digest(name) for name in names]
        found: dict[bytes, tuple[int | None, int]] = {}
        for at in range(0, len(digests), _LOOKUP):
            part = digests[at : at + _LOOKUP]
            marks = ", ".join("?" * len(part))
            for digest, started, other in self._db.execute(
                f"SELECT name, started, other FROM refs WHERE name IN ({marks})", part
            ):
                found[digest] = (started, other)
        return [
            self._restored(n, *found.get(d, (None, 0))) for n, d in zip(names, digests, strict=True)
        ]

    def use(self, name: str) -> tuple[int | None, bool]:
        """(newest start in microseconds of an own kept run using `name`, or None; whether
        another journal's kept run uses it)."""
        return self.uses([name])[0]

    def _restored(self, name: str, started: int | None, other: int) -> tuple[int | None, bool]:
        """`started` and `other` of `name`, with the normalize artifacts restored under
        --recompute: any stored normalize of the lane identity may have been the one."""
        other = bool(other)
        if self.restored and name.endswith(_NORMALIZE):
            lid = name[: -len(_NORMALIZE)].rpartition("/")[2]
            for lane_dir, when in self.restored.get(lid, ()):
                if not name.startswith(lane_dir):
                    continue
                if when is None:
                    other = True
                elif started is None or started < when:
                    started = when
        return started, other

    # ------------------------------------------------------------------ the size bound

    def hold_own(self, entry: CacheEntry, started: int) -> None:
        self._db.execute(
            "INSERT INTO own VALUES (?, ?, ?, ?, ?)",
            (entry.name, entry.kind.value, entry.size, started, entry.packed),
        )

    def own_oldest_first(self) -> Iterator[CacheEntry]:
        for name, kind, size, packed in self._db.execute(
            "SELECT name, kind, size, packed FROM own ORDER BY started, name"
        ):
            yield CacheEntry(CacheEntryKind(kind), name, size, packed=bool(packed))


@dataclass(frozen=True)
class Retention:
    """What keeps an entry besides this `gc`'s own journal (docs/operations.md "Cache
    retention"): the cache root is shared by every journal in its registry."""

    others: list[RunReferences] = field(default_factory=list)  # never removed, never sized
    pinned: frozenset[str] = frozenset()  # pipelines of registered journals not read
    keep_plans: bool = False  # a journal was not read: the plans it uses are unknown
    epoch_ns: int | None = None  # the registry's start (None: no registry yet)
    include_unregistered: bool = False  # collect unreferenced entries older than it too


def _protected(entry: CacheEntry, other: bool, keep: Retention) -> str | None:
    """Why `entry` holds another journal's work (`other`: a kept run of another journal
    references it), or work of no known journal (None: it does not)."""
    if other:
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


def index_of(kept: list[RunReferences] | RefIndex, keep: Retention) -> RefIndex:
    """`kept` (and `keep.others`) as a finished RefIndex (`kept` itself when it is one)."""
    if isinstance(kept, RefIndex):
        return kept
    index = RefIndex()
    index.add_references(kept, own=True)
    index.add_references(keep.others, own=False)
    index.finish()
    return index


def select(
    entries: Iterable[CacheEntry],
    kept: list[RunReferences] | RefIndex,
    max_size: int | None,
    keep: Retention | None = None,
    protected: dict[str, int] | None = None,
    packed: list[str] | None = None,
    sizes: list[int] | None = None,
    files: list[str] | None = None,
) -> list[CacheRemoval]:
    """What to remove: entries nothing keeps, then least recently used ones of this gc's
    own journal over `max_size`. `kept` is this gc's own kept runs, or a finished
    RefIndex of every journal's (then `keep.others` is in it). Without `keep`, `kept` is
    all there is. `protected` (when given) counts the entries kept for another journal,
    by why; `packed` and `files` (when given) are told the names of the packed entries
    and of the files removed, and `sizes` the total size of the entries before (its one
    item).

    The entries are walked once and not held; with `max_size`, those only this gc's
    journal uses are held on disk (the index's) to be taken oldest first."""
    keep = keep or Retention(epoch_ns=-1)
    index = index_of(kept, keep)
    try:
        removed: list[CacheRemoval] = []
        total = 0
        for entry, (started, other) in _looked_up(entries, index):
            why = _protected(entry, other, keep)
            if why is not None:
                total += entry.size
                if protected is not None:
                    protected[why] = protected.get(why, 0) + 1
            elif started is not None:
                if max_size is not None:
                    index.hold_own(entry, started)
                total += entry.size
            else:
                reason = RemovalReason.UNREFERENCED
                removed.append(CacheRemoval(entry.kind, entry.name, entry.size, reason))
                _told(entry, packed, files)
                total += entry.size
        if sizes is not None:
            sizes.append(total)
        total -= sum(r.size for r in removed)
        if max_size is not None and total > max_size:
            for entry in index.own_oldest_first():
                if total <= max_size:
                    break
                over = CacheRemoval(entry.kind, entry.name, entry.size, RemovalReason.OVER_SIZE)
                removed.append(over)
                _told(entry, packed, files)
                total -= entry.size
    finally:
        if index is not kept:
            index.close()
    return sorted(removed, key=lambda r: r.name)


def collect(
    root: FsRoot,
    kept: list[RunReferences] | RefIndex,
    max_size: int | None,
    *,
    dry_run: bool,
    keep: Retention | None = None,
) -> Collection:
    """Remove (unless `dry_run`) what `select` chose (packed entries lose their index row,
    their bytes go at `compact`); prune the directories left empty, and the pointers of
    packed lanes left with nothing else."""
    packed = _store(root)
    try:
        protected: dict[str, int] = {}
        in_pack: list[str] = []
        in_files: list[str] = []
        sizes: list[int] = []
        removed = select(
            scan(root, packed), kept, max_size, keep, protected, in_pack, sizes, in_files
        )
        before = sizes[0]
        if not dry_run:
            packed.remove(in_pack)
            for name in in_files:
                root.remove(name, missing_ok=True)
            _prune(root, WORKSPACES)
            _prune(root, CHUNKPLANS)
            if packed.exists:
                packed.remove(_orphan_pointers(packed, in_pack))
    finally:
        packed.close()
    return Collection(
        removed=_merged(removed),
        size_before=before,
        size_after=before - sum(r.size for r in removed),
        protected=protected,
    )


def _facts_of(refs: Iterable[RunReferences]) -> Iterator[tuple[Any, ...]]:
    """`reference_facts` of runs whose references are in memory (already expanded)."""
    scope_ids: dict[StoreScope, int] = {}
    for n, r in enumerate(refs):
        owner = ("refs", n)
        yield (RUN, owner, r.run_id, r.pipeline, r.started)
        for key in r.checkpoints:
            if key.scope is None:
                continue
            scope_id = scope_ids.get(key.scope)
            if scope_id is None:
                scope_id = scope_ids[key.scope] = len(scope_ids)
                yield (SCOPE, scope_id, key.scope)
            slot = STAGE_SLOTS[Stage(key.stage)]
            yield (KEY, owner, key.step, key.lane, slot, key.chunk, scope_id)
        yield from ((PLAN, owner, plan) for plan in r.plans)
        yield from ((RESTORED, owner, *restored) for restored in r.restored)
        yield from ((BATCH, owner, batch) for batch in r.batches)


def _looked_up(
    entries: Iterable[CacheEntry], index: RefIndex
) -> Iterator[tuple[CacheEntry, tuple[int | None, bool]]]:
    """Each entry with its `RefIndex.use`, looked up a few hundred at a time."""
    part: list[CacheEntry] = []
    for entry in entries:
        part.append(entry)
        if len(part) >= _LOOKUP:
            yield from zip(part, index.uses([e.name for e in part]), strict=True)
            part = []
    if part:
        yield from zip(part, index.uses([e.name for e in part]), strict=True)


def _told(entry: CacheEntry, packed: list[str] | None, files: list[str] | None) -> None:
    """`entry` is removed: its name to the list of its kind (packed, or a file)."""
    told = packed if entry.packed else files
    if told is not None:
        told.append(entry.name)


def _orphan_pointers(packed: PackedStore, removed: list[str]) -> list[str]:
    """The pointers of the lanes `removed` (packed names) were in, when those lanes hold
    nothing else now: listed lane by lane, not the whole store."""
    touched = {}
    for name in removed:
        found = LaneCensus.lane_of(name)
        if found is not None and not found[1]:
            touched[found[0]] = None
    census = LaneCensus()
    for lane in touched:
        for name in packed.names(lane + "/"):
            census.see(name)
    return census.orphan_pointers([])


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
    def lane_of(name: str) -> tuple[str, bool] | None:
        """(lane directory, whether `name` is one of its pointers); None: no lane's."""
        parts = name.split("/", 5)
        if len(parts) < 5 or parts[2] != "steps":
            return None
        pointer = len(parts) == 6 and "/" not in parts[5] and parts[5].startswith(f"{LATEST}.")
        return "/".join(parts[:5]), pointer

    def see(self, name: str) -> None:
        found = self.lane_of(name)
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
            found = self.lane_of(name)
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
    directory: str, referenced: Iterable[str], *, keep_all: bool, dry_run: bool
) -> BatchRecordsCollection:
    """Remove the records of batches whose results were collected (`collected`) and that
    no kept run references (it submitted or followed them); a record still in flight is
    a run's to resume, and `keep_all` (a journal could not be read) keeps every one
    (docs/operations.md "Cache retention"). Called under the cache root's lock."""
    records = BatchRecords(directory)
    referenced = set(referenced)  # the request sets kept runs submitted or followed
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
