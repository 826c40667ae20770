"""`--executor processes`: a local pool of `--jobs` worker processes.

Workers are started by a forkserver (spawn where there is none), never by a plain fork of
the coordinator, which has threads (the journal's, the checkpoint writers'). A worker that
dies breaks a `ProcessPoolExecutor` for every call in flight, and which call killed it
cannot be known. So a death is charged to no call of the shared pool: the pool is
replaced for the calls to come, and the calls it had in flight become *suspects*, run
again one at a time in a pool of one process (`_Quarantine`). There a death is that
call's own: it is charged to it, and a call charged `CHARGED_DEATHS` times fails with
`WorkerLost` (the run's `worker_lost`), that call only; a suspect that answers is done.
So a module that crashes its worker once costs the calls beside it a second run, never
their outcome (docs/operations.md "Executors").
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from runjournal.adapters.executors.worker import init_process_worker, run_stage_task
from runjournal.domain.runner.tasks import StageTask

__all__ = ["CHARGED_DEATHS", "ProcessWorkers", "WorkerLost"]

# Deaths of one call run alone before it is given up (its first, shared, death is free).
CHARGED_DEATHS = 2
_WORKER_MODULE = "runjournal.adapters.executors.worker"


class WorkerLost(Exception):
    """A call whose worker died every time it ran alone; `deaths` counts every death."""

    def __init__(self, deaths: int) -> None:
        super().__init__(f"its worker died {deaths} time(s), {CHARGED_DEATHS} of them alone")
        self.deaths = deaths


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([_WORKER_MODULE])  # each fork starts with it loaded
        return context
    return multiprocessing.get_context("spawn")


class _Suspect:
    def __init__(self, task: StageTask, outer: Future[Any]) -> None:
        self.task = task
        self.outer = outer
        self.deaths = 1  # the shared pool's, not charged


class ProcessWorkers:
    """A process pool replaced when a worker dies; the calls it had run again alone."""

    resubmit_lost = 0  # the attribution is done here: see the module docstring

    def __init__(self, jobs: int) -> None:
        self._jobs = jobs
        self._context = _context()
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = self._new_pool(jobs)
        self.pools = 1  # how many pools were started (replaced and quarantine ones count)
        self._suspects: deque[_Suspect] = deque()
        self._wake = threading.Condition(self._lock)
        self._quarantine: threading.Thread | None = None
        self._closing = False
        self.charged = 0  # deaths charged to a call run alone (tests read it)

    def _new_pool(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=self._context,
            initializer=init_process_worker,
            initargs=(os.getpid(),),
        )

    def submit(self, task: StageTask) -> Future[Any]:
        outer: Future[Any] = Future()
        with self._lock:
            if self._pool is None:
                raise RuntimeError("the process pool is closed")
            try:
                inner = self._pool.submit(run_stage_task, task)
            except BrokenProcessPool:
                broken, self._pool = self._pool, self._new_pool(self._jobs)
                self.pools += 1
                broken.shutdown(wait=False, cancel_futures=True)
                inner = self._pool.submit(run_stage_task, task)
        inner.add_done_callback(lambda f: self._settle(task, outer, f))
        return outer

    def _settle(self, task: StageTask, outer: Future[Any], inner: Future[Any]) -> None:
        """A shared-pool attempt ended: its outcome, or a suspect when the pool broke."""
        if inner.cancelled():
            outer.cancel() or outer.set_exception(BrokenProcessPool("cancelled"))
            return
        exc = inner.exception()
        if isinstance(exc, BrokenProcessPool):
            with self._lock:
                if not self._closing:
                    self._suspects.append(_Suspect(task, outer))
                    self._start_quarantine()
                    self._wake.notify()
                    return
        _complete(outer, inner)

    def _start_quarantine(self) -> None:
        if self._quarantine is None:
            self._quarantine = threading.Thread(
                target=self._run_suspects, name="runjournal-quarantine", daemon=True
            )
            self._quarantine.start()

    def _run_suspects(self) -> None:
        """One suspect at a time in a pool of one process: a death there is its own."""
        alone: ProcessPoolExecutor | None = None
        try:
            while True:
                with self._lock:
                    while not self._suspects and not self._closing:
                        self._wake.wait()
                    if not self._suspects:
                        return
                    suspect = self._suspects.popleft()
                    if alone is None:
                        alone = self._new_pool(1)
                        self.pools += 1
                inner = alone.submit(run_stage_task, suspect.task)
                wait([inner])  # run_stage_task itself never raises
                if not inner.cancelled() and isinstance(inner.exception(), BrokenProcessPool):
                    alone.shutdown(wait=False, cancel_futures=True)
                    alone = None
                    suspect.deaths += 1
                    self.charged += 1
                    if suspect.deaths > CHARGED_DEATHS:
                        suspect.outer.set_exception(WorkerLost(suspect.deaths))
                    else:
                        with self._lock:
                            self._suspects.appendleft(suspect)
                    continue
                _complete(suspect.outer, inner)
        finally:
            if alone is not None:
                alone.shutdown(wait=True)

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, (WorkerLost, BrokenProcessPool))

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._closing = True
            self._wake.notify_all()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self._quarantine is not None:
            self._quarantine.join()  # the suspects still queued are run, then it ends


def _complete(outer: Future[Any], inner: Future[Any]) -> None:
    exc = inner.exception()
    if exc is not None:
        outer.set_exception(exc)
    else:
        outer.set_result(inner.result())
