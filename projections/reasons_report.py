"""The reason-code report behind `explain`: every decision grouped by step, lane, stage.

Each decision carries its `outcome` (projections/stage_outcomes.py): the counts
(`totals`, each lane's `stages`) hold only decisions that took effect, and decisions
whose stage never started are counted apart in `not_started`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any, ClassVar

from runjournal.domain.events import (
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
    StageLeaseWaited,
    WarningRecorded,
)
from runjournal.domain.reasons import Category
from runjournal.domain.runner.stage_failures import PARTIAL_OUTPUT
from runjournal.projections.base import error_view
from runjournal.projections.llm_usage import LLMUsageFold
from runjournal.projections.stage_outcomes import Outcome, PendingStages, immediate
from runjournal.projections.streamed import Streamed

# Outcomes of decisions whose own stage did not run in this run (counted in `not_started`).
_UNRUN = (Outcome.NOT_STARTED, Outcome.DEDUPLICATED)


class ReasonReportProjection:
    NAME: ClassVar[str] = "reasons"
    # 2: each decision's `outcome`; `totals`/`stages` count only decisions that took
    # effect; `outcomes` and `not_started`
    VERSION: ClassVar[int] = 2

    def __init__(self, step: str | None = None) -> None:
        self.only_step = step
        self.run_id = ""
        # step -> lane -> its decisions, compact (`_Decisions`), in journal order.
        self.steps: dict[str, dict[str, _Decisions]] = {}
        self._shapes = _Shapes()
        self.failures: list[dict[str, str]] = []
        # waits for another run's stage lease (docs/operations.md "Concurrent runs")
        self.lease_waits: list[dict[str, str | None]] = []
        # lanes of `partial = true` steps that ran without some documents (--keep-going)
        self.partial: list[dict[str, str]] = []
        self.status = "running"
        self.error: dict[str, str | None] | None = None
        self.llm = LLMUsageFold()
        self._pending = PendingStages()
        self._names: dict[str, str] = {}  # one copy of each step and lane name

    def _name(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def apply(self, event: RunEvent) -> None:
        if self.only_step is None or getattr(event, "step", None) == self.only_step:
            self.llm.apply(event)
        if isinstance(event, StageDecided | StageExecuted | StageFailed):
            if self.only_step is not None and event.step != self.only_step:
                return
            self._stage(event)
        if isinstance(event, StageFailed):
            if self.only_step is None or event.step == self.only_step:
                self.failures.append(
                    {
                        "step": event.step,
                        "lane": event.lane,
                        "stage": event.stage.value,
                        "chunk": event.chunk or None,
                        "reason_code": event.code.value,
                        "cause": event.cause.value if event.cause else None,
                        "message": event.message,
                    }
                )
        elif isinstance(event, StageLeaseWaited):
            if self.only_step is None or event.step == self.only_step:
                self.lease_waits.append(
                    {
                        "step": event.step,
                        "lane": event.lane,
                        "stage": event.stage.value,
                        "chunk": event.chunk or None,
                        "holder": event.holder,
                        "outcome": event.outcome.value,
                    }
                )
        elif isinstance(event, WarningRecorded) and event.message.startswith(PARTIAL_OUTPUT):
            if self.only_step is None or event.step == self.only_step:
                self.partial.append(
                    {"step": event.step, "lane": event.lane, "message": event.message}
                )
        elif isinstance(event, RunAllocated):
            self.run_id = event.run_id
        elif isinstance(event, RunTerminated):
            self.status = event.status.value
            self.error = error_view(event.error)

    def _stage(self, event: StageDecided | StageExecuted | StageFailed) -> None:
        """A decision is listed at once; its outcome is settled by its stage's execution.

        Held compact: a shape id and a chunk id's bytes per decision (`_Decisions`,
        docs/performance.md "gc, audit and explain at scale"); `decision_view` gives its
        document form."""
        token: tuple[_Decisions, int] | None = None
        if isinstance(event, StageDecided):
            lanes = self.steps.setdefault(self._name(event.step), {})
            outcome = immediate(event)
            shape = (
                event.stage.value,
                event.code.value,
                event.category.value,
                event.detail,
                tuple(sorted(event.recorded)) if event.recorded else (),
                (outcome or Outcome.NOT_STARTED).value,
                event.cause.value if event.cause else None,
            )
            decisions = lanes.get(event.lane)
            if decisions is None:
                decisions = lanes[self._name(event.lane)] = _Decisions()
            token = (decisions, decisions.add(self._shapes.id_of(shape), event.chunk or None))
        settled = self._pending.apply(event, token)
        if settled is not None and isinstance(settled[0], tuple):
            self._set_outcome(settled[0], settled[1].value)

    def _set_outcome(self, token: tuple[_Decisions, int], outcome: str) -> None:
        decisions, at = token
        shape = self._shapes.shape(decisions.shapes[at])
        decisions.shapes[at] = self._shapes.id_of(
            (*shape[:_S_OUTCOME], outcome, *shape[_S_OUTCOME + 1 :])
        )

    def _decision(self, decisions: _Decisions, at: int) -> list[Any]:
        """One decision as `decision_view` takes it."""
        stage, code, category, detail, differs, outcome, cause = self._shapes.shape(
            decisions.shapes[at]
        )
        return [stage, decisions.chunk(at), code, category, detail, differs, outcome, cause]

    def _settle_twins(self) -> None:
        """In a run that succeeded, mark the pending twins of a stage that ran as
        `deduplicated` (idempotent): it did not stop before them. A run that stopped keeps
        them `not_started` (whether they would have run again cannot be told)."""
        if self.status != "succeeded":
            return
        for token in self._pending.deduplicated():
            if not isinstance(token, tuple):
                continue
            decisions, at = token
            if self._shapes.shape(decisions.shapes[at])[_S_OUTCOME] == Outcome.NOT_STARTED:
                self._set_outcome(token, Outcome.DEDUPLICATED.value)

    def _counts(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        self._settle_twins()
        totals: dict[str, int] = {}
        not_started: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        shapes = self._shapes.shape
        for lanes in self.steps.values():
            for decisions in lanes.values():
                for shape_id in decisions.shapes:
                    d = shapes(shape_id)
                    code, outcome = d[_S_CODE], d[_S_OUTCOME]
                    if d[_S_CATEGORY] != Category.FAILURE:  # a failed stage counts once
                        outcomes[outcome] = outcomes.get(outcome, 0) + 1
                    # a deduplicated twin is counted as the manifest counts it (its
                    # `not_started`), so `totals` stays the manifest's `decisions`; only
                    # its outcome (and explain's word) says what became of it
                    if outcome in _UNRUN:
                        not_started[code] = not_started.get(code, 0) + 1
                    else:
                        totals[code] = totals.get(code, 0) + 1
        return totals, not_started, outcomes

    def _lane_view(self, lane: str, decisions: _Decisions) -> dict[str, Any]:
        by_stage: dict[str, dict[str, int]] = {}
        listed = [self._decision(decisions, at) for at in range(len(decisions.shapes))]
        for d in listed:
            if d[_OUTCOME] not in _UNRUN:
                codes = by_stage.setdefault(d[_STAGE], {})
                codes[d[_CODE]] = codes.get(d[_CODE], 0) + 1
        return {
            "lane": lane,
            "stages": by_stage,
            "decisions": [decision_view(d) for d in listed],
        }

    def head(self) -> dict[str, Any]:
        """The view without `steps`: what `lanes` streams beside it."""
        totals, not_started, outcomes = self._counts()
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "totals": dict(sorted(totals.items())),
            "not_started": dict(sorted(not_started.items())),
            "outcomes": dict(sorted(outcomes.items())),
            "failures": self.failures,
            "llm": self.llm.view(),
            # only when the run waited: views of earlier runs have no such key
            **({"lease_waits": self.lease_waits} if self.lease_waits else {}),
            **({"partial": self.partial} if self.partial else {}),
        }

    def step_names(self) -> list[str]:
        return list(self.steps)

    def lanes(self, step: str) -> Iterator[dict[str, Any]]:
        """One step's lane views, built one at a time (for a streamed document)."""
        self._settle_twins()
        for lane, decisions in self.steps[step].items():
            yield self._lane_view(lane, decisions)

    def streamed_view(self) -> Streamed:
        """`view()`, described lazily: each lane's decisions become dicts as it is written."""
        steps = (Streamed({"step": s}, "lanes", self.lanes(s)) for s in self.step_names())
        return Streamed(self.head(), "steps", steps)

    def view(self) -> dict[str, Any]:
        steps = [{"step": step, "lanes": list(self.lanes(step))} for step in self.steps]
        return {**self.head(), "steps": steps}


