"""`--executor dask` (a `distributed.LocalCluster` of `--jobs` worker processes on
loopback) and `--executor dask://HOST:PORT` (an existing scheduler).

`distributed` is the optional extra `runjournal[dask]`, imported only here, only when such
an executor is chosen. A worker that dies mid-call is the scheduler's to handle: it
reschedules the call on another worker (up to its `allowed-failures`, then `KilledWorker`,
which the run reports as `worker_lost`), so calls are never submitted twice from here.
"""

from __future__ import annotations

import logging
from concurrent.futures import CancelledError
from typing import Any

from runjournal.adapters.executors import ExecutorUnavailable
from runjournal.adapters.executors.worker import run_stage_task
from runjournal.domain.runner.tasks import StageTask

__all__ = ["CONNECT_TIMEOUT_S", "MISSING_EXTRA", "DaskWorkers", "ExecutorUnavailable"]

MISSING_EXTRA = (
    "--executor {value} needs Dask's distributed scheduler, an optional extra: "
    "pip install 'runjournal[dask]'"
)
CONNECT_TIMEOUT_S = 10


def _distributed(value: str) -> Any:
    try:
        import distributed
    except ImportError:
        raise ExecutorUnavailable(MISSING_EXTRA.format(value=value)) from None
    return distributed


class DaskWorkers:
    """Calls submitted to a Dask cluster; the cluster too when this process started it."""

    resubmit_lost = 0  # the scheduler reschedules a lost worker's calls itself

    def __init__(self, jobs: int, address: str | None = None) -> None:
        value = "dask" if address is None else f"dask://{address.removeprefix('tcp://')}"
        distributed = _distributed(value)
        self._killed = distributed.KilledWorker
        self._cluster: Any = None
        try:
            if address is None:
                self._cluster = distributed.LocalCluster(
                    n_workers=jobs,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
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
        return self._client.submit(run_stage_task, task, pure=False)

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, (self._killed, CancelledError))

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
