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
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from runjournal.adapters.parking import ParkingLot

if TYPE_CHECKING:  # imported when a pool is made: `--jobs 1` runs without threads
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = [
    "LOCAL_WRITE_THREADS",
    "LOCAL_WRITE_WINDOW",
    "MAX_WRITE_THREADS",
    "CheckpointWritePool",
    "JobPool",
]

# Checkpoint writer threads at most: enough to overlap an object store's network puts.
MAX_WRITE_THREADS = 8
# ... and for a local cache root, whose writes (packed entries, no fsync) serialize on the
# store's write lock: more threads only hand the GIL around (docs/performance.md
# "Concurrency: `--jobs N` against an LLM endpoint").
LOCAL_WRITE_THREADS = 2
# How long a local cache root's queued checkpoint writes wait for company at most, when
# no one waits for them sooner (`CheckpointWritePool`'s window): bounds what a SIGKILL
# leaves unwritten of finished stages, at a transaction per window.
LOCAL_WRITE_WINDOW = 0.05
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


class _Pending:
    """What waits for one write of a pool with a window: called, its result (a write
    still queued is written at once); `done()` tells, without waiting, whether it is in
    (the scheduler journals a finished lane once its writes are: `RunLedger.writes_done`)."""

    __slots__ = ("_future", "_pool")

    def __init__(self, pool: CheckpointWritePool, future: Future[Any]) -> None:
        self._pool, self._future = pool, future

    def done(self) -> bool:
        return self._future.done()

    def __call__(self) -> tuple[str, int]:
        return self._pool._wait(self._future)


class CheckpointWritePool:
    """Checkpoint writes on their own threads, so a result's fsyncs never hold up the
    scheduler (`RunLedger` waits for each when it journals the lane, in plan order).

    The recorder is safe for this: its manifest write and its `latest` pointers are
    locked, its workspace lends directory handles under a lock, its zstd contexts are
    per thread, and `FsRoot` writes are atomic per file
    (docs/internals.md "Objects shared between threads").

    With a `window` (seconds; a local cache root's writes), queued writes are written
    together when the queue holds `_WRITE_BATCH`, `window` after a writer thread began
    to wait for more, or when someone waits for one of them (the waiter writes what is
    queued itself: at the run's end, or a lane journaled while the run stops). The
    scheduler journals a finished lane once its writes are in (`_Pending.done`), so
    replies that arrive one by one cost a transaction per window, not one each
    (docs/performance.md "Checkpoint writes in windows").
    """

    def __init__(self, recorder: Any, threads: int, *, window: float = 0.0) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._recorder = recorder
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="runjournal-ckpt")
        # Writes queue here; up to `threads` drainers each take what is queued (up to
        # _WRITE_BATCH) and write it at once (`write_many`: one index transaction of a
        # packed store), so a burst of results costs a few transactions, not one each.
        self._many = getattr(recorder, "write_many", None)
        self._threads = threads
        self._window = window if self._many is not None else 0.0
        self._queue: deque[tuple[Any, Any, Future[Any]]] = deque()
        self._lock = threading.Lock()
        # a drainer lingering for the window waits here; woken by a full batch or
        # `close` (guarded by `_lock`, as every field below)
        self._more = threading.Condition(self._lock)
        self._drainers = 0
        self._lingering = 0
        self._closing = False
        self.batches = 0  # `write_many` calls (index transactions, for tests)

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
                if self._lingering and len(self._queue) >= _WRITE_BATCH:
                    self._more.notify()
                start = self._drainers < self._threads and not self._lingering
                if start:
                    self._drainers += 1
            if start:
                self._pool.submit(self._drain)
        if then is not None:  # the stage's lease: released once its checkpoint is there
            future.add_done_callback(lambda _: then())
        if not self._window:
            return future.result
        return _Pending(self, future)

    def _wait(self, future: Future[Any]) -> tuple[str, int]:
        """The write's result; a write still queued is written now, on this thread, with
        every write queued with it (one transaction; a drainer lingering for the window
        finds the queue empty). One a drainer took is waited for."""
        if not future.done():
            with self._lock:
                queued = any(f is future for _, _, f in self._queue)
                batch = self._take(len(self._queue)) if queued else []
            if batch:
                self._write(batch)
        return future.result()

    def _take(self, most: int) -> list[tuple[Any, Any, Future[Any]]]:
        take = min(len(self._queue), most)
        return [self._queue.popleft() for _ in range(take)]

    def _write(self, batch: list[tuple[Any, Any, Future[Any]]]) -> None:
        assert self._many is not None
        try:
            results = self._many([(key, record) for key, record, _ in batch])
        except BaseException as exc:  # a recorder bug: every write of the batch fails
            results = [exc] * len(batch)
        with self._lock:
            self.batches += 1
        for (_, _, future), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _linger(self) -> None:
        """Under the lock: wait up to the window for a full batch or `close`."""
        self._lingering += 1
        deadline = time.monotonic() + self._window
        try:
            while 0 < len(self._queue) < _WRITE_BATCH and not self._closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._more.wait(left)
        finally:
            self._lingering -= 1

    def _drain(self) -> None:
        while True:
            with self._lock:
                if self._window and self._queue:
                    self._linger()
                if not self._queue:
                    self._drainers -= 1
                    return
                batch = self._take(_WRITE_BATCH)
            self._write(batch)

    def close(self) -> None:
        """Wait for every write (each is journaled or reported by whoever waits on it)."""
        with self._lock:
            self._closing = True
            self._more.notify_all()
        self._pool.shutdown(wait=True)
