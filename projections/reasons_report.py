"""The reason-code report behind `explain`: every decision grouped by step, lane, stage.

Each decision carries its `outcome` (projections/stage_outcomes.py): the counts
(`totals`, each lane's `stages`) hold only decisions that took effect, and decisions
whose stage never started are counted apart in `not_started`.
"""

from __future__ import annotations

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
        # step -> lane -> compact decisions (`decision_view`), in journal order.
        self.steps: dict[str, dict[str, list[list[Any]]]] = {}
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

        Held compact (one short list of shared strings per decision, docs/performance.md
        "Reading commands on a large run"); `decision_view` gives its document form."""
        decision: list[Any] | None = None
        if isinstance(event, StageDecided):
            lanes = self.steps.setdefault(self._name(event.step), {})
            outcome = immediate(event)
            decision = [
                event.stage.value,
                event.chunk or None,
                event.code.value,
                event.category.value,
                event.detail,
                tuple(sorted(event.recorded)) if event.recorded else (),
                (outcome or Outcome.NOT_STARTED).value,
                event.cause.value if event.cause else None,
            ]
            lanes.setdefault(self._name(event.lane), []).append(decision)
        settled = self._pending.apply(event, decision)
        if settled is not None and isinstance(settled[0], list):
            settled[0][_OUTCOME] = settled[1].value

    def _settle_twins(self) -> None:
        """In a run that succeeded, mark the pending twins of a stage that ran as
        `deduplicated` (idempotent): it did not stop before them. A run that stopped keeps
        them `not_started` (whether they would have run again cannot be told)."""
        if self.status != "succeeded":
            return
        for token in self._pending.deduplicated():
            if isinstance(token, list) and token[_OUTCOME] == Outcome.NOT_STARTED:
                token[_OUTCOME] = Outcome.DEDUPLICATED.value

    def _counts(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        self._settle_twins()
        totals: dict[str, int] = {}
        not_started: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        for lanes in self.steps.values():
            for decisions in lanes.values():
                for d in decisions:
                    code, outcome = d[_CODE], d[_OUTCOME]
                    if d[_CATEGORY] != Category.FAILURE:  # a failed stage counts once
                        outcomes[outcome] = outcomes.get(outcome, 0) + 1
                    # a deduplicated twin is counted as the manifest counts it (its
                    # `not_started`), so `totals` stays the manifest's `decisions`; only
                    # its outcome (and explain's word) says what became of it
                    if outcome in _UNRUN:
                        not_started[code] = not_started.get(code, 0) + 1
                    else:
                        totals[code] = totals.get(code, 0) + 1
        return totals, not_started, outcomes

    def _lane_view(self, lane: str, decisions: list[list[Any]]) -> dict[str, Any]:
        by_stage: dict[str, dict[str, int]] = {}
        for d in decisions:
            if d[_OUTCOME] not in _UNRUN:
                codes = by_stage.setdefault(d[_STAGE], {})
                codes[d[_CODE]] = codes.get(d[_CODE], 0) + 1
        return {
            "lane": lane,
            "stages": by_stage,
            "decisions": [decision_view(d) for d in decisions],
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
