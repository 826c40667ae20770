"""`--executor processes`: a local pool of `--jobs` worker processes.

Workers are started by a forkserver (spawn where there is none), never by a plain fork of
the coordinator, which has threads (the journal's, the checkpoint writers'). A worker that
dies breaks a `ProcessPoolExecutor` for every call in flight: the pool is replaced and the
calls are submitted again (`OffloadingExecutor`), each one at most `RESUBMIT_LOST` times.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from runjournal.adapters.executors.worker import init_process_worker, run_stage_task
from runjournal.domain.runner.tasks import StageTask

__all__ = ["RESUBMIT_LOST", "ProcessWorkers"]

# Attempts of one call whose worker died, after the first (Dask's allowed-failures is 3).
RESUBMIT_LOST = 2
_WORKER_MODULE = "runjournal.adapters.executors.worker"


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([_WORKER_MODULE])  # each fork starts with it loaded
        return context
    return multiprocessing.get_context("spawn")


class ProcessWorkers:
    """A process pool that is replaced when one of its workers dies."""

    resubmit_lost = RESUBMIT_LOST

    def __init__(self, jobs: int) -> None:
        self._jobs = jobs
        self._context = _context()
        self._pool: ProcessPoolExecutor | None = self._new_pool()
        self.pools = 1  # how many pools were started (a replaced one counts)

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self._jobs,
            mp_context=self._context,
            initializer=init_process_worker,
            initargs=(os.getpid(),),
        )

    def submit(self, task: StageTask) -> Future[object]:
        if self._pool is None:
            raise RuntimeError("the process pool is closed")
        try:
            return self._pool.submit(run_stage_task, task)
        except BrokenProcessPool:
            broken, self._pool = self._pool, self._new_pool()
            self.pools += 1
            broken.shutdown(wait=False, cancel_futures=True)
            return self._pool.submit(run_stage_task, task)

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, BrokenProcessPool)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
