"""The scheduler (domain/runner/scheduler.py), with no threads.

A fake executor finishes calls last-in first-out, so completion order is never
submission order; lanes are small generators that journal what they do through the
typed recorder (a lane resolved, a decision per call that arrived, an artifact when
done), into `FakeRecorder` (tests/support/recorder.py). What must
hold: the bound, readiness after producers, plan-ordered journal whatever the
completion order, and both failure policies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from runjournal.domain.decisions import Stage, StageDigests, StageFacts
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    CheckpointWritten,
    LaneResolved,
    StageDecided,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.ports import CheckpointKey, CheckpointWriteError
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.scheduler import (
    Batch,
    FailurePolicy,
    LaneJob,
    LaneWork,
    Scheduler,
    SerialExecutor,
)
from runjournal.domain.runner.stage_failures import StageError, StageFailure
from support.recorder import FakeRecorder

COMPONENTS = LaneComponents("c", "m", "", "", "", "", "")


def resolved(ledger: RunLedger, step: str, lane: str) -> None:
    ledger.journal.lane_resolved(
        step=step,
        lane=lane,
        components=COMPONENTS,
        lane_identity=f"id-{step}-{lane}",
        dependencies=[],
        chunks=0,
        forced=False,
        reads={},
    )


def decided(ledger: RunLedger, step: str, lane: str, chunk: str) -> None:
    facts = StageFacts(stage=Stage.EXTRACT, current=StageDigests(COMPONENTS, chunk, ""))
    ledger.journal.decided(
        step=step, lane=lane, chunk=chunk, facts=facts, code=ReasonCode.NOT_RESUMED
    )


def lanes_resolved(sink: FakeRecorder) -> list[str]:
    return [e.lane for e in sink.of(LaneResolved)]


class LifoExecutor:
    """Finishes the most recently submitted call first; records the peak in flight."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.pending: list[tuple[int, Callable[[], Any]]] = []
        self.peak = 0
        self.started: list[str] = []

    def submit(self, key: int, call: Callable[[], Any]) -> None:
        self.pending.append((key, call))
        self.peak = max(self.peak, len(self.pending))

    def next_done(self) -> tuple[int, Any]:
        key, call = self.pending.pop()
        return key, call()


def _lane(
    step: str, lane: str, calls: int, log: list[str], *, fail_at: int | None = None
) -> Callable[[RunLedger], LaneWork]:
    def start(ledger: RunLedger) -> LaneWork:
        resolved(ledger, step, lane)

        def call(i: int) -> Callable[[], Any]:
            def run() -> Any:
                log.append(f"{step}/{lane}/{i}")
                if i == fail_at:
                    return StageError(Stage.EXTRACT, str(i), RuntimeError("boom"))
                return i

            return run

        waiting: dict[int, Any] = {}
        cursor = [0]

        def arrived(i: int, outcome: Any) -> None:  # in call order, as LaneRun stores
            waiting[i] = outcome
            while cursor[0] in waiting:
                waiting.pop(cursor[0])
                decided(ledger, step, lane, str(cursor[0]))  # the call's result arrived
                cursor[0] += 1

        outcomes = yield Batch([call(i) for i in range(calls)], arrived)
        errors = [o for o in outcomes if isinstance(o, StageError)]
        if errors:
            raise StageFailure(step, lane, ReasonCode.STAGE_FAILED, "boom", chunk=errors[0].chunk)
        [merged] = yield Batch([lambda: sum(outcomes)])
        ref = ArtifactRef(step, lane, "k", "k/v1", "application/json", "0" * 64, merged)
        ledger.journal.artifact(artifact=ref, warnings=[])
        return merged  # type: ignore[return-value]

    return start


