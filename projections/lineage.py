"""A run as OpenLineage run events: plain records folded from its events
(docs/operations.md "Traces and lineage").

The run is one OpenLineage run of the job `<pipeline>`: START when it was allocated,
RUNNING when its first step began, and COMPLETE, FAIL or ABORT (interrupted or
abandoned) when it ended; its inputs are the sources and references it fingerprinted,
its outputs the files it wrote, each a dataset with its logical name, sha256 and size.
Each step is a child run (job `<pipeline>.<step>`, the run as its parent): START with
the artifacts it read, then COMPLETE, FAIL or ABORT with the artifacts and files it made
and its decisions counted by reason code and outcome. A run still going has START and
RUNNING events only.

Run ids are UUIDs: the run's aggregate id (uuid5 of the run id) and, for a step, a uuid5
of that and the step id, so two emissions of one run name the same runs. Pure: no
openlineage import here; `adapters/lineage_emit.py` turns the records into
openlineage-python's events and sends them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid5

from runjournal.domain.events import (
    ArtifactGenerated,
    InputsFingerprinted,
    LaneResolved,
    OutputWritten,
    RunAllocated,
    RunEvent,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
    Timestamp,
)
from runjournal.projections.stage_outcomes import Outcome, PendingStages, immediate

START, RUNNING, COMPLETE, FAIL, ABORT = "START", "RUNNING", "COMPLETE", "FAIL", "ABORT"

_TERMINAL = {
    RunStatus.SUCCEEDED: COMPLETE,
    RunStatus.FAILED: FAIL,
    RunStatus.INTERRUPTED: ABORT,
    RunStatus.ABANDONED: ABORT,
}


@dataclass(frozen=True)
class DatasetRecord:
    name: str  # a logical name (docs/operations.md "Names") or `artifact:<step>/<lane>/<kind>`
    sha256: str
    size: int


@dataclass(frozen=True)
class LineageRecord:
    event_type: str
    event_time: str  # ISO 8601 with its offset
    run_uuid: str
    job: str
    job_type: str  # PIPELINE or STEP
    parent: tuple[str, str] | None  # (run uuid, job) of the run a step belongs to
    inputs: tuple[DatasetRecord, ...] = ()
    outputs: tuple[DatasetRecord, ...] = ()
    identity: tuple[tuple[str, Any], ...] = ()  # the `runjournal_run` run facet
    decisions: tuple[tuple[str, int], ...] | None = None  # reason code or outcome -> count
    error: str | None = None


def step_run_uuid(run_uuid: UUID, step: str) -> UUID:
    return uuid5(run_uuid, f"step:{step}")


def _iso(moment: Timestamp) -> str:
    return moment.isoformat()


class _Step:
    def __init__(self, start: str) -> None:
        self.start = start
        self.last = start
        self.inputs: dict[str, DatasetRecord] = {}
        self.outputs: dict[str, DatasetRecord] = {}
        self.codes: dict[str, int] = {}
        self.outcomes: dict[str, int] = {}
        self.error: str | None = None
        self.pending = 0
        self.lanes: set[str] = set()


class LineageFold:
    """Fold a run's events into its OpenLineage run events (`records()` at the end)."""

    def __init__(self) -> None:
        self.allocated: RunAllocated | None = None
        self.started: str | None = None  # when the first step began
        self.terminated: RunTerminated | None = None
        self.inputs: dict[str, DatasetRecord] = {}
        self.outputs: dict[str, DatasetRecord] = {}
        self.steps: dict[str, _Step] = {}
        self._pending = PendingStages()

    def apply(self, event: RunEvent) -> None:
        if isinstance(event, RunAllocated):
            self.allocated = event
            return
        if self.allocated is None:
            return
        at = _iso(event.timestamp)
        if isinstance(event, InputsFingerprinted):
            for f in (*event.sources, *event.references):
                self.inputs[f.name] = DatasetRecord(f.name, f.sha256, f.size)
        elif isinstance(event, LaneResolved):
            step = self._step(event.step, at)
            step.lanes.add(event.lane)
            for ref in event.dependencies:
                name = f"artifact:{ref.step}/{ref.lane}/{ref.kind}"
                step.inputs[name] = DatasetRecord(name, ref.sha256, ref.size)
        elif isinstance(event, StageDecided):
            step = self._step(event.step, at)
            step.codes[event.code.value] = step.codes.get(event.code.value, 0) + 1
            outcome = immediate(event)
            if outcome is None:
                self._pending.apply(event)
                step.pending += 1
            else:
                self._count(step, outcome)
                if outcome is Outcome.FAILED:
                    step.error = step.error or event.detail
        elif isinstance(event, StageExecuted | StageFailed):
            step = self._step(event.step, at)
            settled = self._pending.apply(event)
            if settled is not None:
                step.pending -= 1
                self._count(step, settled[1])
            if isinstance(event, StageFailed):
                step.error = step.error or event.message
        elif isinstance(event, ArtifactGenerated):
            step = self._step(event.step, at)
            name = f"artifact:{event.step}/{event.lane}/{event.kind}"
            step.outputs[name] = DatasetRecord(name, event.sha256, event.size)
        elif isinstance(event, OutputWritten):
            record = DatasetRecord(event.name, event.sha256, event.size)
            self.outputs[event.name] = record
            if event.step is not None and event.step in self.steps:
                self.steps[event.step].outputs[event.name] = record
        elif isinstance(event, RunTerminated):
            self.terminated = event

    def _step(self, name: str, at: str) -> _Step:
        step = self.steps.get(name)
        if step is None:
            step = self.steps[name] = _Step(at)
            if self.started is None:
                self.started = at
        step.last = at
        return step

    @staticmethod
    def _count(step: _Step, outcome: Outcome) -> None:
        step.outcomes[outcome.value] = step.outcomes.get(outcome.value, 0) + 1

    def records(self) -> list[LineageRecord]:
        """Every event, in time order; empty when the events held no `RunAllocated`."""
        allocated = self.allocated
        if allocated is None:
            return []
        run_uuid = allocated.originator_id
        job = allocated.pipeline
        identity = (
            ("runId", allocated.run_id),
            ("pipeline", allocated.pipeline),
            ("toolVersion", allocated.tool_version),
            ("status", self.terminated.status.value if self.terminated else "running"),
        )
        run = {"run_uuid": str(run_uuid), "job": job, "job_type": "PIPELINE", "parent": None}
        inputs = tuple(self.inputs[n] for n in sorted(self.inputs))
        out: list[LineageRecord] = [
            LineageRecord(START, _iso(allocated.timestamp), identity=identity, **run)
        ]
        if self.started is not None:
            out.append(
                LineageRecord(RUNNING, self.started, inputs=inputs, identity=identity, **run)
            )
        end = self.terminated
        for name in sorted(self.steps, key=lambda s: (self.steps[s].start, s)):
            step = self.steps[name]
            kind = {
                "run_uuid": str(step_run_uuid(run_uuid, name)),
                "job": f"{job}.{name}",
                "job_type": "STEP",
                "parent": (str(run_uuid), job),
            }
            # a lane named by a source's logical name reads that source
            read = {**step.inputs, **{n: self.inputs[n] for n in step.lanes if n in self.inputs}}
            step_inputs = tuple(read[n] for n in sorted(read))
            out.append(LineageRecord(START, step.start, inputs=step_inputs, **kind))
            if end is None:
                continue
            if step.error is not None:
                state = FAIL
            elif step.pending or (end.status is not RunStatus.SUCCEEDED and not step.outcomes):
                state = ABORT  # stages decided that never ran: the run stopped first
            else:
                state = COMPLETE
            decisions = tuple(sorted(step.codes.items())) + tuple(
                (f"outcome:{k}", v) for k, v in sorted(step.outcomes.items())
            )
            out.append(
                LineageRecord(
                    state,
                    step.last,
                    inputs=step_inputs,
                    outputs=tuple(step.outputs[n] for n in sorted(step.outputs)),
                    decisions=decisions,
                    error=step.error,
                    **kind,
                )
            )
        if end is not None:
            status = end.status
            error = end.error.message if end.error is not None else None
            out.append(
                LineageRecord(
                    _TERMINAL.get(status, ABORT),
                    _iso(end.timestamp),
                    inputs=inputs,
                    outputs=tuple(self.outputs[n] for n in sorted(self.outputs)),
                    identity=identity,
                    error=error if status is not RunStatus.SUCCEEDED else None,
                    **run,
                )
            )
        return out


def lineage_of(events: Any) -> list[LineageRecord]:
    fold = LineageFold()
    for event in events:
        fold.apply(event)
    return fold.records()
