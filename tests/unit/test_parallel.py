"""The `--jobs` executor: input order kept, exceptions propagate, N == 1 is serial."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.cli.parallel import ThreadPoolMap, serial_map


def _slow_square(x: int) -> int:
    time.sleep(0.001 * (x % 4))  # later items often finish first
    return x * x


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=30), st.integers(1, 6))
def test_results_come_back_in_input_order(items: list[int], jobs: int) -> None:
    with ThreadPoolMap(jobs) as pmap:
        assert list(pmap(_slow_square, items)) == [x * x for x in items]


def test_many_workers_really_run_concurrently() -> None:
    barrier = threading.Barrier(4, timeout=5)

    def meet(i: int) -> str:
        barrier.wait()  # deadlocks (then times out) unless four calls overlap
        return threading.current_thread().name

    with ThreadPoolMap(4) as pmap:
        names = list(pmap(meet, list(range(4))))
    assert len(set(names)) == 4
    assert all(n.startswith("runjournal-job") for n in names)


def test_one_job_is_plain_serial_on_the_calling_thread() -> None:
    seen: list[tuple[int, str]] = []

    def record(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i

    pmap = ThreadPoolMap(1)
    assert list(pmap(record, [3, 1, 2])) == [3, 1, 2]
    me = threading.current_thread().name
    assert seen == [(3, me), (1, me), (2, me)]
    assert pmap._pool is None
    pmap.close()


def test_a_single_item_runs_on_the_calling_thread() -> None:
    with ThreadPoolMap(4) as pmap:
        assert list(pmap(lambda _: threading.current_thread().name, [0])) == [
            threading.current_thread().name
        ]


def test_the_first_exception_in_input_order_propagates() -> None:
    def fail_some(i: int) -> int:
        if i in (2, 5):
            time.sleep(0.02 if i == 2 else 0)  # item 5 fails first in time
            raise ValueError(f"item {i}")
        return i

    with ThreadPoolMap(3) as pmap:
        with pytest.raises(ValueError, match="item 2"):
            list(pmap(fail_some, list(range(8))))
        # the pool survives a failed map and serves the next one
        assert list(pmap(lambda i: i + 1, [1, 2, 3])) == [2, 3, 4]


def test_serial_exception_stops_at_the_failing_item() -> None:
    calls: list[int] = []

    def fail_at_one(i: int) -> int:
        calls.append(i)
        if i == 1:
            raise RuntimeError("boom")
        return i

    with pytest.raises(RuntimeError):
        list(ThreadPoolMap(1)(fail_at_one, [0, 1, 2]))
    assert calls == [0, 1]
    with pytest.raises(RuntimeError):
        list(serial_map(fail_at_one, [1]))


def test_queued_work_is_cancelled_after_a_failure() -> None:
    started: list[int] = []
    gate = threading.Event()

    def work(i: int) -> int:
        started.append(i)
        if i == 0:
            raise KeyError("first")
        gate.wait(5)
        return i

    pmap = ThreadPoolMap(2)
    with pytest.raises(KeyError):
        list(pmap(work, list(range(20))))
    gate.set()
    pmap.close()
    assert len(started) < 20


def test_close_is_idempotent_and_falls_back_to_serial() -> None:
    pmap = ThreadPoolMap(3)
    pmap.close()
    pmap.close()
    assert (
        list(pmap(lambda i: threading.current_thread().name, [1, 2]))
        == [threading.current_thread().name] * 2
    )


@pytest.mark.parametrize("jobs", [0, -1, True, 1.5, "2"])
def test_jobs_must_be_a_positive_int(jobs: object) -> None:
    with pytest.raises(ValueError):
        ThreadPoolMap(jobs)  # type: ignore[arg-type]
