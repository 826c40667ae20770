"""A bound on how long one journal operation may wait for a PostgreSQL server.

The library retries a failed connection ten times, each waiting for its pool, and a
server that stops answering leaves a query waiting on its socket for good. So every
PostgreSQL call runs in a daemon thread and is given up after `journal_timeout`
seconds; the store is then not used again by that invocation (docs/internals.md
"Backends").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["TimedOut", "call_bounded"]

_T = TypeVar("_T")


class TimedOut(Exception):
    """The call did not return within its bound (it may still be running)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


def call_bounded(call: Callable[[], _T], seconds: float | None) -> _T:
    """`call()`, or `TimedOut` after `seconds` (None: no bound, run inline)."""
    if seconds is None:
        return call()
    done = threading.Event()
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the waiting thread, raised there
            outcome.append((False, exc))
        finally:
            done.set()

    # A daemon thread: one stuck on a silent socket must not keep the process alive.
    threading.Thread(target=target, name="runjournal-journal-call", daemon=True).start()
    if not done.wait(seconds):
        raise TimedOut(seconds)
    ok, value = outcome[0]  # type: ignore[misc]
    if ok:
        return value  # type: ignore[return-value]
    raise value  # type: ignore[misc]
