"""The cache root's lock: runs share it, `gc` holds it alone (docs/operations.md
"Retention and cleanup").

An `flock` on the cache root directory itself, through a descriptor of the confined root
(`FsRoot.lock_handle`): no lock file, so a run leaves nothing under the cache root it did
not mean to write, and a swapped path cannot redirect it. The kernel drops a lock when its
process dies: a killed run never blocks a later `gc`.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable

from runjournal.adapters.fsroot import FsRoot

_POLL = 0.05


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
