"""The scheduler: every ready lane's module calls share one bound (docs/internals.md "The runner").

A lane is a generator (`LaneWork`) that yields a `Batch` of module calls and is resumed
with their outcomes; the scheduler starts a lane as soon as the lanes it consumes are
settled, keeps up to `executor.capacity` calls of all started lanes in flight, and
resumes a lane on the calling thread when its batch is in. The domain has no threads:
it drives an injected `Executor` (the thread pool lives in `cli/parallel.py`).

Determinism: each lane journals into its own buffered ledger, and the buffers are
replayed into the run's ledger in plan order (steps in pipeline order, lanes in source
order), so the journal is the same whatever the executor's capacity or timing.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.stage_failures import StageError, StageFailure

# What `next_done` returns, instead of a finished call's key, when a call in flight gave
# its slot back (it parked, waiting for an LLM batch: docs/internals.md "Batch runs"): the
# scheduler starts more calls; nothing finished.
SLOT_FREED = -1


class Executor(Protocol):
    """Runs module calls: up to `capacity` at once, completions reported one by one."""

    @property
    def capacity(self) -> int: ...

    def submit(self, key: int, call: Callable[[], Any]) -> None:
        """Start `call` (or queue it, for a serial executor); it never raises itself."""

    def next_done(self) -> tuple[int, Any]:
        """Block until a submitted call is done: its key and what it returned."""


class SerialExecutor:
    """Capacity 1, on the calling thread: the runner's default (and `--jobs 1`)."""

    capacity = 1

    def __init__(self) -> None:
        self._queue: deque[tuple[int, Callable[[], Any]]] = deque()

    def submit(self, key: int, call: Callable[[], Any]) -> None:
        self._queue.append((key, call))

    def next_done(self) -> tuple[int, Any]:
        key, call = self._queue.popleft()
        return key, call()


@dataclass
class Batch:
    """Module calls a lane needs before it can go on (its extracts, or one merge/normalize).

    `on_result(i, outcome)` is called on the scheduler's thread as each call is done;
    after a failed call no further call of the batch is started. With `keeps` False an
    outcome handed to `on_result` is not kept for the batch's end (the lane is sent None
    in its place): a lane of 25,000 extracts holds only what it still needs
    (docs/modules.md "Streaming merge").
    """

    calls: list[Callable[[], Any]]
    on_result: Callable[[int, Any], None] | None = None
    keeps: bool = True


# A lane's work: yields batches, is sent their outcomes (None for a call never started).
LaneWork = Generator[Batch, list[Any], Artifact]


class FailurePolicy(Enum):
    STOP = "stop"  # the first failure stops scheduling new work
    KEEP_GOING = "keep_going"  # every lane not downstream of a failure finishes


