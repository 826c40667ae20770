"""`OffloadingExecutor` (docs/internals.md "Executors"): each call's outcome once, a lost
worker's call submitted again, the last loss a typed `worker_lost`, unshippable calls on
local threads, and a real process pool that is replaced when a worker dies."""

from __future__ import annotations

import os
import signal
from concurrent.futures import Future
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from runjournal.adapters.executors import offloading
from runjournal.adapters.executors.offloading import OffloadingExecutor
from runjournal.adapters.executors.processes import CHARGED_DEATHS, ProcessWorkers
from runjournal.adapters.s3_store import S3Url
from runjournal.domain.decisions import Stage, StageDigests
from runjournal.domain.llm import FailureCause
from runjournal.domain.modules import Chunk
from runjournal.domain.pipeline import ModuleShipment
from runjournal.domain.ports import CheckpointKey
from runjournal.domain.runner.tasks import (
    CheckpointTarget,
    SharedCache,
    StageCall,
    StageReply,
    StageTask,
    StoredCheckpoint,
    TaskContext,
)


class Lost(Exception):
    """What a fake backend's future fails with when its worker died."""


class FakeWorkers:
    """Futures completed by the test; `plan[i]` says how the i-th submission ends."""

    resubmit_lost = 2

    def __init__(self, plan: list[str]) -> None:
        self.plan = list(plan)
        self.futures: list[Future[Any]] = []
        self.closed = False

    def submit(self, task: StageTask) -> Future[Any]:
        future: Future[Any] = Future()
        self.futures.append(future)
        how = self.plan.pop(0) if self.plan else "ok"
        if how == "lost":
            future.set_exception(Lost())
        elif how == "boom":
            future.set_exception(ImportError("no runjournal here"))
        else:
            future.set_result(StageReply(data=task.chunk_id.encode()))
        return future

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, Lost)

    def close(self) -> None:
        self.closed = True


def _task(chunk: str) -> StageTask:
    context = TaskContext("s", "l", {}, {}, {}, {})
    return StageTask(ModuleShipment("builtin.x", "/"), Stage.EXTRACT, chunk, context)


def _call(chunk: str, *, ship: bool = True) -> StageCall:
    def accept(reply: StageReply) -> tuple[str, Any]:
        return ("accepted", reply)

    if not ship:
        return StageCall(lambda: ("local", chunk))
    return StageCall(lambda: ("local", chunk), lambda: _task(chunk), accept)


def _drain(executor: OffloadingExecutor, n: int) -> dict[int, Any]:
    done: dict[int, Any] = {}
    for _ in range(n):
        key, outcome = executor.next_done()
        assert key not in done  # reported once
        done[key] = outcome
    return done


@hyp_settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ok", "lost"]), max_size=30), st.integers(1, 8))
def test_every_call_is_reported_once_whatever_is_lost(plan: list[str], calls: int) -> None:
    workers = FakeWorkers(plan)
    executor = OffloadingExecutor(workers, 4)
    try:
        for key in range(calls):
            executor.submit(key, _call(str(key)))
        done = _drain(executor, calls)
    finally:
        executor.close()
    assert sorted(done) == list(range(calls))
    for key, (kind, reply) in done.items():
        assert kind == "accepted"
        if reply.error is None:
            assert reply.data == str(key).encode()
        else:
            assert reply.cause is FailureCause.WORKER_LOST
    assert workers.closed
    # a call is submitted at most 1 + resubmit_lost times
    assert len(workers.futures) <= calls * (1 + workers.resubmit_lost)


def test_a_call_lost_every_time_fails_with_worker_lost() -> None:
    workers = FakeWorkers(["lost", "lost", "lost", "ok"])
    executor = OffloadingExecutor(workers, 1)
    executor.submit(0, _call("a"))
    [(_, reply)] = _drain(executor, 1).values()
    executor.close()
    assert len(workers.futures) == 3  # the first attempt and two more, then given up
    assert reply.cause is FailureCause.WORKER_LOST
    assert reply.error.startswith("WorkerLost: the worker running this call died, 3 time(s)")