_STAGE, _CHUNK, _CODE, _CATEGORY, _DETAIL, _DIFFERS, _OUTCOME, _CAUSE = range(8)
# a shape (`_Shapes`) is a decision without its chunk id
_S_CODE, _S_CATEGORY, _S_OUTCOME = 1, 2, 5
_NO_CHUNK = bytes(32)


class _Shapes:
    """Each distinct decision without its chunk id (stage, code, category, detail,
    differs, outcome, cause) once, by a small id: a run's decisions have few of them."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}
        self._shapes: list[tuple[Any, ...]] = []

    def id_of(self, shape: tuple[Any, ...]) -> int:
        found = self._ids.get(shape)
        if found is None:
            found = self._ids[shape] = len(self._shapes)
            self._shapes.append(shape)
        return found

    def shape(self, shape_id: int) -> tuple[Any, ...]:
        return self._shapes[shape_id]


class _Decisions:
    """One lane's decisions in journal order: a shape id each, and its chunk id as 32
    bytes (a 64-hex id; another chunk id, or none, beside them by position). About 36
    bytes a decision where a list of its fields and its chunk id's string took about 230
    (docs/performance.md "gc, audit and explain at scale")."""

    __slots__ = ("chunks", "odd", "shapes")

    def __init__(self) -> None:
        self.shapes = array("I")
        self.chunks = bytearray()
        self.odd: dict[int, str | None] | None = None  # position -> chunk not as bytes

    def add(self, shape_id: int, chunk: str | None) -> int:
        at = len(self.shapes)
        self.shapes.append(shape_id)
        raw = None
        if chunk is not None and len(chunk) == 64:
            try:
                raw = bytes.fromhex(chunk)
            except ValueError:
                raw = None
            if raw is not None and raw.hex() != chunk:
                raw = None
        if raw is None:
            self.chunks += _NO_CHUNK
            if self.odd is None:
                self.odd = {}
            self.odd[at] = chunk
        else:
            self.chunks += raw
        return at

    def chunk(self, at: int) -> str | None:
        if self.odd is not None and at in self.odd:
            return self.odd[at]
        return self.chunks[at * 32 : at * 32 + 32].hex()


def decision_view(d: list[Any]) -> dict[str, Any]:
    """One compact decision in its document form."""
    return {
        "stage": d[_STAGE],
        "chunk": d[_CHUNK],
        "code": d[_CODE],
        "category": d[_CATEGORY],
        "detail": d[_DETAIL],
        "differs": list(d[_DIFFERS]),
        "outcome": d[_OUTCOME],
        **({"cause": d[_CAUSE]} if d[_CAUSE] is not None else {}),
    }