class _State(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


def _started(ledger: RunLedger) -> LaneWork:
    raise AssertionError("a lane job is started once")


# a job is itself: compared by identity; slots: a job is held from when the scheduler
# draws it until it is journaled (a `__dict__` of its 18 fields was about 650 B a lane;
# issue 29: peak RSS)
@dataclass(eq=False, slots=True)
class LaneJob:
    """One lane of one step, as the scheduler sees it."""

    step: str
    lane: str
    needs: list[tuple[str, str]]  # the (step, lane)s whose artifacts it consumes
    start: Callable[[RunLedger], LaneWork]
    state: _State = _State.WAITING
    ledger: RunLedger | None = None
    work: LaneWork | None = None
    batch: Batch | None = None
    outcomes: list[Any] = field(default_factory=list)
    submitted: int = 0
    outstanding: int = 0
    batch_failed: bool = False
    artifact: Artifact | None = None
    failure: StageFailure | None = None
    flushed: bool = False
    order: int = 0  # its place in plan order
    # `partial = true` (a corpus step): under KEEP_GOING it starts once every lane it
    # needs has an artifact or is lost, with the ones that have one
    partial: bool = False


def is_failure(outcome: Any) -> bool:
    return isinstance(outcome, StageError)


class Scheduler:
    """Runs lane jobs in dependency order through one executor (see the module docstring)."""

    def __init__(self, ledger: RunLedger, executor: Executor, policy: FailurePolicy) -> None:
        self._ledger = ledger
        self._executor = executor
        self._policy = policy
        self._stopping = False
        self._in_flight: dict[int, tuple[LaneJob, int]] = {}
        self._next_key = 0
        # started lanes with calls not yet submitted, earliest in plan order first: lanes
        # that started finish first (with one slot, exactly lane after lane)
        self._queue: list[LaneJob] = []
        self._artifacts: dict[str, dict[str, Artifact]] = {}
        # Jobs are drawn from the caller's iterable in plan order only when a pass needs
        # the next one, and let go once journaled: the run holds a window of lane jobs,
        # not one (with its closure, needs and identity) per lane of the corpus from its
        # start (issue 29: peak RSS).
        self._source: Iterator[LaneJob] = iter(())
        self._drawn = 0  # jobs drawn so far: the next one's place in plan order
        self._open: deque[LaneJob] = deque()  # drawn and not yet journaled, in plan order
        self._waiting: list[LaneJob] = []  # drawn, not started yet, in plan order
        self._ready_check = True  # a lane finished since the waiting ones were checked
        self._done = 0  # lanes that finished
        self._failed: list[LaneJob] = []  # lanes that failed, in the order they failed
        # Lanes are started only while fewer than `_lookahead` calls wait for a slot: a
        # started lane decides all its stages and buffers its events until it is
        # journaled, so starting every ready lane at once held the whole run in memory
        # (docs/internals.md "The scheduler (`scheduler.py`)", bounded memory).
        self._lookahead = 2 * max(1, executor.capacity)
        self._pending_calls = 0  # calls of queued batches not yet submitted
        self._throttled = False  # a ready lane was left waiting for the lookahead
        # lanes that failed or can never start (they consume one that did): a partial
        # consumer does not wait for them (docs/pipeline.md "`partial`")
        self._lost: set[tuple[str, str]] = set()

    @property
    def stopped(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Schedule no new work: calls in flight finish, nothing else starts."""
        self._stopping = True

    def run(self, jobs: Iterable[LaneJob], artifacts: dict[str, dict[str, Artifact]]) -> int:
        """Run every job whose producers succeed; raise the first failure in plan order.

        `jobs` is in plan order and may be a generator: a job is drawn when a pass of the
        ready lanes reaches it (never after a stop) and let go once journaled. Each
        finished lane's artifact goes into `artifacts[step][lane]` at once (its
        consumers read it there); returns how many lanes finished.
        """
        self._artifacts = artifacts
        self._source, self._drawn = iter(jobs), 0
        self._open, self._waiting, self._failed = deque(), [], []
        self._ready_check, self._done = True, 0
        self._pending_calls, self._throttled = 0, False
        try:
            while True:
                if self._throttled and self._pending_calls < self._lookahead:
                    self._throttled, self._ready_check = False, True
                self._start_ready()
                self._fill()
                self._flush_prefix()
                if not self._in_flight:
                    break
                key, outcome = self._executor.next_done()
                if key == SLOT_FREED:
                    continue
                job, index = self._in_flight.pop(key)
                self._note(job, index, outcome)
                if self._executor.capacity > 1:
                    self._fill()  # the freed slot first: storing a result must not idle it
                self._deliver(job, index, outcome)
        finally:
            for job in self._open:  # whatever happened, what was journaled is kept, in plan order
                self._flush(job)
            self._open, self._waiting, self._source = deque(), [], iter(())
        failed, self._failed = sorted(self._failed, key=lambda j: j.order), []
        failures = [j.failure for j in failed if j.failure is not None]
        if failures:
            first = failures[0]
            first.failures = failures
            raise first
        return self._done

    # --- starting and resuming lanes -------------------------------------------------

    def _start_ready(self) -> None:
        # Producers come before their consumers in plan order: one pass settles a chain
        # of lanes that finish at once (reused checkpoints, restores).
        if not self._ready_check:
            return
        self._ready_check = False
        still: list[LaneJob] = []
        waiting = self._waiting
        position = 0
        while True:
            if position < len(waiting):
                job = waiting[position]
            elif self._stopping or (job := self._draw()) is None:
                break  # every job drawn was looked at; none is drawn after a stop
            position += 1
            if self._pending_calls >= self._lookahead:
                self._throttled = True
                still.append(job)
                still.extend(waiting[position:])
                break
            if self._stopping or not self._ready(job):
                still.append(job)
                continue
            job.state = _State.RUNNING
            job.ledger = self._ledger.child()
            job.work = job.start(job.ledger)
            # its closure (step, lane, chunks, identity, needs) is not needed again
            job.start = _started
            self._advance(job, None)
            # a lane that settled at once (all reused) is journaled now, not after the
            # whole chain: its buffered events would otherwise wait for every lane
            self._flush_prefix()
        self._waiting = still

    def _draw(self) -> LaneJob | None:
        """The next job in plan order from the caller's jobs, or None when there is none."""
        job = next(self._source, None)
        if job is None:
            return None
        job.order = self._drawn
        self._drawn += 1
        self._open.append(job)
        return job

    def _ready(self, job: LaneJob) -> bool:
        """Every lane it needs has an artifact; under KEEP_GOING, for a partial job, or
        is lost (at least one has an artifact). A job that can never start is lost."""
        have = [lane in self._artifacts.get(step, {}) for step, lane in job.needs]
        if all(have):
            return True
        if self._policy is not FailurePolicy.KEEP_GOING:
            return False
        lost = [need in self._lost for need in job.needs]
        if not job.partial:
            if any(lost):
                self._lost.add((job.step, job.lane))
            return False
        if not all(h or gone for h, gone in zip(have, lost, strict=True)):
            return False  # a lane it needs may still come
        if not any(have):
            self._lost.add((job.step, job.lane))
            return False
        return True

    def _advance(self, job: LaneJob, sent: list[Any] | None) -> None:
        assert job.work is not None
        # the lane has the outcomes now: held here too, a finished lane's last batch (its
        # normalize, decoded) stayed alive until the run's end, for every lane (issue 29)
        job.outcomes = []
        while True:
            try:
                batch = job.work.send(sent)  # type: ignore[arg-type]
            except StopIteration as stop:
                job.state, job.artifact, job.batch = _State.DONE, stop.value, None
                job.work = None  # a finished generator's frame, kept per lane (issue 29)
                self._done += 1
                self._artifacts.setdefault(job.step, {})[job.lane] = stop.value
                self._ready_check = True
                return
            except StageFailure as failure:
                job.state, job.failure, job.batch = _State.FAILED, failure, None
                job.work = None
                self._failed.append(job)
                if self._policy is FailurePolicy.STOP:
                    self._stopping = True
                else:  # a partial consumer waiting for it may start now
                    self._lost.add((job.step, job.lane))
                    self._ready_check = True
                return
            if batch.calls:
                break
            sent = []
        job.batch, job.outcomes = batch, [None] * len(batch.calls)
        job.submitted = job.outstanding = 0
        job.batch_failed = False
        self._pending_calls += len(batch.calls)
        bisect.insort(self._queue, job, key=lambda j: j.order)

    # --- calls ---------------------------------------------------------------------

    def _fill(self) -> None:
        capacity = max(1, self._executor.capacity)
        while self._queue and not self._stopping and len(self._in_flight) < capacity:
            job = self._queue[0]
            assert job.batch is not None
            index = job.submitted
            job.submitted += 1
            job.outstanding += 1
            self._pending_calls -= 1
            if job.submitted == len(job.batch.calls):
                self._queue.pop(0)
            key = self._next_key
            self._next_key += 1
            self._in_flight[key] = (job, index)
            self._executor.submit(key, job.batch.calls[index])

    def _note(self, job: LaneJob, index: int, outcome: Any) -> None:
        """What a finished call changes in the scheduling (before any slot is refilled)."""
        assert job.batch is not None
        job.outcomes[index] = outcome
        job.outstanding -= 1
        if is_failure(outcome) and not job.batch_failed:
            job.batch_failed = True
            if job in self._queue:  # the lane's remaining calls are never started
                self._queue.remove(job)
                self._pending_calls -= len(job.batch.calls) - job.submitted
            if self._policy is FailurePolicy.STOP:
                self._stopping = True

    def _deliver(self, job: LaneJob, index: int, outcome: Any) -> None:
        """The lane stores the outcome; it goes on once its batch is in."""
        assert job.batch is not None
        if job.batch.on_result is not None:
            if not job.batch.keeps:
                job.outcomes[index] = None  # the lane has it
            job.batch.on_result(index, outcome)
        complete = job.submitted == len(job.batch.calls) or job.batch_failed
        if job.outstanding == 0 and complete and (job.batch_failed or not self._stopping):
            self._advance(job, job.outcomes)

    # --- journal order ---------------------------------------------------------------

    def _flush_prefix(self) -> None:
        """Journal the finished lanes at the head of plan order, and let them go."""
        open_ = self._open
        while open_:
            job = open_[0]
            if job.state in (_State.DONE, _State.FAILED):
                if not self._stopping and self._in_flight and not self._written(job):
                    # its checkpoint writes wait for company (a window of the write
                    # pool): journaled at a later completion, or at the end, not waited
                    # for now (docs/internals.md "The scheduler (`scheduler.py`)")
                    return
                self._flush(job)
            elif job.state is _State.RUNNING or not self._stopping:
                return  # a lane before the next ones may still journal: wait
            open_.popleft()

    @staticmethod
    def _written(job: LaneJob) -> bool:
        return job.ledger is None or job.flushed or job.ledger.writes_done()

    def _flush(self, job: LaneJob) -> None:
        if job.ledger is not None and not job.flushed:
            job.flushed = True
            self._ledger.absorb(job.ledger)
            job.ledger = None  # absorbed: its buffer is the run's now (issue 29: peak RSS)
