"""The scheduler's `Executor` for `--executor processes|dask` (docs/internals.md "Executors").

A call that can be shipped (its `StageCall.task`) goes to the workers; the rest (LLM-backed
steps, whose endpoint limits and budget live in this process; a module with no shipment)
run on local threads, as with `--executor threads`. Both share the one bound, `capacity`
(`--jobs`). Completions come back to the scheduler's thread, which turns a worker's reply
into the call's outcome (`StageCall.accept`: decoded by this process's codec) and so
stays the only writer of the journal and the checkpoints.

A worker lost mid-call: the `Workers` backend says whether its failure means that
(`lost`) and how often such a call is submitted again (`resubmit_lost`: Dask reschedules
by itself, a process pool is rebuilt); the call's one outcome is reported once, whatever
attempt produced it, and a call every attempt of which lost its worker fails with the
typed cause `worker_lost`.
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from runjournal.domain.llm import FailureCause
from runjournal.domain.runner.boundary import exception_text, is_interrupt
from runjournal.domain.runner.tasks import StageReply, StageTask

__all__ = ["OffloadingExecutor", "Workers"]

# How long one wait for a completion blocks before it waits again: bounds how late a
# signal handler's exception is raised on the calling thread (as `cli/parallel.py`).
_WAIT_S = 0.2


class Workers(Protocol):
    """Where shipped calls run: a process pool, a Dask cluster."""

    resubmit_lost: int  # how many more times a call whose worker was lost is submitted

    def submit(self, task: StageTask) -> Any:
        """Start the task; a future with `add_done_callback` and `result()`."""

    def lost(self, exc: BaseException) -> bool:
        """Whether a task's failure means its worker died (not that the task failed)."""

    def close(self) -> None: ...


@dataclass
class _Pending:
    call: Any
    task: StageTask | None
    future: Any
    attempts: int = 1


class OffloadingExecutor:
    """Ships what can be shipped, runs the rest on local threads (see the module docstring)."""

    def __init__(self, workers: Workers, jobs: int) -> None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
        self.jobs = jobs
        self.workers = workers
        self._threads = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="runjournal-job")
        self._done: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self._pending: dict[int, _Pending] = {}
        self.shipped = 0  # calls sent to the workers (tests and the bench read it)
        self.resubmitted = 0

    @property
    def capacity(self) -> int:
        return self.jobs

    def submit(self, key: int, call: Any) -> None:
        make = getattr(call, "task", None)
        task = make() if make is not None and getattr(call, "accept", None) else None
        if task is None:
            future = self._threads.submit(call)
        else:
            future = self.workers.submit(task)
            self.shipped += 1
        self._pending[key] = _Pending(call, task, future)
        self._watch(key, future)

    def _watch(self, key: int, future: Any) -> None:
        future.add_done_callback(lambda f, key=key: self._done.put((key, f)))

    def next_done(self) -> tuple[int, Any]:
        """The next finished call's key and outcome, each call exactly once."""
        while True:
            try:
                key, future = self._done.get(timeout=_WAIT_S)
            except queue.Empty:
                continue
            entry = self._pending.get(key)
            if entry is None or entry.future is not future:
                continue  # an attempt that was superseded: its call is reported once
            if entry.task is None:
                del self._pending[key]
                return key, future.result()
            reply = self._reply(key, entry)
            if reply is None:
                continue  # submitted again: its worker was lost
            del self._pending[key]
            return key, entry.call.accept(reply)

    def _reply(self, key: int, entry: _Pending) -> StageReply | None:
        try:
            reply = entry.future.result()
        except BaseException as exc:
            if is_interrupt(exc):
                raise
            if not self.workers.lost(exc):
                return StageReply(
                    error=f"WorkerError: the worker could not run the call: {exception_text(exc)}",
                    cause=FailureCause.MODULE_UNAVAILABLE if isinstance(exc, ImportError) else None,
                )
            if entry.attempts <= self.workers.resubmit_lost:
                entry.attempts += 1
                entry.future = self.workers.submit(entry.task)
                self.resubmitted += 1
                self._watch(key, entry.future)
                return None
            return StageReply(
                error=(
                    f"WorkerLost: the worker running this call died, {entry.attempts} "
                    f"time(s) ({exception_text(exc)})"
                ),
                cause=FailureCause.WORKER_LOST,
            )
        if not isinstance(reply, StageReply):
            return StageReply(error=f"WorkerError: not a reply: {type(reply).__name__}")
        return reply

    def close(self) -> None:
        """Wait for running calls, drop queued ones, stop the workers; idempotent."""
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
            self.workers.close()
