"""The `--jobs` executor: every call's completion once, the bound, N == 1 is serial."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.cli.parallel import CheckpointWritePool, JobPool


def _slow_square(x: int) -> int:
    time.sleep(0.001 * (x % 4))  # later items often finish first
    return x * x


def _drain(pool: JobPool, items: list[int], fn=_slow_square) -> dict[int, int]:
    for key, item in enumerate(items):
        pool.submit(key, lambda item=item: fn(item))
    done: dict[int, int] = {}
    for _ in items:
        key, value = pool.next_done()
        assert key not in done
        done[key] = value
    return done


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=30), st.integers(1, 6))
def test_every_call_completes_once_with_its_own_result(items: list[int], jobs: int) -> None:
    with JobPool(jobs) as pool:
        assert _drain(pool, items) == {k: x * x for k, x in enumerate(items)}


def test_many_workers_really_run_concurrently() -> None:
    barrier = threading.Barrier(4, timeout=5)

    def meet(i: int) -> str:
        barrier.wait()  # deadlocks (then times out) unless four calls overlap
        return threading.current_thread().name

    with JobPool(4) as pool:
        assert pool.capacity == 4
        names = list(_drain(pool, list(range(4)), meet).values())
    assert len(set(names)) == 4
    assert all(n.startswith("runjournal-job") for n in names)


def test_one_job_is_plain_serial_on_the_calling_thread() -> None:
    seen: list[tuple[int, str]] = []

    def record(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i

    pool = JobPool(1)
    assert pool.capacity == 1
    assert _drain(pool, [3, 1, 2], record) == {0: 3, 1: 1, 2: 2}
    me = threading.current_thread().name
    assert seen == [(3, me), (1, me), (2, me)]
    assert pool._pool is None
    pool.close()


def test_a_calls_exception_is_raised_by_next_done_and_the_pool_survives() -> None:
    def boom() -> int:
        raise ValueError("item 2")

    with JobPool(3) as pool:
        pool.submit(7, boom)
        with pytest.raises(ValueError, match="item 2"):
            pool.next_done()
        assert _drain(pool, [1, 2, 3]) == {0: 1, 1: 4, 2: 9}


def test_close_waits_for_running_calls_and_drops_queued_ones() -> None:
    started: list[int] = []
    gate = threading.Event()

    def work(i: int) -> int:
        started.append(i)
        gate.wait(5)
        return i

    pool = JobPool(2)
    for i in range(20):
        pool.submit(i, lambda i=i: work(i))
    time.sleep(0.05)
    gate.set()
    pool.close()
    assert len(started) < 20


def test_close_is_idempotent_and_falls_back_to_serial() -> None:
    pool = JobPool(3)
    pool.close()
    pool.close()
    assert pool.capacity == 1
    me = threading.current_thread().name
    names = _drain(pool, [1, 2], lambda _: threading.current_thread().name)  # type: ignore[arg-type]
    assert list(names.values()) == [me, me]


@pytest.mark.parametrize("jobs", [0, -1, True, 1.5, "2"])
def test_jobs_must_be_a_positive_int(jobs: object) -> None:
    with pytest.raises(ValueError):
        JobPool(jobs)  # type: ignore[arg-type]


def test_a_parked_call_frees_its_slot_and_the_idle_pool_flushes() -> None:
    """docs/internals.md "Batch runs": parked calls report SLOT_FREED, the scheduler may
    start more than `jobs`, and once every call in flight is parked `next_done` calls the
    flush (on the calling thread), which lets them go on."""
    from runjournal.adapters import parking
    from runjournal.domain.runner.scheduler import SLOT_FREED

    pool = JobPool(2)
    pool.allow_parking(10)
    released = threading.Event()
    flushed: list[str] = []

    def flush() -> None:
        flushed.append(threading.current_thread().name)
        released.set()

    def call(x: int) -> int:
        with parking.current().parked(flush):
            released.wait()
        return x

    try:
        for key in range(6):  # more calls than jobs: each parks and frees its slot
            assert pool.capacity >= 2
            pool.submit(key, lambda key=key: call(key))
        results: dict[int, int] = {}
        freed = 0
        while len(results) < 6:
            key, value = pool.next_done()
            if key == SLOT_FREED:
                freed += 1
                continue
            results[key] = value
        assert results == {k: k for k in range(6)} and freed == 6
        assert flushed and set(flushed) == {threading.current_thread().name}
    finally:
        released.set()
        pool.close()


class _Recorder:
    """A recorder with `write_many`: the batches it was given (one index transaction each)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def write_many(self, items: list[tuple[str, object]]) -> list[tuple[str, int]]:
        with self.lock:
            self.batches.append([key for key, _ in items])
        return [(key, len(key)) for key, _ in items]


def test_a_pool_with_a_window_writes_queued_writes_together_when_one_is_waited_for() -> None:
    # docs/internals.md "The scheduler (`scheduler.py`)": with a window (here longer than
    # the test) nothing is written until a batch is full, a caller waits, or `close`
    recorder = _Recorder()
    pool = CheckpointWritePool(recorder, 2, window=3600.0)
    released: list[str] = []
    try:
        waits = [pool.submit(f"k{i}", None, lambda i=i: released.append(f"k{i}")) for i in range(5)]
        assert not any(wait.done() for wait in waits)  # type: ignore[attr-defined]
        assert recorder.batches == [] and released == []
        assert waits[2]() == ("k2", 2)  # the waiter writes the whole queue, in one batch
        assert recorder.batches == [["k0", "k1", "k2", "k3", "k4"]]
        assert all(wait.done() for wait in waits) and sorted(released) == [  # type: ignore[attr-defined]
            f"k{i}" for i in range(5)
        ]
        later = pool.submit("k5", None)
    finally:
        pool.close()
    assert later() == ("k5", 2)  # `close` wrote what was left
    assert recorder.batches[1:] == [["k5"]] and pool.batches == 2


def test_a_pool_without_a_window_writes_at_once() -> None:
    recorder = _Recorder()
    pool = CheckpointWritePool(recorder, 2)
    try:
        assert pool.submit("a", None)() == ("a", 1)
        assert recorder.batches == [["a"]]
    finally:
        pool.close()
