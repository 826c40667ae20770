"""Stage leases in the cache root (docs/operations.md "Concurrent runs").

One lock file, `<cache root>/leases/stages.lock`, holds a POSIX record lock (`fcntl`) on
one byte per lease (a lane's: `domain/leases.py` `lane_lease`), at an offset taken from
a hash of the lease's checkpoint place (the pipeline and `Workspace.checkpoint_name`).
The kernel drops a process's record locks when it dies, so a lease held by a killed run
is free at once, and it detects a cycle of processes waiting on each other's locks
(`EDEADLK`): the run that would close the cycle goes on without the lease instead of
waiting for ever. Each process that leases writes `leases/holder-<pid>` with its run id,
so a waiting run can name the run it waits for (the kernel names the holder's pid,
`F_GETLK`).

Record locks belong to a process, not to a descriptor or a thread: the process keeps one
descriptor of the file open while any lease is held (closing any descriptor of it would
drop them all) and a table of which run in the process holds which byte. Two runs in one
process wait for each other through that table; one run's twin stages (the same
checkpoint twice in a lane) share its lease.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from runjournal.adapters.checkpoints import Workspace
from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.leases import Lease, LeaseRefused, LeaseWait, LeaseWaitOutcome
from runjournal.domain.ports import CheckpointKey

LEASE_DIR = "leases"
LOCK_FILE = f"{LEASE_DIR}/stages.lock"
_RECHECK = 1.0  # seconds: a run waiting in this process looks again at least this often
_HOLDER_NAME = LazyPattern(r"[A-Za-z0-9._:-]{1,128}")
# struct flock on Linux (64-bit off_t): l_type, l_whence, l_start, l_len, l_pid
_FLOCK = struct.Struct("hhqqi4x")


def holder_file(pid: int) -> str:
    return f"{LEASE_DIR}/holder-{pid}"


def lease_offset(pipeline: str, key: CheckpointKey) -> int:
    """The byte locked for `key`: a hash of where its checkpoint is (below 2**62)."""
    place = f"{pipeline}\0{Workspace.checkpoint_name(key)}".encode()
    return int.from_bytes(hashlib.sha256(place).digest()[:8], "big") >> 2


# --- the kernel's record locks ---------------------------------------------------------


def _try_lock(fd: int, offset: int) -> bool:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset, os.SEEK_SET)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def _wait_lock(fd: int, offset: int) -> bool:
    """Block until the byte is locked; False when the kernel refuses a deadlock."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, offset, os.SEEK_SET)
    except OSError as exc:
        if exc.errno == errno.EDEADLK:
            return False
        raise
    return True


def _unlock(fd: int, offset: int) -> None:
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset, os.SEEK_SET)


