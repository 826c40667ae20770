"""`--jobs N`: the executor the runner's scheduler runs module calls on.

The scheduler (`domain/runner/scheduler.py`) decides what runs and keeps at most
`capacity` calls in flight across every ready lane; this executor only runs them and
reports each completion to the calling thread, which stores results, checkpoints and
journals (so the journal session is used by one thread only).
One pool is created per `run` invocation and shut down when the run ends. With N == 1
there is no pool at all: plain serial calls on the calling thread, so `--jobs 1`
behaves exactly like the runner's own default (`SerialExecutor`).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from runjournal.adapters.parking import ParkingLot

if TYPE_CHECKING:  # imported when a pool is made: `--jobs 1` runs without threads
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["LOCAL_WRITE_THREADS", "MAX_WRITE_THREADS", "CheckpointWritePool", "JobPool"]

# Checkpoint writer threads at most: enough to overlap an object store's network puts.
MAX_WRITE_THREADS = 8
# ... and for a local cache root, whose writes (packed entries, no fsync) serialize on the
# store's write lock: more threads only hand the GIL around (docs/performance.md
# "Concurrency: `--jobs N` against an LLM endpoint").
LOCAL_WRITE_THREADS = 2
# Queued checkpoint writes one writer thread takes at once.
_WRITE_BATCH = 64

# How long one wait for a completion blocks before it waits again: bounds how late a
# signal handler's exception is raised on the calling thread.
_WAIT_S = 0.2


class JobPool:
    """Runs submitted calls on up to `jobs` worker threads; completions in finishing order.

    Threads (not processes) because modules share the run's decoded context and most
    useful parallelism is waiting on an LLM runtime.
    """

    def __init__(self, jobs: int) -> None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
        self.jobs = jobs
        self._pool: ThreadPoolExecutor | None = None
        if jobs > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="runjournal-job")
        self._done: queue.SimpleQueue[tuple[int, Future[Any] | None]] = queue.SimpleQueue()
        self._serial: deque[tuple[int, Callable[[], Any]]] = deque()
        # parked calls (docs/internals.md "Batch runs"): off until `allow_parking`
        self._parking: ParkingLot | None = None
        self._active = 0  # submitted and not reported done
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """How many calls the scheduler may keep in flight (parked calls free their slot)."""
        if self._parking is not None:
            return self.jobs + min(self._parking.count, self._parking.limit)
        return self.jobs if self._pool is not None else 1

    def allow_parking(self, limit: int) -> None:
        """Let up to `limit` calls park while they wait for an LLM batch (a step in batch
        mode): job threads are made for them, at most `jobs` of them run at once, and
        when every call in flight is parked `next_done` flushes the batches. Called
        before the first call is submitted (when the batch step's runtime is built)."""
        if self._parking is not None or limit < 1:
            return
        from concurrent.futures import ThreadPoolExecutor

        old = self._pool
        self._pool = ThreadPoolExecutor(
            max_workers=self.jobs + limit, thread_name_prefix="runjournal-job"
        )
        if old is not None:
            old.shutdown(wait=True)
        self._parking = ParkingLot(self.jobs, limit, self._lock, self._done)

    def submit(self, key: int, call: Callable[[], Any]) -> None:
        pool = self._pool
        if pool is None:
            self._serial.append((key, call))
            return
        parking = self._parking
        if parking is not None:
            call = parking.parkable(call)
            with self._lock:
                self._active += 1
        future = pool.submit(call)
        future.add_done_callback(lambda f, key=key: self._finished(key, f))

    def _finished(self, key: int, future: Future[Any]) -> None:
        self._done.put((key, future))
        if self._parking is not None:
            with self._lock:  # after the put: a flush never runs while a result waits
                self._active -= 1

    def next_done(self) -> tuple[int, Any]:
        """The next finished call's key and result (its exception is raised here), or
        `SLOT_FREED` when a call parked (the scheduler may start another)."""
        if self._serial:
            key, call = self._serial.popleft()
            return key, call()
        parking = self._parking
        wait = 0.02 if parking is not None else _WAIT_S
        while True:
            try:
                key, future = self._done.get(timeout=wait)
            except queue.Empty:
                if parking is not None:  # every call in flight parked: send the batches
                    parking.flush_if_idle(lambda: self._active)
                continue
            if future is None:
                return key, None
            return key, future.result()

    def close(self) -> None:
        """Wait for running work, drop queued work; idempotent, then serial."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> JobPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class CheckpointWritePool:
    """Checkpoint writes on their own threads, so a result's fsyncs never hold up the
    scheduler (`RunLedger` waits for each when it journals the lane, in plan order).

    The recorder is safe for this: its manifest write and its `latest` pointers are
    locked, its workspace lends directory handles under a lock, its zstd contexts are
    per thread, and `FsRoot` writes are atomic per file
    (docs/internals.md "Objects shared between threads").
    """

    def __init__(self, recorder: Any, threads: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._recorder = recorder
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="runjournal-ckpt")
        # Writes queue here; up to `threads` drainers each take what is queued (up to
        # _WRITE_BATCH) and write it at once (`write_many`: one index transaction of a
        # packed store), so a burst of results costs a few transactions, not one each.
        self._many = getattr(recorder, "write_many", None)
        self._threads = threads
        self._queue: deque[tuple[Any, Any, Future[Any]]] = deque()
        self._lock = threading.Lock()
        self._drainers = 0

    def submit(
        self, key: Any, record: Any, then: Callable[[], None] | None = None
    ) -> Callable[[], tuple[str, int]]:
        if self._many is None:
            future = self._pool.submit(self._recorder.write, key, record)
        else:
            from concurrent.futures import Future

            future = Future()
            with self._lock:
                self._queue.append((key, record, future))
                start = self._drainers < self._threads
                if start:
                    self._drainers += 1
            if start:
                self._pool.submit(self._drain)
        if then is not None:  # the stage's lease: released once its checkpoint is there
            future.add_done_callback(lambda _: then())
        return future.result

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._drainers -= 1
                    return
                take = min(len(self._queue), _WRITE_BATCH)
                batch = [self._queue.popleft() for _ in range(take)]
            try:
                results = self._many([(key, record) for key, record, _ in batch])
            except BaseException as exc:  # a recorder bug: every write of the batch fails
                results = [exc] * len(batch)
            for (_, _, future), result in zip(batch, results, strict=True):
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def close(self) -> None:
        """Wait for every write (each is journaled or reported by whoever waits on it)."""
        self._pool.shutdown(wait=True)
