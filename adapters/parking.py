"""Parked calls: a job thread that waits for something only the whole run can bring (the
results of an LLM batch) gives its slot back, so the scheduler starts the next calls.

The `threads` executor (cli/parallel.py `JobPool`) binds itself to each of its job threads
(`bind`); a call that must wait for a batch parks there (`current().parked(flush)`).
When every call in flight is parked and nothing else can start, the executor calls each
parked call's `flush` on the scheduler's thread: the batch is sent and waited for, and
the parked calls go on (docs/internals.md "Batch runs").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["Parking", "bind", "current"]


class Parking(Protocol):
    def parked(self, flush: Callable[[], None]) -> AbstractContextManager[None]: ...


_local = threading.local()


def bind(parking: Parking | None) -> None:
    """This thread's executor, where a call running on it may park."""
    _local.parking = parking


def current() -> Parking | None:
    """Where the calling thread may park; None on a thread that cannot (a serial run)."""
    return getattr(_local, "parking", None)
