"""`--executor dask` starts its LocalCluster on free loopback ports only
(adapters/executors/dask_workers.py).

`dashboard_address=None` still made the scheduler's HTTP server listen on 127.0.0.1:8787,
Dask's fixed default: a second run on the machine (or any other Dask there) got a warning
and another port, and tests must use random ports only.
"""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from runjournal.adapters.executors.dask_workers import DaskWorkers


def test_the_local_cluster_listens_on_no_fixed_port() -> None:
    workers = DaskWorkers(1)
    try:
        scheduler = workers._cluster.scheduler  # the cluster it started
        ports = {scheduler.http_server.port} if scheduler.http_server else set()
        ports.add(int(scheduler.address.rsplit(":", 1)[1]))
        assert 8787 not in ports, ports
        assert scheduler.address.startswith("tcp://127.0.0.1:")
    finally:
        workers.close()
