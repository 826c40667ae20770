"""The reason-code report behind `explain`: every decision grouped by step, lane, stage.

Each decision carries its `outcome` (projections/stage_outcomes.py): the counts
(`totals`, each lane's `stages`) hold only decisions that took effect, and decisions
whose stage never started are counted apart in `not_started`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import (
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.reasons import Category
from runjournal.projections.base import error_view
from runjournal.projections.llm_usage import LLMUsageFold
from runjournal.projections.stage_outcomes import Outcome, PendingStages, immediate


class ReasonReportProjection:
    NAME: ClassVar[str] = "reasons"
    # 2: each decision's `outcome`; `totals`/`stages` count only decisions that took
    # effect; `outcomes` and `not_started`
    VERSION: ClassVar[int] = 2

    def __init__(self, step: str | None = None) -> None:
        self.only_step = step
        self.run_id = ""
        # step -> lane -> list of decision dicts, in journal order.
        self.steps: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.failures: list[dict[str, str]] = []
        self.status = "running"
        self.error: dict[str, str | None] | None = None
        self.llm = LLMUsageFold()
        self._pending = PendingStages()

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
        elif isinstance(event, RunAllocated):
            self.run_id = event.run_id
        elif isinstance(event, RunTerminated):
            self.status = event.status.value
            self.error = error_view(event.error)

    def _stage(self, event: StageDecided | StageExecuted | StageFailed) -> None:
        """A decision is listed at once; its outcome is settled by its stage's execution."""
        decision: dict[str, Any] | None = None
        if isinstance(event, StageDecided):
            lanes = self.steps.setdefault(event.step, {})
            outcome = immediate(event)
            decision = {
                "stage": event.stage.value,
                "chunk": event.chunk or None,
                "code": event.code.value,
                "category": event.category.value,
                "detail": event.detail,
                "differs": sorted(event.recorded),
                "outcome": (outcome or Outcome.NOT_STARTED).value,
                **({"cause": event.cause.value} if event.cause else {}),
            }
            lanes.setdefault(event.lane, []).append(decision)
        settled = self._pending.apply(event, decision)
        if settled is not None and isinstance(settled[0], dict):
            settled[0]["outcome"] = settled[1].value

    def view(self) -> dict[str, Any]:
        steps = []
        totals: dict[str, int] = {}
        not_started: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        for step, lanes in self.steps.items():
            lane_views = []
            for lane, decisions in lanes.items():
                by_stage: dict[str, dict[str, int]] = {}
                for d in decisions:
                    if d["category"] != Category.FAILURE:  # a failed stage counts once
                        outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
                    if d["outcome"] == Outcome.NOT_STARTED:
                        not_started[d["code"]] = not_started.get(d["code"], 0) + 1
                        continue
                    codes = by_stage.setdefault(d["stage"], {})
                    codes[d["code"]] = codes.get(d["code"], 0) + 1
                    totals[d["code"]] = totals.get(d["code"], 0) + 1
                lane_views.append({"lane": lane, "stages": by_stage, "decisions": decisions})
            steps.append({"step": step, "lanes": lane_views})
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "totals": dict(sorted(totals.items())),
            "not_started": dict(sorted(not_started.items())),
            "outcomes": dict(sorted(outcomes.items())),
            "steps": steps,
            "failures": self.failures,
            "llm": self.llm.view(),
        }
