"""The cache root's lock: runs share it, `gc` holds it alone (docs/operations.md
"Retention and cleanup").

An `flock` on the cache root directory itself, through a descriptor of the confined root
(`FsRoot.lock_handle`): no lock file, so a run leaves nothing under the cache root it did
not mean to write, and a swapped path cannot redirect it. The kernel drops a lock when its
process dies: a killed run never blocks a later `gc`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from runjournal.adapters.fsroot import FsRoot

_POLL = 0.05
# An object-storage cache root has no flock: leases
# (docs/internals.md "Object-storage cache"). A lease lives `LEASE_TTL_S` after its last
# write and is rewritten every third of that while held, so a killed holder blocks the
# others for at most that long.
LEASE_TTL_S = 600.0
_LEASE_POLL = 0.5
GC_LEASE = "leases/gc"
RUN_LEASES = "leases/runs"


class CacheLockBusy(Exception):
    """The lock is held in a conflicting mode (by a run, or by a `gc`)."""


class CacheLock:
    """One held lock; `close()` releases it."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def _open(cls, root: FsRoot) -> int:
        return root.lock_handle()

    @classmethod
    def shared(
        cls,
        root: FsRoot,
        *,
        wait: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> CacheLock:
        """A run's lock: waits up to `wait` seconds for a `gc` to finish
        (CacheLockBusy after that). FsError when the directory cannot be opened again."""
        remote = _remote(root)
        if remote is not None:
            return LeaseLock.shared(remote, wait=wait, sleep=sleep)
        fd = cls._open(root)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return cls(fd)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise CacheLockBusy("the cache root is being collected by gc") from None
                sleep(_POLL)

    @classmethod
    def exclusive(cls, root: FsRoot) -> CacheLock:
        """`gc`'s lock, taken at once or not at all (CacheLockBusy)."""
        remote = _remote(root)
        if remote is not None:
            return LeaseLock.exclusive(remote)
        fd = cls._open(root)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CacheLockBusy("the cache root is in use by a running run or another gc") from None
        return cls(fd)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> CacheLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remote(root: FsRoot) -> Any:
    """The bucket's store when `root` is the mirror of an `s3://` cache root."""
    from runjournal.adapters.s3_store import S3PackedStore, open_store, remote_of

    if remote_of(root) is None:
        return None
    store = open_store(root)
    assert isinstance(store, S3PackedStore)
    return store


def _lease_body() -> bytes:
    holder = {"host": socket.gethostname(), "pid": os.getpid()}
    return json.dumps(holder, sort_keys=True).encode()


def _live(store: Any, name: str) -> bool:
    """Whether the lease `name` exists and was written less than LEASE_TTL_S ago."""
    found = store.meta_get(name)
    if found is None:
        return False
    return time.time_ns() - found[1] < LEASE_TTL_S * 1e9


class LeaseLock(CacheLock):
    """The cache lock of an object-storage cache root: a lease object, rewritten by a
    thread while held, deleted by `close`.

    A run writes its own lease (`leases/runs/<token>`) and then looks for a live `gc`
    lease; `gc` creates its lease (`If-None-Match: *`) and then looks for live run
    leases. Each writes before it looks, so of a run and a `gc` starting together at
    least one sees the other and steps back: never both hold the cache root.
    """

    def __init__(self, store: Any, name: str) -> None:
        super().__init__(-1)
        self._fd = None
        self._store = store
        self._name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, name="cache-lease", daemon=True)
        self._thread.start()

    def _refresh(self) -> None:
        while not self._stop.wait(LEASE_TTL_S / 3):
            try:
                self._store.meta_put(self._name, _lease_body())
            except OSError:
                continue  # the next refresh tries again; the lease outlives one miss

    @classmethod
    def shared(  # type: ignore[override]
        cls, store: Any, *, wait: float, sleep: Callable[[float], None] = time.sleep
    ) -> LeaseLock:
        name = f"{RUN_LEASES}/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(6)}"
        deadline = time.monotonic() + wait
        while True:
            store.meta_put(name, _lease_body())
            if not _live(store, GC_LEASE):
                return cls(store, name)
            store.meta_delete([name])
            if time.monotonic() >= deadline:
                raise CacheLockBusy("the cache root is being collected by gc")
            sleep(_LEASE_POLL)

    @classmethod
    def exclusive(cls, store: Any) -> LeaseLock:  # type: ignore[override]
        if not store.meta_put(GC_LEASE, _lease_body(), create=True):
            if _live(store, GC_LEASE):
                raise CacheLockBusy("the cache root is in use by a running run or another gc")
            store.meta_put(GC_LEASE, _lease_body())  # a killed gc's lease, expired
        runs = store.meta_list(RUN_LEASES)
        live = [name for name in runs if _live(store, name)]
        if live:
            store.meta_delete([GC_LEASE])
            raise CacheLockBusy("the cache root is in use by a running run or another gc")
        store.meta_delete([name for name in runs if name not in live])  # killed runs'
        return cls(store, GC_LEASE)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):  # else it expires
            self._store.meta_delete([self._name])
