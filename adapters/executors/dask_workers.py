"""`--executor dask` (a `distributed.LocalCluster` of `--jobs` worker processes on
loopback) and `--executor dask://HOST:PORT` (an existing scheduler).

`distributed` is the optional extra `runjournal[dask]`, imported only here, only when such
an executor is chosen. A worker that dies mid-call is first the scheduler's to handle: it
reschedules the call on another worker, up to its `allowed-failures`, then `KilledWorker`.
Dask charges a death to every task the dead worker was processing, so an innocent call
queued behind a crashing one can be `KilledWorker` too: such a call is submitted once
more from here (a new key, a fresh count), then it is `worker_lost`
(docs/operations.md "Executors").

The local cluster keeps its `--jobs` workers: Dask's `SpecCluster` hard-closes the nanny
of a worker that has not re-registered `lost-worker-timeout` (15 s) after it died, and
nothing starts another, so a module that crashes workers while the machine is slow to
restart them could leave a cluster of no workers and calls queued for good. Here a nanny
is never closed that way: it restarts its worker, as long as the run lasts. And whatever
the cluster, a run is never left waiting on a cluster without workers: `stalled` says so
after `NO_WORKERS_S`, and the calls still pending fail with `worker_lost`.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import CancelledError
from typing import Any

from runjournal.adapters.executors import ExecutorUnavailable
from runjournal.adapters.executors.worker import OpenCache, run_stage_task
from runjournal.domain.runner.tasks import StageTask

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MISSING_EXTRA",
    "NO_WORKERS_S",
    "DaskWorkers",
    "ExecutorUnavailable",
]

MISSING_EXTRA = (
    "--executor {value} needs Dask's distributed scheduler, an optional extra: "
    "pip install 'runjournal[dask]'"
)
CONNECT_TIMEOUT_S = 10
# How long a cluster may have no worker at all while calls are pending before they fail.
NO_WORKERS_S = 120.0
# Dask's `distributed.deploy.lost-worker-timeout` for the local cluster: never, in effect.
_KEEP_NANNIES = "3650 days"


def _distributed(value: str) -> Any:
    try:
        import distributed
    except ImportError:
        raise ExecutorUnavailable(MISSING_EXTRA.format(value=value)) from None
    return distributed


class DaskWorkers:
    """Calls submitted to a Dask cluster; the cluster too when this process started it."""

    resubmit_lost = 1  # after the scheduler's own retries: an innocent `KilledWorker`

    def __init__(
        self,
        jobs: int,
        address: str | None = None,
        no_workers_s: float = NO_WORKERS_S,
        open_cache: OpenCache | None = None,
    ) -> None:
        value = "dask" if address is None else f"dask://{address.removeprefix('tcp://')}"
        distributed = _distributed(value)
        self._killed = distributed.KilledWorker
        self._cluster: Any = None
        self._no_workers_s = no_workers_s
        # how a worker opens a bucket cache root itself (docs/internals.md
        # "Object-storage cache"): with it, workers read and write checkpoints there
        self._open_cache = open_cache
        self.direct_io = open_cache is not None
        self._workers_seen = time.monotonic()
        try:
            if address is None:
                import dask

                # read when a worker is removed, in this process: see the module docstring
                dask.config.set({"distributed.deploy.lost-worker-timeout": _KEEP_NANNIES})
                self._cluster = distributed.LocalCluster(
                    n_workers=jobs,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    # its HTTP server on a free loopback port: `None` still binds 8787,
                    # which a second run (or any other Dask) on the machine holds
                    dashboard_address="127.0.0.1:0",
                    silence_logs=logging.ERROR,
                )
                self._client = distributed.Client(self._cluster, set_as_default=False)
            else:
                self._client = distributed.Client(
                    address, timeout=CONNECT_TIMEOUT_S, set_as_default=False
                )
        except Exception as exc:
            if self._cluster is not None:
                self._cluster.close()
            where = "start a local Dask cluster" if address is None else f"reach {value}"
            raise ExecutorUnavailable(f"cannot {where}: {type(exc).__name__}: {exc}") from None

    @property
    def scheduler_address(self) -> str:
        return str(self._client.scheduler.address)

    def submit(self, task: StageTask) -> Any:
        return self._client.submit(run_stage_task, task, self._open_cache, pure=False)

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, (self._killed, CancelledError, TimeoutError))

    def stalled(self) -> str | None:
        """Why pending calls cannot finish (no worker for `no_workers_s`), else None."""
        try:
            workers = len(self._client.scheduler_info(n_workers=-1).get("workers", {}))
        except Exception:
            workers = 0
        now = time.monotonic()
        if workers:
            self._workers_seen = now
            return None
        idle = now - self._workers_seen
        if idle < self._no_workers_s:
            return None
        return f"the Dask cluster has had no worker for {idle:.0f} s"

    def cancel(self, future: Any) -> None:
        future.cancel()

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
