"""A progress line on stderr for runs longer than a moment (only on a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

DELAY_S = 0.5
INTERVAL_S = 0.1


class ProgressDisplay:
    def __init__(self, *, enabled: bool, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._enabled = enabled and self._stream.isatty()
        self._start = time.monotonic()
        self._last = 0.0
        self._shown = False

    def __call__(self, step: str, lane: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._start < DELAY_S or (now - self._last < INTERVAL_S and done != total):
            return
        self._last = now
        line = f"{step} · {lane} · chunk {done}/{total}"
        self._stream.write("\r\x1b[2K" + line[:120])
        self._stream.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._shown = False
