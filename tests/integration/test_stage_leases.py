"""Stage leases in the cache root (adapters/stage_leases.py; docs/operations.md
"Concurrent runs"): taken, shared by one run's twin stages, waited for across runs and
processes, refused with `lease_wait = fail`, freed by the kernel when the holder is killed,
and never waited for in a cycle (the run that would close it goes on without the lease).
Every wait is bounded in time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.stage_leases import LOCK_FILE, FileStageLeases, holder_file
from runjournal.domain.leases import LeaseRefused, LeaseWait, LeaseWaitOutcome
from support.leases import LeaseHolder, key

WAIT = 60.0


@pytest.fixture
def root(tmp_path: Path) -> Iterator[FsRoot]:
    with FsRoot.open(tmp_path / "cache", create=True) as handle:
        yield handle


@pytest.fixture
def holder(tmp_path: Path, root: FsRoot) -> Iterator[LeaseHolder]:
    other = LeaseHolder(tmp_path / "cache", "run-other")
    try:
        yield other
    finally:
        other.stop()


class _Acquiring(threading.Thread):
    """`acquire` on a thread, so the test can watch it wait."""

    def __init__(self, leases: FileStageLeases, n: int) -> None:
        super().__init__(daemon=True)
        self.leases, self.n = leases, n
        self.result: tuple[object, LeaseWait | None] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.leases.acquire(key(self.n))
        except BaseException as exc:
            self.error = exc

    def outcome(self) -> LeaseWait | None:
        self.join(WAIT)
        assert not self.is_alive(), "the wait did not end"
        assert self.error is None, self.error
        assert self.result is not None
        return self.result[1]


def _held(holder: LeaseHolder, n: int) -> None:
    holder.send(f"acquire {n}")
    assert holder.read() == "waiting"
    assert holder.read() == "acquired free"


def test_a_free_lease_is_taken_and_the_holder_file_names_the_run(root: FsRoot) -> None:
    leases = FileStageLeases(root, "ask", "run-1")
    lease, wait = leases.acquire(key(1))
    assert wait is None
    assert root.exists(LOCK_FILE)
    assert root.read_bytes(holder_file(os.getpid())) == b"run-1"
    lease.release()
    lease.release()  # idempotent
    leases.close()
    assert not root.exists(holder_file(os.getpid()))


def test_a_reused_run_creates_nothing(root: FsRoot) -> None:
    FileStageLeases(root, "ask", "run-1").close()
    assert root.listdir() == []


def test_twin_stages_of_one_run_share_its_lease(root: FsRoot, holder: LeaseHolder) -> None:
    leases = FileStageLeases(root, "ask", "run-1")
    first, wait1 = leases.acquire(key(1))
    second, wait2 = leases.acquire(key(1))  # the same checkpoint twice: no deadlock
    assert (wait1, wait2) == (None, None)
    first.release()
    holder.send("acquire 1")
    assert holder.read() == "waiting"
    assert holder.read(0.5) is None  # still held by the twin
    second.release()
    assert holder.read() == "acquired released"
    leases.close()


def test_a_second_process_waits_then_takes_it(root: FsRoot, holder: LeaseHolder) -> None:
    _held(holder, 1)
    leases = FileStageLeases(root, "ask", "run-1")
    waiting = _Acquiring(leases, 1)
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive()
    holder.send("release 1")
    assert holder.read() == "released"
    assert waiting.outcome() == LeaseWait("run-other", LeaseWaitOutcome.RELEASED)
    leases.close()


def test_a_dead_holder_is_taken_over(root: FsRoot, holder: LeaseHolder) -> None:
    _held(holder, 1)
    _held(holder, 2)
    leases = FileStageLeases(root, "ask", "run-1")
    waiting = _Acquiring(leases, 1)
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive()
    holder.kill()  # kill -9 while it holds both
    assert waiting.outcome() == LeaseWait("run-other", LeaseWaitOutcome.RELEASED)
    assert leases.acquire(key(2))[1] is None  # free at once, no wait
    leases.close()


def test_lease_wait_fail_refuses_naming_the_holder(root: FsRoot, holder: LeaseHolder) -> None:
    _held(holder, 1)
    leases = FileStageLeases(root, "ask", "run-1", wait=False)
    with pytest.raises(LeaseRefused) as refused:
        leases.acquire(key(1))
    assert refused.value.holder == "run-other"
    assert "is being executed by run run-other" in str(refused.value)
    assert leases.acquire(key(2))[1] is None  # a free one is taken as usual
    leases.close()


def test_try_acquire_never_waits(root: FsRoot, holder: LeaseHolder) -> None:
    _held(holder, 1)
    leases = FileStageLeases(root, "ask", "run-1")
    assert leases.try_acquire(key(1)) is None
    lease = leases.try_acquire(key(2))
    assert lease is not None
    holder.send("acquire 2")
    assert holder.read() == "waiting"
    assert holder.read(0.3) is None
    lease.release()
    assert holder.read() == "acquired released"
    leases.close()


def test_two_runs_of_one_process_wait_for_each_other(root: FsRoot) -> None:
    one = FileStageLeases(root, "ask", "run-1")
    two = FileStageLeases(root, "ask", "run-2")
    lease, _ = one.acquire(key(1))
    waiting = _Acquiring(two, 1)
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive()
    lease.release()
    assert waiting.outcome() == LeaseWait("run-1", LeaseWaitOutcome.RELEASED)
    with pytest.raises(LeaseRefused):
        FileStageLeases(root, "ask", "run-3", wait=False).acquire(key(1))
    one.close()
    two.close()


def test_runs_of_one_process_waiting_on_each_other_do_not_deadlock(root: FsRoot) -> None:
    one = FileStageLeases(root, "ask", "run-1")
    two = FileStageLeases(root, "ask", "run-2")
    one.acquire(key(1))
    two.acquire(key(2))
    waiting = _Acquiring(one, 2)  # run-1 waits for run-2 ...
    waiting.start()
    time.sleep(0.3)
    lease, wait = two.acquire(key(1))  # ... which would wait for run-1: refused as a cycle
    assert wait == LeaseWait("run-1", LeaseWaitOutcome.DEADLOCK)
    lease.release()
    two.close()  # run-2 ends: run-1 gets its lease
    assert waiting.outcome() == LeaseWait("run-2", LeaseWaitOutcome.RELEASED)
    one.close()


def test_processes_waiting_on_each_other_do_not_deadlock(root: FsRoot, holder: LeaseHolder) -> None:
    """The kernel refuses the lock wait that would close a cycle (EDEADLK): whichever run
    asks last goes on without the lease; the other gets it once that one is done."""
    leases = FileStageLeases(root, "ask", "run-1")
    mine, _ = leases.acquire(key(2))
    _held(holder, 1)
    holder.send("acquire 2")  # the other process waits for run-1
    assert holder.read() == "waiting"
    time.sleep(0.3)
    waiting = _Acquiring(leases, 1)  # run-1 waits for the other: a cycle
    waiting.start()
    waiting.join(WAIT / 2)
    if waiting.is_alive():  # the other process asked last: it went on without the lease
        assert holder.read() == "acquired deadlock"
        holder.send("release 1")
        assert holder.read() == "released"
        assert waiting.outcome() == LeaseWait("run-other", LeaseWaitOutcome.RELEASED)
    else:
        assert waiting.outcome() == LeaseWait("run-other", LeaseWaitOutcome.DEADLOCK)
    mine.release()
    leases.close()
