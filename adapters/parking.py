"""Parked calls: a job thread that waits for something only the whole run can bring (the
results of an LLM batch) gives its slot back, so the scheduler starts the next calls.

An executor's `ParkingLot` (the `threads` executor's, cli/parallel.py `JobPool`, and the
offloading executor's local threads) binds itself to each job thread (`bind`); a call
that must wait for a batch parks there (`current().parked(flush)`).
When every call in flight is parked and nothing else can start, the executor calls each
parked call's `flush` on the scheduler's thread: the batch is sent and waited for, and
the parked calls go on (docs/internals.md "Batch runs").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from runjournal.domain.runner.scheduler import SLOT_FREED

__all__ = ["Parking", "ParkingLot", "bind", "current"]


class Parking(Protocol):
    def parked(self, flush: Callable[[], None]) -> AbstractContextManager[None]: ...


_local = threading.local()


def bind(parking: Parking | None) -> None:
    """This thread's executor, where a call running on it may park."""
    _local.parking = parking


def current() -> Parking | None:
    """Where the calling thread may park; None on a thread that cannot (a serial run)."""
    return getattr(_local, "parking", None)


class ParkingLot:
    """The parked calls of one executor's job threads (the `threads` executor's, the
    offloading one's local threads): at most `jobs` of them run at once, a parked call
    gives its slot back and tells the scheduler (`SLOT_FREED` on the executor's `done`
    queue) so it may start another, and when every call in flight is parked
    `flush_if_idle` sends what they wait for. `lock` is the executor's own, which also
    guards the count of calls in flight that `flush_if_idle` compares."""

    def __init__(self, jobs: int, limit: int, lock: threading.Lock, done: Any) -> None:
        self.limit = limit
        self.count = 0  # calls parked now
        self._slots = threading.Semaphore(jobs)
        self._lock = lock
        self._done = done
        self._flushes: list[Callable[[], None]] = []

    @contextlib.contextmanager
    def parked(self, flush: Callable[[], None]) -> Iterator[None]:
        """The calling job thread waits for a batch: its slot is free meanwhile, and
        `flush` sends the batch once nothing else can run."""
        with self._lock:
            self.count += 1
            if flush not in self._flushes:
                self._flushes.append(flush)
        self._slots.release()
        self._done.put((SLOT_FREED, None))
        try:
            yield
        finally:
            self._slots.acquire()
            with self._lock:
                self.count -= 1

    def parkable(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """`call` as a job thread runs it: bound to this lot, so it may park, and holding
        one of the run slots while it runs."""

        def run() -> Any:
            bind(self)
            self._slots.acquire()
            try:
                return call()
            finally:
                self._slots.release()
                bind(None)

        return run

    def flush_if_idle(self, in_flight: Callable[[], int]) -> None:
        """Every call in flight (`in_flight()`, read under the lock) is parked and no
        result waits: send what they wait for. On the scheduler's thread."""
        with self._lock:
            idle = self.count > 0 and in_flight() == self.count and self._done.empty()
            flushes = list(self._flushes) if idle else []
        for flush in flushes:
            flush()
