"""The runner's side of stage leases (docs/operations.md "Concurrent runs"): only stages
that execute are leased, each with its lane's lease (`lane_lease`), which the lane holds
until it ends and which is released once its checkpoints are written, a wait is journaled
before the stage's decision, and the decision is made from what the stage finds after the
wait (the other run's checkpoint is reused)."""

from __future__ import annotations

from typing import Any

from runjournal.domain.decisions import Stage
from runjournal.domain.events import LeaseWaitOutcome, StageDecided, StageLeaseWaited
from runjournal.domain.leases import LANE_WIDE_CHUNK, LeaseWait
from runjournal.domain.ports import CheckpointKey
from runjournal.domain.recompute import plan_recompute
from runjournal.domain.runner import PipelineRunner
from support.recorder import FakeRecorder
from unit.test_runner import DOCS, FakeStore, codes, pipeline


def _of_lane(files: dict[CheckpointKey, Any], key: CheckpointKey) -> dict[CheckpointKey, Any]:
    return {k: v for k, v in files.items() if (k.step, k.lane) == (key.step, key.lane)}


class FakeLeases:
    """Records every lease (a lane's: shares of one lock, counted); `other` as if another
    run held the lane's lease and wrote the lane's checkpoints meanwhile."""

    def __init__(self, store: FakeStore, *, other: FakeStore | None = None) -> None:
        self.store = store
        self.other = other  # the other run's checkpoints, copied in during a "wait"
        self.held: list[CheckpointKey] = []
        self.log: list[tuple[str, CheckpointKey]] = []

    def _lease(self, key: CheckpointKey) -> Any:
        self.held.append(key)
        leases = self

        class _Lease:
            def release(self) -> None:
                if key in leases.held:
                    leases.held.remove(key)
                    leases.log.append(("release", key))
                    if key not in leases.held:  # the lock goes: the lane's writes are done
                        assert _of_lane(leases.store.files, key)

        return _Lease()

    def acquire(self, key: CheckpointKey) -> tuple[Any, LeaseWait | None]:
        self.log.append(("acquire", key))
        assert key.chunk == LANE_WIDE_CHUNK
        theirs = _of_lane(self.other.files, key) if self.other is not None else {}
        if theirs and key not in self.held:
            self.store.files.update(theirs)
            return self._lease(key), LeaseWait("run-other", LeaseWaitOutcome.RELEASED)
        return self._lease(key), None

    def try_acquire(self, key: CheckpointKey) -> Any:
        self.log.append(("try", key))
        return self._lease(key)


def _run(pipe: Any, store: FakeStore, leases: FakeLeases, *, resume: bool) -> FakeRecorder:
    sink = FakeRecorder()
    steps = [s.id for s in pipe.steps]
    runner = PipelineRunner(
        journal=sink,
        loader=store if resume else None,
        recorder=store,
        recompute=plan_recompute(steps, {s.id: s.consumes for s in pipe.steps}, ()),
        leases=leases,
    )
    runner.run(pipe)
    return sink


def test_a_resume_leases_only_what_it_executes_and_releases_after_the_write() -> None:
    store = FakeStore()
    _run(pipeline(DOCS), store, FakeLeases(store), resume=False)
    leases = FakeLeases(store)
    sink = _run(pipeline(DOCS, count_tag="b"), store, leases, resume=True)
    executed = [f for f in sink.of(StageDecided) if f.code.value != "reused"]
    assert {f.step for f in executed} == {"count"}
    acquired = [k for verb, k in leases.log if verb == "acquire"]
    assert {(k.step, k.stage, k.chunk) for k in acquired} == {
        ("count", Stage.EXTRACT, LANE_WIDE_CHUNK)  # the lane's, whatever the stage
    }
    assert {k.lane for k in acquired} == {f.lane for f in executed}
    assert len(acquired) == len(executed)
    assert leases.held == []  # every share released, the lock after the lane's writes


def test_a_plain_run_takes_free_leases_and_never_waits() -> None:
    store = FakeStore()
    leases = FakeLeases(store)
    _run(pipeline(DOCS), store, leases, resume=False)
    assert {verb for verb, _ in leases.log} == {"try", "release"}
    assert leases.held == []


def test_a_wait_is_journaled_before_the_decision_and_the_stage_is_reused() -> None:
    other = FakeStore()
    _run(pipeline(DOCS), other, FakeLeases(other), resume=False)  # the other run's work
    store = FakeStore()
    sink = _run(pipeline(DOCS), store, FakeLeases(store, other=other), resume=True)
    assert set(codes(sink)) == {"reused"}  # it waited, then found every checkpoint
    kinds = [type(e) for e in sink.events if type(e) in (StageLeaseWaited, StageDecided)]
    waits = sink.of(StageLeaseWaited)
    assert waits and all(w.holder == "run-other" for w in waits)
    assert kinds[0] is StageLeaseWaited and kinds[1] is StageDecided
    first = waits[0]
    decided = sink.of(StageDecided)[0]
    assert (first.step, first.lane, first.stage, first.chunk) == (
        decided.step,
        decided.lane,
        decided.stage,
        decided.chunk,
    )
