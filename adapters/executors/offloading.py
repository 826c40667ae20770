"""The scheduler's `Executor` for `--executor processes|dask` (docs/internals.md "Executors").

A call that can be shipped (its `StageCall.task`) goes to the workers; the rest (LLM-backed
steps, whose endpoint limits and budget live in this process; a module with no shipment)
run on local threads, as with `--executor threads`. Both share the one bound, `capacity`
(`--jobs`). Completions come back to the scheduler's thread, which turns a worker's reply
into the call's outcome (`StageCall.accept`: decoded by this process's codec) and so
stays the only writer of the journal and the checkpoints.

A worker lost mid-call: the `Workers` backend says whether its failure means that
(`lost`) and how often such a call is submitted again (`resubmit_lost`); the call's one
outcome is reported once, whatever attempt produced it, and a call every attempt of which
lost its worker fails with the typed cause `worker_lost`, that call only.

No shipped call is waited on for good: a finished future's result is fetched with a
deadline (`RESULT_WAIT_S`: a Dask result lost with its worker is computed again, or never),
and a backend that can tell it cannot make progress (`stalled`: a cluster with no worker)
fails the shipped calls still pending with `worker_lost` (docs/operations.md "Executors").

Batch mode (docs/internals.md "Batch runs"): the local threads park calls that wait for
an LLM batch as `--executor threads` does (`allow_parking`, a `ParkingLot`): a parked call gives
its slot back (`SLOT_FREED`), and when every call in flight, shipped ones included, is
parked, `next_done` flushes the batches on the scheduler's thread.

A cache root on a bucket (`share_cache`): shipped calls carry the bucket's identity, and
workers read and write the extract and merge checkpoints there themselves. A reply that
says "written" is checked against the bucket before it is journaled: the ref of the
checkpoint's name must name the envelope digest and size the worker reports (one small
GET, on a checking thread, never the scheduler's); docs/internals.md "Object-storage cache".
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
from runjournal.adapters.parking import ParkingLot
from runjournal.domain.llm import FailureCause
from runjournal.domain.runner.boundary import exception_text, is_interrupt
from runjournal.domain.runner.scheduler import SLOT_FREED
from runjournal.domain.runner.tasks import SharedCache, StageReply, StageTask

__all__ = ["OffloadingExecutor", "Workers"]

# How long one wait for a completion blocks before it waits again: bounds how late a
# signal handler's exception is raised on the calling thread (as `cli/parallel.py`).
_WAIT_S = 0.2
# The same while calls may park: how soon an idle run flushes its batches.
_PARKED_WAIT_S = 0.02
# How long fetching a finished call's result may take before the attempt counts as lost.
RESULT_WAIT_S = 120.0
# How often a backend's `stalled` is asked while shipped calls are pending.
_STALL_CHECK_S = 1.0


class _Stalled(Exception):
    """A pending call given up on: its backend cannot run it (`Workers.stalled`)."""


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
    given_up: bool = False  # failed by `_check_stalled`, its outcome on its way


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
        self._stall_checked = time.monotonic()
        # parked calls (docs/internals.md "Batch runs"): off until `allow_parking`
        self._parking: ParkingLot | None = None
        self._lock = threading.Lock()
        # a bucket cache root (`share_cache`): its identity, the coordinator's store of it
        self._cache: SharedCache | None = None
        self._cache_store: Any = None
        self._checks: ThreadPoolExecutor | None = None
        self._verdicts: dict[int, str | None] = {}  # id(future) -> why its write is refused
        self.written_by_workers = 0  # checkpoints workers wrote and the bucket confirmed

    def share_cache(self, store: Any, pipeline: str) -> None:
        """Let workers read and write checkpoints in `store`'s bucket (an S3PackedStore:
        a store every machine reaches); a local cache root keeps the coordinator's path."""
        url = getattr(store, "url", None)
        if (
            url is None
            or not hasattr(store, "ref_of")
            or not getattr(self.workers, "direct_io", False)
        ):
            return
        self._cache = SharedCache(url.url, store.endpoint, pipeline)
        self._cache_store = store
        self._checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="runjournal-check")

    @property
    def capacity(self) -> int:
        """How many calls the scheduler may keep in flight (parked calls free their slot)."""
        parking = self._parking
        return self.jobs + (min(parking.count, parking.limit) if parking is not None else 0)

    def allow_parking(self, limit: int) -> None:
        """Let up to `limit` local calls park while they wait for an LLM batch: threads
        are made for them, at most `jobs` of them run at once, and when every call in
        flight is parked `next_done` flushes the batches. Called before the first call
        is submitted (when the batch step's runtime is built)."""
        if self._parking is not None or limit < 1 or self._threads is None:
            return
        old = self._threads
        self._threads = ThreadPoolExecutor(
            max_workers=self.jobs + limit, thread_name_prefix="runjournal-job"
        )
        old.shutdown(wait=True)
        self._parking = ParkingLot(self.jobs, limit, self._lock, self._done)

    def submit(self, key: int, call: Any) -> None:
        make = getattr(call, "task", None)
        task = make() if make is not None and getattr(call, "accept", None) else None
        if task is None:
            parking = self._parking
            future = self._threads.submit(parking.parkable(call) if parking is not None else call)
        else:
            if self._cache is not None:
                task = msgspec.structs.replace(task, cache=self._cache)
            elif task.checkpoint is not None:
                task = msgspec.structs.replace(task, checkpoint=None)
            future = self.workers.submit(task)
            self.shipped += 1
        self._pending[key] = _Pending(call, task, future)
        self._watch(key, future, task)

    def _watch(self, key: int, future: Any, task: StageTask | None = None) -> None:
        checks = self._checks
        if task is None or task.cache is None or task.checkpoint is None or checks is None:
            future.add_done_callback(lambda f, key=key: self._done.put((key, f)))
            return

        def check(f: Any) -> None:
            try:
                self._verdicts[id(f)] = self._check(task, f)
            finally:
                self._done.put((key, f))

        future.add_done_callback(lambda f: checks.submit(check, f))

    def _check(self, task: StageTask, future: Any) -> str | None:
        """Why a worker's written checkpoint cannot be journaled as it says; None when
        the bucket's ref names its envelope (digest and size)."""
        try:
            reply = future.result(timeout=RESULT_WAIT_S)
        except BaseException:
            return None  # no reply: `_reply` handles it
        stored = getattr(reply, "stored", None)
        if stored is None or task.cache is None or task.checkpoint is None:
            return None
        from runjournal.adapters.checkpoints import Workspace

        name = f"workspaces/{task.cache.pipeline}/{Workspace.checkpoint_name(task.checkpoint.key)}"
        try:
            ref = self._cache_store.ref_of(name)
        except Exception as exc:
            return f"checkpoint written by a worker could not be checked: {exception_text(exc)}"
        if ref != (stored.sha256, stored.size):
            return f"checkpoint written by a worker is not the bucket's: {name}"
        return None

    def next_done(self) -> tuple[int, Any]:
        """The next finished call's key and outcome, each call exactly once."""
        parking = self._parking
        while True:
            self._check_stalled()
            try:
                key, future = self._done.get(
                    timeout=_PARKED_WAIT_S if parking is not None else _WAIT_S
                )
            except queue.Empty:
                if parking is not None:  # every call in flight parked (the shipped ones
                    # are all done): send what they wait for
                    parking.flush_if_idle(lambda: len(self._pending))
                continue
            if key == SLOT_FREED:
                return key, None  # a call parked: the scheduler may start another
            entry = self._pending.get(key)
            if entry is None or entry.future is not future:
                continue  # an attempt that was superseded: its call is reported once
            if entry.task is None:
                del self._pending[key]
                return key, future.result()
            reply = self._reply(key, entry, future)
            if reply is None:
                continue  # submitted again: its worker was lost
            del self._pending[key]
            return key, entry.call.accept(reply)

    def _check_stalled(self) -> None:
        """Fail the shipped calls still pending when the backend says none can finish."""
        stalled = getattr(self.workers, "stalled", None)
        now = time.monotonic()
        if stalled is None or now - self._stall_checked < _STALL_CHECK_S:
            return
        self._stall_checked = now
        shipped = [
            (k, e) for k, e in self._pending.items() if e.task is not None and not e.given_up
        ]
        if not shipped:
            return
        why = stalled()
        if why is None:
            return
        for key, entry in shipped:
            stale = entry.future
            entry.attempts = self.workers.resubmit_lost + 1  # no attempt left: fail it
            entry.given_up = True
            entry.future = _failed_future(_Stalled(why))
            getattr(self.workers, "cancel", lambda f: None)(stale)
            self._watch(key, entry.future)

    def _reply(self, key: int, entry: _Pending, future: Any) -> StageReply | None:
        verdict = self._verdicts.pop(id(future), "checkpoint written by a worker was not checked")
        try:
            reply = future.result(timeout=RESULT_WAIT_S)
        except BaseException as exc:
            if is_interrupt(exc):
                raise
            if not (isinstance(exc, (_Stalled, TimeoutError)) or self.workers.lost(exc)):
                return StageReply(
                    error=f"WorkerError: the worker could not run the call: {exception_text(exc)}",
                    cause=FailureCause.MODULE_UNAVAILABLE if isinstance(exc, ImportError) else None,
                )
            if entry.attempts <= self.workers.resubmit_lost:
                entry.attempts += 1
                getattr(self.workers, "cancel", lambda f: None)(future)
                entry.future = self.workers.submit(entry.task)
                self.resubmitted += 1
                self._watch(key, entry.future, entry.task)
                return None
            if isinstance(exc, _Stalled):
                error = f"WorkerLost: no worker can run this call: {exc}"
            else:
                deaths = getattr(exc, "deaths", entry.attempts)
                error = (
                    f"WorkerLost: the worker running this call died, {deaths} "
                    f"time(s) ({exception_text(exc)})"
                )
            return StageReply(error=error, cause=FailureCause.WORKER_LOST)
        if not isinstance(reply, StageReply):
            return StageReply(error=f"WorkerError: not a reply: {type(reply).__name__}")
        if reply.stored is not None:
            if verdict is not None:
                stored = msgspec.structs.replace(reply.stored, error=verdict)
                return msgspec.structs.replace(reply, stored=stored)
            self.written_by_workers += 1
        return reply

    def close(self) -> None:
        """Wait for running calls, drop queued ones, stop the workers; idempotent."""
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
            self.workers.close()
        checks, self._checks = self._checks, None
        if checks is not None:
            checks.shutdown(wait=True, cancel_futures=True)


def _failed_future(exc: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(exc)
    return future
