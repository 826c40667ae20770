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
from typing import Any, Protocol

__all__ = ["Parking", "bind", "current", "parkable"]


class Parking(Protocol):
    def parked(self, flush: Callable[[], None]) -> AbstractContextManager[None]: ...


_local = threading.local()


def bind(parking: Parking | None) -> None:
    """This thread's executor, where a call running on it may park."""
    _local.parking = parking


def current() -> Parking | None:
    """Where the calling thread may park; None on a thread that cannot (a serial run)."""
    return getattr(_local, "parking", None)


def parkable(
    parking: Parking, slots: threading.Semaphore, call: Callable[[], Any]
) -> Callable[[], Any]:
    """`call` as a job thread of `parking` runs it: bound to it, so the call may park, and
    holding one of its run `slots` while it runs (a parked call gives its slot back).
    Shared by the `threads` executor and the offloading one (`processes`, `dask`)."""

    def run() -> Any:
        bind(parking)
        slots.acquire()
        try:
            return call()
        finally:
            slots.release()
            bind(None)

    return run
