"""Where module code's `print()` goes during a run: stderr, one redacted line at a time.

stdout belongs to the CLI's own result (`--json` documents), so plugin output is sent
to stderr; plugin text is untrusted, so each line passes `redact_text` first. Lines are
buffered per thread: stages run on a thread pool, and a line assembled from several
threads' writes could split a token so that neither half matches a credential shape.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from typing import Final, TextIO

from runjournal.domain.redaction import redact_text

__all__ = ["MAX_PENDING", "RedactingLineWriter", "module_stdout_to_stderr"]

MAX_PENDING: Final = 64 * 1024
"""A partial line longer than this many characters is written (redacted) without its end."""


class RedactingLineWriter(io.TextIOBase):
    """A text stream that writes `redact_text(line)` to `target` for each complete line.

    Thread-safe; a thread's partial line waits for its newline, or for `close()`, or
    for `MAX_PENDING` characters. `flush()` flushes the target but keeps partial lines
    (a secret printed in two pieces would otherwise escape as two harmless halves).
    """

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target
        self._lock = threading.Lock()
        self._pending: dict[int, list[str]] = {}  # thread -> pieces of its partial line
        self._sizes: dict[int, int] = {}

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        if self.closed:
            raise ValueError("write to a closed module output stream")
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not s:
            return 0
        thread = threading.get_ident()
        with self._lock:
            pieces = self._pending.setdefault(thread, [])
            size = self._sizes.get(thread, 0) + len(s)
            if "\n" not in s and size <= MAX_PENDING:
                pieces.append(s)  # no copy: a long line written piecemeal stays linear
                self._sizes[thread] = size
                return len(s)
            pieces.append(s)
            text = "".join(pieces)
            del self._pending[thread]
            self._sizes.pop(thread, None)
            complete, newline, rest = text.rpartition("\n")
            out = _redacted_lines(complete) if newline else ""
            if len(rest) > MAX_PENDING:
                out += _redacted_lines(rest)
            elif rest:
                self._pending[thread] = [rest]
                self._sizes[thread] = len(rest)
            self._target.write(out)
            self._target.flush()
        return len(s)

    def flush(self) -> None:
        if not self.closed:
            with self._lock:
                self._target.flush()

    def close(self) -> None:
        """Write every thread's partial line (redacted, newline-terminated), then stop."""
        if self.closed:
            return
        with self._lock:
            rest = [_redacted_lines("".join(p)) for _, p in sorted(self._pending.items()) if p]
            self._pending.clear()
            self._sizes.clear()
            if rest:
                self._target.write("".join(rest))
            self._target.flush()
        super().close()


def _redacted_lines(text: str) -> str:
    """`text` redacted as one piece (a multi-line PEM block is one span), then a newline."""
    return redact_text(text) + "\n"


@contextlib.contextmanager
def module_stdout_to_stderr() -> Iterator[RedactingLineWriter]:
    """Redirect `sys.stdout` to a redacting writer over the current `sys.stderr`."""
    writer = RedactingLineWriter(sys.stderr)
    try:
        with contextlib.redirect_stdout(writer):
            yield writer
    finally:
        writer.close()
