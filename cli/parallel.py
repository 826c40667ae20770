"""`--jobs N`: the map the runner uses to execute a lane's extract stages.

The runner decides every stage before executing any, then stores results in chunk
order on the calling thread as they arrive; this map yields results lazily in input
order, so a finished stage is checkpointed while later ones still run (an interrupt
loses only the stages in flight).
One thread pool is created per `run` invocation (not per lane) and shut down when
the run ends. With N == 1 there is no pool at all: plain serial calls on the
calling thread, so `--jobs 1` behaves exactly like the runner's own default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["ThreadPoolMap", "serial_map"]

T = TypeVar("T")
R = TypeVar("R")


def serial_map(fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
    """Call `fn` on each item in order on the calling thread, as the caller iterates."""
    return (fn(item) for item in items)


def _in_order(futures: list[Future[Any]]) -> Iterator[Any]:
    try:
        for future in futures:
            yield future.result()
    except BaseException:  # a stage error, SIGINT raised in this thread, or an early stop
        for future in futures:
            future.cancel()
        raise


class ThreadPoolMap:
    """An order-preserving map over a pool of `jobs` worker threads.

    Threads (not processes) because modules share the run's decoded context and
    most useful parallelism is waiting on an LLM runtime. The first exception in
    input order propagates; work not yet started is cancelled.
    """

    def __init__(self, jobs: int) -> None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
        self.jobs = jobs
        self._pool: ThreadPoolExecutor | None = None
        if jobs > 1:
            self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="runjournal-job")

    def __call__(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
        pool = self._pool
        if pool is None or len(items) <= 1:
            return serial_map(fn, items)
        futures: list[Future[Any]] = [pool.submit(fn, item) for item in items]
        return _in_order(futures)

    def close(self) -> None:
        """Wait for running work, drop queued work; idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ThreadPoolMap:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