def test_a_call_lost_once_is_answered_by_its_second_attempt() -> None:
    workers = FakeWorkers(["lost", "ok"])
    executor = OffloadingExecutor(workers, 1)
    executor.submit(0, _call("a"))
    [(kind, reply)] = _drain(executor, 1).values()
    executor.close()
    assert (kind, reply.data, reply.error) == ("accepted", b"a", None)
    assert executor.resubmitted == 1


def test_a_task_that_cannot_even_start_on_a_worker_is_a_stage_error_not_a_crash() -> None:
    workers = FakeWorkers(["boom"])
    executor = OffloadingExecutor(workers, 1)
    executor.submit(0, _call("a"))
    [(_, reply)] = _drain(executor, 1).values()
    executor.close()
    assert reply.cause is FailureCause.MODULE_UNAVAILABLE
    assert "ImportError: no runjournal here" in reply.error


def test_calls_without_a_task_run_on_local_threads() -> None:
    workers = FakeWorkers([])
    executor = OffloadingExecutor(workers, 2)
    executor.submit(0, _call("a", ship=False))
    executor.submit(1, _call("b"))
    done = _drain(executor, 2)
    executor.close()
    assert done == {0: ("local", "a"), 1: ("accepted", StageReply(data=b"b"))}
    assert len(workers.futures) == 1 and executor.shipped == 1


def test_process_pool_is_replaced_when_a_worker_dies(tmp_path) -> None:
    """A real pool: the worker running the first task is killed; its call is run again by
    a new pool, and the reply is the module's."""
    workers = ProcessWorkers(1)
    try:
        # a first call starts the pool's process; learn its pid from the worker itself
        pid_future = workers._pool.submit(os.getpid)  # type: ignore[union-attr]
        pid = pid_future.result(timeout=60)
        chunk = Chunk(id="c1", source="a.md", start=0, end=5, text="hello", sha256="0" * 64)
        context = TaskContext("s", "a.md", {}, {}, {}, {})
        task = StageTask(
            ModuleShipment("builtin.terms", str(tmp_path)), Stage.EXTRACT, "c1", context, chunk
        )
        executor = OffloadingExecutor(workers, 1)
        os.kill(pid, signal.SIGKILL)
        accepted: list[StageReply] = []
        executor.submit(0, StageCall(lambda: None, lambda: task, accepted.append))
        executor.next_done()
        executor.close()
    finally:
        workers.close()
    [reply] = accepted
    assert reply.error is None and reply.data is not None, reply
    assert workers.pools >= 2  # the broken pool was replaced
    assert CHARGED_DEATHS >= 1


@pytest.mark.parametrize("jobs", [0, -1, True, "2"])
def test_jobs_must_be_a_positive_integer(jobs: Any) -> None:
    with pytest.raises(ValueError):
        OffloadingExecutor(FakeWorkers([]), jobs)


class StalledWorkers(FakeWorkers):
    """Futures that never complete, on a backend that says it has no worker."""

    def __init__(self, why: str | None) -> None:
        super().__init__([])
        self.why = why
        self.cancelled: list[Future[Any]] = []

    def submit(self, task: StageTask) -> Future[Any]:
        future: Future[Any] = Future()
        self.futures.append(future)
        return future

    def stalled(self) -> str | None:
        return self.why

    def cancel(self, future: Future[Any]) -> None:
        self.cancelled.append(future)
        future.cancel()


def test_calls_pending_on_a_backend_without_workers_fail_with_worker_lost(monkeypatch) -> None:
    """Issue #25 (defect 5): a Dask cluster left with no worker never completes its
    futures; the run is not left waiting on them."""
    monkeypatch.setattr(offloading, "_STALL_CHECK_S", 0.0)
    workers = StalledWorkers("the Dask cluster has had no worker for 120 s")
    executor = OffloadingExecutor(workers, 2)
    executor.submit(0, _call("a"))
    executor.submit(1, _call("b", ship=False))
    done = _drain(executor, 2)
    executor.close()
    assert done[1] == ("local", "b")  # a local call is not the cluster's
    _, reply = done[0]
    assert reply.cause is FailureCause.WORKER_LOST
    assert reply.error == (
        "WorkerLost: no worker can run this call: the Dask cluster has had no worker for 120 s"
    )
    assert workers.cancelled == workers.futures[:1]  # the stale future is let go