def _jobs(log: list[str], docs: int = 4, calls: int = 3, fail: str = "") -> list[LaneJob]:
    jobs = [
        LaneJob(
            "a",
            f"d{i}",
            [],
            _lane("a", f"d{i}", calls, log, fail_at=1 if f"d{i}" == fail else None),
        )
        for i in range(docs)
    ]
    jobs += [
        LaneJob("b", f"d{i}", [("a", f"d{i}")], _lane("b", f"d{i}", 1, log)) for i in range(docs)
    ]
    jobs.append(
        LaneJob("c", "corpus", [("b", f"d{i}") for i in range(docs)], _lane("c", "corpus", 1, log))
    )
    return jobs


def _run(
    executor: Any, jobs: list[LaneJob], policy=FailurePolicy.STOP
) -> tuple[FakeRecorder, dict, RunLedger]:
    sink = FakeRecorder()
    ledger = RunLedger(sink, None)
    artifacts: dict[str, dict[str, Any]] = {}
    Scheduler(ledger, executor, policy).run(jobs, artifacts)
    return sink, artifacts, ledger


def test_the_journal_is_in_plan_order_whatever_the_completion_order() -> None:
    serial_log: list[str] = []
    serial, serial_artifacts, _ = _run(SerialExecutor(), _jobs(serial_log))
    lifo_log: list[str] = []
    executor = LifoExecutor(5)
    lifo, lifo_artifacts, _ = _run(executor, _jobs(lifo_log))
    assert serial.records() == lifo.records()
    assert serial_artifacts == lifo_artifacts
    assert len(serial_log) == len(lifo_log) == 4 * 3 + 4 + 1  # every extract call, once
    assert serial_log != lifo_log and sorted(serial_log) == sorted(lifo_log)
    # each lane's results arrive (are journaled) in call order
    arrived = [(e.lane, e.chunk) for e in lifo.of(StageDecided) if e.step == "a"]
    assert arrived == [(f"d{d}", str(i)) for d in range(4) for i in range(3)]
    assert [e.size for e in lifo.of(ArtifactGenerated) if e.step == "a"] == [0 + 1 + 2] * 4


def test_every_ready_lanes_calls_share_one_bound() -> None:
    executor = LifoExecutor(5)
    _run(executor, _jobs([]))
    assert executor.peak == 5  # 12 extracts of 4 lanes were ready: 5 at once, never more
    executor = LifoExecutor(64)
    _run(executor, _jobs([]))
    assert executor.peak == 12  # every extract of every document lane at once


def test_a_consumer_starts_only_after_its_producers() -> None:
    log: list[str] = []
    _run(LifoExecutor(64), _jobs(log))
    for d in range(4):
        assert log.index(f"b/d{d}/0") > max(log.index(f"a/d{d}/{i}") for i in range(3))
    assert log.index("c/corpus/0") > max(log.index(f"b/d{d}/0") for d in range(4))


def test_the_first_failure_stops_new_work_and_calls_in_flight_are_kept() -> None:
    log: list[str] = []
    executor = LifoExecutor(4)
    sink = FakeRecorder()
    with pytest.raises(StageFailure) as info:
        Scheduler(RunLedger(sink, None), executor, FailurePolicy.STOP).run(
            _jobs(log, fail="d1"), {}
        )
    assert (info.value.step, info.value.lane, info.value.chunk) == ("a", "d1", "1")
    assert [(f.step, f.lane) for f in info.value.failures] == [("a", "d1")]
    assert not executor.pending  # nothing was left running
    assert not any(entry.startswith(("b/", "c/")) for entry in log)
    assert len(log) < 12  # queued extracts never started
    # what finished is journaled, in plan order
    lanes = lanes_resolved(sink)
    assert lanes == sorted(lanes)


