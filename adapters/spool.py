"""`FileSpool`: bytes a run sets aside until it writes its outputs.

A lane's artifact that no other step consumes is needed again only when the run writes
its outputs (P5), and the outputs themselves only once their names are validated. Held
in memory, they made a run's peak RSS grow with every document (issue 29). The spool is
one file with no name (O_TMPFILE) beneath the output root, so on the outputs' file
system and never in a tmpfs: `put` appends, `get` reads back by (offset, length), and
the file is gone when the run closes it or its process dies (docs/internals.md "Run
outputs as links").
"""

from __future__ import annotations

import os
import tempfile
import threading

from runjournal.adapters.fsroot import FsRoot


class FileSpool:
    """Append-only bytes by (offset, length); `put` from any thread (its lock), `get`
    reads with `pread` and needs none (docs/internals.md "Objects shared between threads")."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._end = 0  # guarded by _lock

    @classmethod
    def open(cls, root: FsRoot | None) -> FileSpool:
        """A spool beneath `root` where its file system allows a file with no name, else
        in the system's temporary directory (a named file removed at once)."""
        if root is not None:
            try:
                return cls(root.anonymous_file())
            except OSError:
                pass
        handle = tempfile.TemporaryFile()  # noqa: SIM115 - the spool owns the descriptor
        fd = os.dup(handle.fileno())
        handle.close()
        return cls(fd)

    def put(self, data: bytes) -> tuple[int, int]:
        view = memoryview(data)
        with self._lock:
            offset = self._end
            self._end += len(view)
            at = offset
            while view:
                written = os.pwrite(self._fd, view, at)
                view, at = view[written:], at + written
        return offset, len(data)

    def get(self, handle: tuple[int, int]) -> bytes:
        offset, length = handle
        parts: list[bytes] = []
        while length:
            chunk = os.pread(self._fd, length, offset)
            if not chunk:
                raise OSError(f"spool ended {length} bytes early")
            parts.append(chunk)
            offset, length = offset + len(chunk), length - len(chunk)
        return b"".join(parts) if len(parts) != 1 else parts[0]

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