def holder_pid(fd: int, offset: int) -> int | None:
    """The pid of the process holding the byte (None: nobody, or this process)."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if l_type == fcntl.F_UNLCK else pid


# --- the process's table of one lock file ---------------------------------------------


@dataclass
class _Entry:
    owner: FileStageLeases
    count: int  # 0 while the owner waits in the kernel for the byte


@dataclass(eq=False)
class _Table:
    """One lock file as this process holds it: descriptors, holders, in-process waits."""

    fds: list[int]  # the first is used; the others are only closed once nothing is held
    cond: threading.Condition = field(default_factory=threading.Condition)
    entries: dict[int, _Entry] = field(default_factory=dict)
    # run -> the run of this process it waits for (its lease, or its turn in the kernel)
    waiting: dict[FileStageLeases, FileStageLeases] = field(default_factory=dict)
    # the one run of this process waiting in the kernel (see `FileStageLeases.acquire`)
    kernel_waiter: FileStageLeases | None = None
    users: int = 0

    @property
    def fd(self) -> int:
        return self.fds[0]


_tables: dict[tuple[int, int], _Table] = {}
_tables_lock = threading.Lock()


def _open_table(root: FsRoot) -> tuple[tuple[int, int], _Table]:
    fd = root.open_lock_file(LOCK_FILE)
    info = os.fstat(fd)
    ident = (info.st_dev, info.st_ino)
    with _tables_lock:
        table = _tables.get(ident)
        if table is None:
            table = _tables[ident] = _Table([fd])
        else:  # kept open: closing it now would drop the locks this process holds
            table.fds.append(fd)
        table.users += 1
    return ident, table


def _close_table(ident: tuple[int, int], table: _Table) -> None:
    with _tables_lock:
        table.users -= 1
        if table.users or table.entries:
            return
        del _tables[ident]
    for fd in table.fds:
        os.close(fd)


# --- one run's leases -------------------------------------------------------------------


class _Unleased:
    """What a run holds when it goes on without the lease (a refused deadlock)."""

    def release(self) -> None:
        pass


class _Held:
    def __init__(self, leases: FileStageLeases, offset: int) -> None:
        self._leases = leases
        self._offset = offset
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._leases._release(self._offset)


class FileStageLeases:
    """One run's `StageLeases` over the cache root's lock file (opened on first use)."""

    def __init__(self, root: FsRoot, pipeline: str, run_id: str, *, wait: bool = True) -> None:
        self._root = root
        self._pipeline = pipeline
        self.run_id = run_id
        self._wait = wait
        self._table: _Table | None = None
        self._ident: tuple[int, int] | None = None
        self._open_lock = threading.Lock()
        self._last: tuple[CheckpointKey, int] | None = None  # a lane's stages: one key

    def _offset(self, key: CheckpointKey) -> int:
        last = self._last
        if last is not None and last[0] is key:
            return last[1]
        offset = lease_offset(self._pipeline, key)
        self._last = (key, offset)
        return offset

    def _opened(self) -> _Table:
        with self._open_lock:
            if self._table is None:
                self._root.write_bytes(
                    holder_file(os.getpid()), self.run_id.encode(), durable=False
                )
                self._ident, self._table = _open_table(self._root)
            return self._table

    def _name_of(self, pid: int | None) -> str:
        if not pid:
            return "in another process"
        try:
            text = self._root.read_bytes(holder_file(pid)).decode("utf-8", "replace").strip()
        except (FsError, OSError):
            text = ""
        return text if _HOLDER_NAME.compiled().fullmatch(text) else f"pid {pid}"

    def _cycle(self, table: _Table, holder: FileStageLeases) -> bool:
        """Whether `holder` waits, through runs of this process, for this run."""
        seen: set[int] = set()
        current: FileStageLeases | None = holder
        while current is not None and id(current) not in seen:
            if current is self:
                return True
            seen.add(id(current))
            current = table.waiting.get(current)
        return False

    def _wait_for(self, table: _Table, other: FileStageLeases) -> None:
        """Wait (the table's lock held) until `other` of this process changes something."""
        table.waiting[self] = other
        try:
            table.cond.wait(_RECHECK)
        finally:
            table.waiting.pop(self, None)

    def try_acquire(self, key: CheckpointKey) -> Lease | None:
        offset = self._offset(key)
        table = self._opened()
        if table is None:
            return _Unleased()
        with table.cond:
            entry = table.entries.get(offset)
            if entry is not None and entry.owner is self and entry.count:
                entry.count += 1
                return _Held(self, offset)
            if entry is None and _try_lock(table.fd, offset):
                table.entries[offset] = _Entry(self, 1)
                return _Held(self, offset)
            return None

    def acquire(self, key: CheckpointKey) -> tuple[Lease, LeaseWait | None]:
        offset = self._offset(key)
        table = self._opened()
        if table is None:
            return _Unleased(), None
        held_by: str | None = None  # the run this call waited for, if any

        def waited(outcome: LeaseWaitOutcome) -> LeaseWait | None:
            return None if held_by is None else LeaseWait(held_by, outcome)

        with table.cond:
            while True:
                entry = table.entries.get(offset)
                if entry is not None and entry.owner is self:  # a twin stage of this run
                    entry.count += 1
                    return _Held(self, offset), waited(LeaseWaitOutcome.RELEASED)
                if entry is not None:  # another run of this process holds it
                    if not self._wait:
                        raise LeaseRefused(key, entry.owner.run_id)
                    held_by = entry.owner.run_id
                    if self._cycle(table, entry.owner):
                        return _Unleased(), waited(LeaseWaitOutcome.DEADLOCK)
                    self._wait_for(table, entry.owner)
                    continue
                if _try_lock(table.fd, offset):
                    table.entries[offset] = _Entry(self, 1)
                    return _Held(self, offset), waited(LeaseWaitOutcome.RELEASED)
                pid = holder_pid(table.fd, offset)
                if pid is None:  # released between the two calls
                    continue
                held_by = self._name_of(pid)
                if not self._wait:
                    raise LeaseRefused(key, held_by)
                if table.kernel_waiter is not None:
                    # One waiter per process in the kernel: its deadlock detection follows
                    # one blocked request per process, so it sees every cycle only so.
                    self._wait_for(table, table.kernel_waiter)
                    continue
                # Wait in the kernel, outside the table's lock; the entry (count 0) makes
                # the other runs of this process wait behind this one.
                mine = table.entries[offset] = _Entry(self, 0)
                table.kernel_waiter = self
                locked = False
                table.cond.release()
                try:
                    locked = _wait_lock(table.fd, offset)
                finally:
                    table.cond.acquire()
                    table.kernel_waiter = None
                    if locked:
                        mine.count = 1
                    else:  # refused as a deadlock, or interrupted
                        del table.entries[offset]
                    table.cond.notify_all()
                if not locked:
                    return _Unleased(), waited(LeaseWaitOutcome.DEADLOCK)
                return _Held(self, offset), waited(LeaseWaitOutcome.RELEASED)

    def _release(self, offset: int) -> None:
        table = self._table
        if table is None:
            return
        with table.cond:
            entry = table.entries.get(offset)
            if entry is None or entry.owner is not self or entry.count == 0:
                return
            entry.count -= 1
            if entry.count == 0:
                del table.entries[offset]
                _unlock(table.fd, offset)
                table.cond.notify_all()

    def close(self) -> None:
        """Release every lease still held (a run's end, whatever the outcome)."""
        table, ident = self._table, self._ident
        if table is None or ident is None:
            return
        with table.cond:
            for offset, entry in list(table.entries.items()):
                if entry.owner is self and entry.count:
                    del table.entries[offset]
                    _unlock(table.fd, offset)
            table.cond.notify_all()
        self._table = self._ident = None
        _close_table(ident, table)
        if ident not in _tables:  # the last run of this process that leased here
            with contextlib.suppress(FsError, OSError):
                self._root.remove(holder_file(os.getpid()), missing_ok=True)


# --- across machines: lease objects in the bucket ---------------------------------------

# A stage lease object lives `BUCKET_LEASE_TTL_S` after its last write (the server's
# Last-Modified) and is rewritten every third of that while held, so a killed run's
# leases block other machines for at most that long.
BUCKET_LEASE_TTL_S = 60.0
BUCKET_LEASES = "leases/stages"
# A wait for another machine's lease gives up after this long: the kernel cannot see a
# cycle across machines, so a run never waits for good; it goes on without the lease
# (outcome `deadlock`), at worst computing the stage twice, as runs did before.
BUCKET_WAIT_MAX_S = 900.0
_BUCKET_POLL = (0.1, 1.0)  # first and longest pause between two looks


def bucket_lease_name(pipeline: str, key: CheckpointKey) -> str:
    return f"{BUCKET_LEASES}/{lease_offset(pipeline, key):016x}"


class _BucketHeld:
    """A stage's lease on this machine (the lock file) and in the bucket (an object)."""

    def __init__(self, leases: BucketStageLeases, local: Lease, name: str | None) -> None:
        self._leases = leases
        self._local = local
        self._name = name
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            if self._name is not None:
                self._leases._drop(self._name)
        finally:
            self._local.release()


class BucketStageLeases:
    """Stage leases of an `s3://` cache root: this machine's (`FileStageLeases`, the
    kernel's locks and deadlock detection between its runs), then the bucket's: an object
    `meta/leases/stages/<offset>` created with `If-None-Match: *` holding the run id,
    rewritten by a thread while held, deleted on release (docs/operations.md "Object-storage
    cache"). A lease object not rewritten for `BUCKET_LEASE_TTL_S` is a dead run's: the
    next taker deletes it. Twin stages of one run share the local lease, which is taken
    first, so the bucket object is taken once per holder."""

    def __init__(
        self,
        local: FileStageLeases,
        store: Any,
        pipeline: str,
        run_id: str,
        *,
        wait: bool = True,
        wait_max: float = BUCKET_WAIT_MAX_S,
    ) -> None:
        self._local = local
        self._store = store
        self._pipeline = pipeline
        self.run_id = run_id
        self._wait = wait
        self._wait_max = wait_max
        self._body = json.dumps({"run": run_id, "token": secrets.token_hex(8)}).encode()
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # lease object -> local holds that share it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # the objects

    def _holder(self, name: str) -> tuple[str, bool] | None:
        """(run id, alive) of the lease object `name`; None when there is none."""
        found = self._store.meta_get(name)
        if found is None:
            return None
        data, written_ns = found
        try:
            run = str(json.loads(data)["run"])
        except (ValueError, KeyError, TypeError):
            run = "?"
        if not _HOLDER_NAME.compiled().fullmatch(run):
            run = "in another process"
        return run, time.time_ns() - written_ns < BUCKET_LEASE_TTL_S * 1e9

    def _take(self, name: str) -> str | None:
        """Create the lease object; None when taken, else the run that holds it."""
        with self._lock:
            if name in self._held:
                self._held[name] += 1
                return None
        for _ in range(3):
            if self._store.meta_put(name, self._body, create=True):
                with self._lock:
                    self._held[name] = self._held.get(name, 0) + 1
                    self._start()
                return None
            holder = self._holder(name)
            if holder is None:
                continue  # released between the two requests
            run, alive = holder
            if alive:
                return run
            self._store.meta_delete([name])  # a killed run's, expired
        return "in another process"

    def _drop(self, name: str) -> None:
        with self._lock:
            count = self._held.get(name, 0) - 1
            if count > 0:
                self._held[name] = count
                return
            self._held.pop(name, None)
        # what the stage wrote is seen before the lease goes, so the next holder reads it:
        # the object is deleted once the store's pending records are in a pack (its next
        # group commit, docs/internals.md "Object-storage cache"); a commit that fails
        # leaves it to expire
        after_flush = getattr(self._store, "after_flush", None)
        if after_flush is not None:
            after_flush(lambda: self._delete(name))
        else:
            self._delete(name)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(FsError, OSError):
            found = self._store.meta_get(name)
            if found is not None and found[0] == self._body:  # never another run's
                self._store.meta_delete([name])

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._refresh, name="stage-leases", daemon=True)
            self._thread.start()

    def _refresh(self) -> None:
        while not self._stop.wait(BUCKET_LEASE_TTL_S / 3):
            with self._lock:
                names = list(self._held)
            for name in names:
                with contextlib.suppress(FsError, OSError):
                    self._store.meta_put(name, self._body)

    # StageLeases

    def try_acquire(self, key: CheckpointKey) -> Lease | None:
        local = self._local.try_acquire(key)
        if local is None:
            return None
        if isinstance(local, _Unleased):
            return local
        name = bucket_lease_name(self._pipeline, key)
        try:
            holder = self._take(name)
        except BaseException:
            local.release()
            raise
        if holder is not None:
            local.release()
            return None
        return _BucketHeld(self, local, name)

    def acquire(self, key: CheckpointKey) -> tuple[Lease, LeaseWait | None]:
        local, waited = self._local.acquire(key)
        if isinstance(local, _Unleased):
            if waited is not None:
                self._refreshed()
            return local, waited
        name = bucket_lease_name(self._pipeline, key)
        deadline = time.monotonic() + self._wait_max
        pause, longest = _BUCKET_POLL
        held_by: str | None = None
        try:
            while True:
                holder = self._take(name)
                if holder is None:
                    if held_by is not None:
                        waited = LeaseWait(held_by, LeaseWaitOutcome.RELEASED)
                    if waited is not None:
                        self._refreshed()
                    return _BucketHeld(self, local, name), waited
                held_by = holder
                if not self._wait:
                    raise LeaseRefused(key, holder)
                if time.monotonic() >= deadline:
                    return _BucketHeld(self, local, None), LeaseWait(
                        holder, LeaseWaitOutcome.DEADLOCK
                    )
                time.sleep(pause)
                pause = min(pause * 2, longest)
        except BaseException:
            local.release()
            raise

    def _refreshed(self) -> None:
        """After a wait, the holder's writes are read: the store lists its packs again."""
        refresh = getattr(self._store, "refresh", None)
        if refresh is not None:
            refresh()

    def close(self) -> None:
        """Release every lease still held, here and in the bucket."""
        flush = getattr(self._store, "flush", None)
        if flush is not None:
            with contextlib.suppress(FsError, OSError, RuntimeError):
                flush()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            names, self._held = list(self._held), {}
        for name in names:
            with contextlib.suppress(FsError, OSError):
                found = self._store.meta_get(name)
                if found is not None and found[0] == self._body:
                    self._store.meta_delete([name])
        self._local.close()