def test_keep_going_finishes_every_lane_not_downstream_of_a_failure() -> None:
    log: list[str] = []
    artifacts: dict[str, dict[str, Any]] = {}
    with pytest.raises(StageFailure) as info:
        Scheduler(RunLedger(FakeRecorder(), None), LifoExecutor(3), FailurePolicy.KEEP_GOING).run(
            _jobs(log, fail="d2"), artifacts
        )
    assert [(f.step, f.lane) for f in info.value.failures] == [("a", "d2")]
    assert set(artifacts["a"]) == {"d0", "d1", "d3"}
    assert set(artifacts["b"]) == {"d0", "d1", "d3"}
    assert "c" not in artifacts
    # the failing lane's own remaining extracts never start; the other lanes' all do
    serial_log: list[str] = []
    with pytest.raises(StageFailure):
        Scheduler(RunLedger(FakeRecorder(), None), SerialExecutor(), FailurePolicy.KEEP_GOING).run(
            _jobs(serial_log, fail="d2"), {}
        )
    assert "a/d2/1" in serial_log and "a/d2/2" not in serial_log
    assert {"a/d3/2", "b/d3/0"} <= set(serial_log)


def test_stop_lets_calls_in_flight_finish_and_starts_nothing() -> None:
    log: list[str] = []
    executor = LifoExecutor(2)
    scheduler = Scheduler(RunLedger(FakeRecorder(), None), executor, FailurePolicy.STOP)
    original = executor.next_done

    def stop_after_first() -> tuple[int, Any]:
        scheduler.stop()
        return original()

    executor.next_done = stop_after_first  # type: ignore[method-assign]
    done = scheduler.run(_jobs(log), {})
    assert done == 0 and scheduler.stopped
    assert len(log) == 2 and not executor.pending  # the two in flight, nothing more


def test_checkpoint_writes_off_the_thread_are_journaled_in_order_after_the_file() -> None:
    written: list[str] = []
    pending: list[tuple[str, Callable[[], tuple[str, int]]]] = []

    class Recorder:
        def write(self, key: CheckpointKey, record: Any) -> tuple[str, int]:
            raise AssertionError("every write goes through the writes port")

    class Writes:
        def submit(self, key: CheckpointKey, record: Any) -> Callable[[], tuple[str, int]]:
            def wait() -> tuple[str, int]:
                written.append(key.chunk)  # the file, before its event
                if key.chunk == "bad":
                    raise CheckpointWriteError("disk full")
                return "0" * 64, len(key.chunk)

            pending.append((key.chunk, wait))
            return wait

    sink = FakeRecorder()
    run_ledger = RunLedger(sink, Recorder(), Writes())  # type: ignore[arg-type]
    lane = run_ledger.child()
    resolved(lane, "s", "l")
    for chunk in ("a", "bad", "c"):
        decided(lane, "s", "l", chunk)  # the aggregate wants a decision before its checkpoint
        lane.write_checkpoint(CheckpointKey("s", "l", Stage.EXTRACT, chunk), None)  # type: ignore[arg-type]
    assert written == [] and sink.events == []  # nothing waited for, nothing journaled yet
    run_ledger.absorb(lane)
    assert written == ["a", "bad", "c"]
    checkpoints = (CheckpointWritten, CheckpointWriteFailed)
    assert [(type(e), e.chunk) for e in sink.events if isinstance(e, checkpoints)] == [
        (CheckpointWritten, "a"),
        (CheckpointWriteFailed, "bad"),
        (CheckpointWritten, "c"),
    ]
    assert run_ledger.persistence_errors == ["disk full"]


class FifoExecutor(LifoExecutor):
    """Finishes calls in the order they were submitted."""

    def next_done(self) -> tuple[int, Any]:
        key, call = self.pending.pop(0)
        return key, call()