def test_a_result_that_cannot_be_fetched_in_time_counts_as_a_lost_worker(monkeypatch) -> None:
    monkeypatch.setattr(offloading, "RESULT_WAIT_S", 0.01)

    class Unfetchable(FakeWorkers):
        def submit(self, task: StageTask) -> Any:
            real = super().submit(task)
            if len(self.futures) > 1:
                return real

            class Slow:  # done, but its result never arrives (a Dask gather that waits)
                def add_done_callback(self, fn: Any) -> None:
                    fn(self)

                def result(self, timeout: float | None = None) -> Any:
                    raise TimeoutError

            return Slow()

    workers = Unfetchable([])
    executor = OffloadingExecutor(workers, 1)
    executor.submit(0, _call("a"))
    [(kind, reply)] = _drain(executor, 1).values()
    executor.close()
    assert (kind, reply.data, reply.error) == ("accepted", b"a", None)
    assert executor.resubmitted == 1


class StoringWorkers(FakeWorkers):
    """A Dask-like backend whose workers write checkpoints into the bucket themselves."""

    direct_io = True

    def __init__(self) -> None:
        super().__init__([])
        self.tasks: list[StageTask] = []

    def submit(self, task: StageTask) -> Future[Any]:
        self.tasks.append(task)
        future: Future[Any] = Future()
        stored = StoredCheckpoint("e" * 64, 120, "0" * 64, 7)
        future.set_result(StageReply(stored=stored))
        return future


class Bucket:
    """The coordinator's store as the executor sees it: its identity and refs."""

    def __init__(self, ref: tuple[str, int] | None) -> None:
        self.url = S3Url("bucket", "team")
        self.endpoint = "http://127.0.0.1:1"
        self.ref = ref
        self.asked: list[str] = []

    def ref_of(self, name: str) -> tuple[str, int] | None:
        self.asked.append(name)
        return self.ref


def _stored_call(chunk: str) -> StageCall:
    key = CheckpointKey("s", "l", Stage.EXTRACT, chunk)
    target = CheckpointTarget(key, "codec", "", StageDigests("c", chunk, ""))

    def task() -> StageTask:
        return msgspec.structs.replace(_task(chunk), checkpoint=target)

    return StageCall(lambda: ("local", chunk), task, lambda reply: ("accepted", reply))


@pytest.mark.parametrize(
    ("ref", "journaled"),
    [(("e" * 64, 120), True), (("f" * 64, 120), False), (("e" * 64, 121), False), (None, False)],
)
def test_a_checkpoint_a_worker_wrote_is_journaled_only_as_the_bucket_holds_it(
    ref: tuple[str, int] | None, journaled: bool
) -> None:
    workers = StoringWorkers()
    executor = OffloadingExecutor(workers, 2)
    bucket = Bucket(ref)
    executor.share_cache(bucket, "pipe")
    chunk = "a" * 64
    executor.submit(0, _stored_call(chunk))
    [(_key, (kind, reply))] = _drain(executor, 1).items()
    executor.close()
    assert kind == "accepted" and reply.data is None
    [task] = workers.tasks
    assert task.cache == SharedCache("s3://bucket/team", "http://127.0.0.1:1", "pipe")
    [asked] = bucket.asked  # the checkpoint's ref, in the pipeline's workspace
    assert asked.startswith("workspaces/pipe/") and asked.endswith(f"/extract/{chunk}.ckpt")
    assert (reply.stored.error is None) is journaled
    assert executor.written_by_workers == (1 if journaled else 0)


def test_without_a_bucket_workers_only_compute() -> None:
    workers = StoringWorkers()
    executor = OffloadingExecutor(workers, 1)
    executor.share_cache(object(), "pipe")  # a local cache root's store: ignored
    executor.submit(0, _stored_call("b" * 64))
    _drain(executor, 1)
    executor.close()
    [task] = workers.tasks
    assert task.cache is None and task.checkpoint is None
