"""Open directory handles beneath one root, shared safely between threads.

A bounded LRU of `FsRoot` subroots, so a store reads many files of one directory by leaf
name without resolving the path again each time. Handles are *lent*, never handed over:
`lend(name)` counts a borrower for the duration of its `with` block, and a handle the LRU
evicts (or `close` drops) is closed only when its last borrower returns it. So no thread
can ever use a handle another thread closed
(docs/internals.md "Objects shared between threads").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from runjournal.adapters.fsroot import FsRoot

__all__ = ["DEFAULT_CAPACITY", "DirectoryHandles"]

# A lane's checkpoints live in one or two directories and a run has at most `--jobs`
# lanes in flight; past that, a miss costs one `openat2`.
DEFAULT_CAPACITY = 16


class _Lent:
    """One open handle and how many threads hold it now."""

    __slots__ = ("borrowers", "handle", "retired")

    def __init__(self, handle: FsRoot) -> None:
        self.handle = handle
        self.borrowers = 0
        self.retired = False  # out of the LRU: closed when `borrowers` drops to 0


class DirectoryHandles:
    """Directories beneath `root`, opened on first use and kept open up to `capacity`.

    Every field is guarded by one lock; opening and closing happen outside it. `root`
    itself is borrowed, never closed here: it must outlive this object.
    """

    def __init__(self, root: FsRoot, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a directory handle cache needs a capacity of at least 1")
        self._root = root
        self._capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[str, _Lent] = OrderedDict()
        self._closed = False

    @property
    def capacity(self) -> int:
        return self._capacity

    @contextmanager
    def lend(self, name: str) -> Iterator[FsRoot]:
        """The open directory `name` (relative to the root) for the `with` block.

        Raises FsNotFound (or another FsError) when it cannot be opened; a failure is not
        cached, so a directory created later is found.
        """
        lent = self._borrow(name)
        try:
            yield lent.handle
        finally:
            self._give_back(lent)

    def read_bytes(self, directory: str, leaf: str) -> bytes:
        """`leaf` of `directory`, read through its lent handle: `lend` without the
        generator, for the checkpoint loader's hot path (docs/performance.md "Fully cached
        `run --resume`")."""
        lent = self._borrow(directory)
        try:
            return lent.handle.read_bytes(leaf)
        finally:
            self._give_back(lent)

    def _borrow(self, name: str) -> _Lent:
        with self._lock:
            lent = self._open.get(name)
            if lent is not None:
                self._open.move_to_end(name)
                lent.borrowers += 1
                return lent
        fresh = _Lent(self._root.subroot(name))  # outside the lock: a syscall or a walk
        evicted: list[FsRoot] = []
        with self._lock:
            if self._closed:  # a straggler after `close`: lent once, closed when given back
                fresh.retired, fresh.borrowers = True, 1
                return fresh
            lent = self._open.get(name)
            if lent is None:  # still absent: ours goes in
                lent = self._open[name] = fresh
            else:  # another thread opened it meanwhile: keep theirs, close ours
                self._open.move_to_end(name)
                evicted.append(fresh.handle)
            lent.borrowers += 1
            while len(self._open) > self._capacity:
                evicted.extend(self._retire(self._open.popitem(last=False)[1]))
        for handle in evicted:
            handle.close()
        return lent

    def _give_back(self, lent: _Lent) -> None:
        with self._lock:
            lent.borrowers -= 1
            last = lent.retired and lent.borrowers == 0
        if last:
            lent.handle.close()

    @staticmethod
    def _retire(lent: _Lent) -> list[FsRoot]:
        """Take `lent` out of service (the caller holds the lock); what can close now."""
        lent.retired = True
        return [lent.handle] if lent.borrowers == 0 else []

    def close(self) -> None:
        """Close every handle no thread holds; a held one closes when it is given back.
        A `lend` after this still works, with a handle closed at the end of its block."""
        with self._lock:
            self._closed = True
            idle = [h for lent in self._open.values() for h in self._retire(lent)]
            self._open.clear()
        for handle in idle:
            handle.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)