def test_a_finished_lane_is_journaled_once_its_writes_are_in_not_waited_for() -> None:
    # docs/internals.md "The scheduler (`scheduler.py`)": a write pool with a window
    # writes later; the scheduler does not wait for a finished lane's writes (a write of
    # its own, on its thread) while calls are in flight: the lane is journaled, in plan
    # order, at a later completion once they are in, or at the end.
    log: list[str] = []
    waited: list[tuple[str, int]] = []  # (chunk, calls run) when its write was waited for
    finished: set[str] = set()  # writes the pool has done

    class Pending:
        def __init__(self, lane: str) -> None:
            self.lane = lane

        def done(self) -> bool:
            return self.lane in finished

        def __call__(self) -> tuple[str, int]:
            waited.append((self.lane, len(log)))
            return "0" * 64, 1

    class Writes:
        def submit(self, key: CheckpointKey, record: Any) -> Pending:
            return Pending(key.lane)

    def lane(name: str, calls: int) -> Callable[[RunLedger], LaneWork]:
        def start(ledger: RunLedger) -> LaneWork:
            resolved(ledger, "s", name)

            def arrived(i: int, outcome: Any) -> None:
                decided(ledger, "s", name, str(i))
                ledger.write_checkpoint(CheckpointKey("s", name, Stage.EXTRACT, str(i)), None)  # type: ignore[arg-type]

            yield Batch([lambda i=i: log.append(f"{name}{i}") for i in range(calls)], arrived)
            if name == "b":
                finished.add("a")  # the pool wrote the first lane's checkpoint meanwhile
            ref = ArtifactRef("s", name, "k", "k/v1", "application/json", "0" * 64, 0)
            ledger.journal.artifact(artifact=ref, warnings=[])
            return 0  # type: ignore[return-value]

        return start

    sink = FakeRecorder()
    ledger = RunLedger(sink, object(), Writes())  # type: ignore[arg-type]
    jobs = [LaneJob("s", "a", [], lane("a", 1)), LaneJob("s", "b", [], lane("b", 3))]
    jobs.append(LaneJob("s", "c", [], lane("c", 1)))
    Scheduler(ledger, FifoExecutor(4), FailurePolicy.STOP).run(jobs, {})
    # a finished first (its call ran first) and was journaled once its write was in,
    # after b's calls (not waited for at once: main waited with 1 call run); b, whose
    # writes were never seen done, and c at the end
    assert log[0] == "a0"
    assert waited == [("a", 4), ("b", 5), ("b", 5), ("b", 5), ("c", 5)]
    assert lanes_resolved(sink) == ["a", "b", "c"]
    assert [e.lane for e in sink.of(CheckpointWritten)] == ["a", "b", "b", "b", "c"]


def _counted(start: Callable[[RunLedger], LaneWork], live: list[int]) -> Callable:
    """`start`, counting the lanes started and not yet settled in live[0] (peak in live[1])."""

    def wrapped(ledger: RunLedger) -> LaneWork:
        live[0] += 1
        live[1] = max(live[1], live[0])
        try:
            return (yield from start(ledger))
        finally:
            live[0] -= 1

    return wrapped


@pytest.mark.parametrize(("capacity", "most"), [(1, 3), (4, 4), (16, 8)])
def test_lanes_start_only_while_few_calls_wait_for_a_slot(capacity: int, most: int) -> None:
    # Memory (docs/internals.md "The scheduler"): a started lane decides its stages and
    # holds its events until journaled, so 200 ready lanes must not all start at once.
    live = [0, 0]
    jobs = [
        LaneJob("a", f"d{i}", [], _counted(_lane("a", f"d{i}", 10, []), live)) for i in range(200)
    ]
    executor = LifoExecutor(capacity) if capacity > 1 else SerialExecutor()
    sink, artifacts, _ = _run(executor, jobs)
    assert len(artifacts["a"]) == 200
    assert 1 < live[1] <= most  # lanes overlap, but only a few at a time
    assert lanes_resolved(sink) == [f"d{i}" for i in range(200)]


def test_a_lane_that_settles_at_once_is_journaled_before_the_next_starts() -> None:
    sink = FakeRecorder()
    seen_at_start: list[int] = []

    def settled(i: int) -> Callable[[RunLedger], LaneWork]:
        def start(ledger: RunLedger) -> LaneWork:
            seen_at_start.append(len(sink.events))
            resolved(ledger, "a", f"d{i}")
            return i
            yield  # a generator that needs no call: every stage reused

        return start

    jobs = [LaneJob("a", f"d{i}", [], settled(i)) for i in range(50)]
    Scheduler(RunLedger(sink, None), SerialExecutor(), FailurePolicy.STOP).run(jobs, {})
    assert seen_at_start == list(range(50))  # lanes before it were journaled already
