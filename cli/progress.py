"""A progress line on stderr while a run works (only on a terminal).

What it shows (docs/operations.md "Progress and colour"):

- start-up phases (`opening the journal`, `resolving pipeline 'glossary'`), at once;
- fed live from the journal (`event`, a session listener): chunk planning per source
  and every stage decision, so a fully reused run shows its progress too;
- the extract calls of a lane (`step · lane · chunk 3/7`, from the runner).

Updates other than phases wait `DELAY_S` after start, so a quick run prints nothing that
lasts. On a capable terminal the line is rewritten in place (`\\r\\x1b[2K`) and cleared
at the end; with `TERM=dumb` no escape sequence is written: a plain line at most every
`DUMB_INTERVAL_S`, and for each phase.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from runjournal.cli.style import dumb_terminal, is_terminal
from runjournal.domain.events import ChunkPlanResolved, RunEvent, StageDecided

DELAY_S = 0.5
INTERVAL_S = 0.1
DUMB_INTERVAL_S = 2.0
MAX_WIDTH = 120
CLEAR = "\r\x1b[2K"

_active: list[ProgressDisplay] = []  # displays with a line on screen, for `clear_active`


def clear_active() -> None:
    """Clear any progress line before something else is printed on stderr."""
    for display in list(_active):
        display.finish()


class ProgressDisplay:
    def __init__(
        self,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream or sys.stderr
        self._enabled = enabled and is_terminal(self._stream)
        self._dumb = dumb_terminal(env)
        self._clock = clock
        self._start = clock()
        self._last = float("-inf")
        self._shown = False
        self._lock = threading.Lock()
        self._decided = 0
        self._reused = 0

    # --- what is shown --------------------------------------------------------------

    def phase(self, text: str) -> None:
        """A start-up phase: shown at once (it may last a while, e.g. loading modules)."""
        self._show(text, urgent=True)

    def __call__(self, step: str, lane: str, done: int, total: int) -> None:
        """The runner's extract progress of one lane."""
        self._show(f"{step} · {lane} · chunk {done}/{total}", last=done == total)

    def event(self, event: RunEvent) -> None:
        """A journal listener: planning and decisions, so reused work shows progress too."""
        if not self._enabled:
            return
        if isinstance(event, StageDecided):
            self._decided += 1
            if event.code.value in ("reused", "predecessor_reused"):
                self._reused += 1
            self._show(
                f"{event.step} · {event.lane} · {event.stage.value} {event.code.value} "
                f"({self._decided} decided, {self._reused} reused)"
            )
        elif isinstance(event, ChunkPlanResolved):
            self._show(f"planning chunks · {event.source}")

    def finish(self) -> None:
        with self._lock:
            if self._shown and not self._dumb:
                self._stream.write(CLEAR)
                self._stream.flush()
            self._shown = False
            if self in _active:
                _active.remove(self)

    # --- how ------------------------------------------------------------------------

    def _show(self, line: str, *, urgent: bool = False, last: bool = False) -> None:
        if not self._enabled:
            return
        now = self._clock()
        if not urgent:
            if now - self._start < DELAY_S:
                return
            interval = DUMB_INTERVAL_S if self._dumb else INTERVAL_S
            if now - self._last < interval and not (last and not self._dumb):
                return
        with self._lock:
            self._last = now
            width = max(20, min(MAX_WIDTH, shutil.get_terminal_size().columns - 1))
            text = line[:width]
            if self._dumb:
                self._stream.write(f"runjournal: {text}\n")
            else:
                self._stream.write(CLEAR + text)
            self._stream.flush()
            self._shown = True
            if self not in _active:
                _active.append(self)
