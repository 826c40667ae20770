"""The reason-code report behind `explain`: every decision grouped by step, lane, stage."""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import (
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageFailed,
)
from runjournal.projections.base import error_view
from runjournal.projections.llm_usage import LLMUsageFold


class ReasonReportProjection:
    NAME: ClassVar[str] = "reasons"
    VERSION: ClassVar[int] = 1

    def __init__(self, step: str | None = None) -> None:
        self.only_step = step
        self.run_id = ""
        # step -> lane -> list of decision dicts, in journal order.
        self.steps: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.totals: dict[str, int] = {}
        self.failures: list[dict[str, str]] = []
        self.status = "running"
        self.error: dict[str, str | None] | None = None
        self.llm = LLMUsageFold()

    def apply(self, event: RunEvent) -> None:
        if self.only_step is None or getattr(event, "step", None) == self.only_step:
            self.llm.apply(event)
        if isinstance(event, StageDecided):
            if self.only_step is not None and event.step != self.only_step:
                return
            lanes = self.steps.setdefault(event.step, {})
            lanes.setdefault(event.lane, []).append(
                {
                    "stage": event.stage.value,
                    "chunk": event.chunk or None,
                    "code": event.code.value,
                    "category": event.category.value,
                    "detail": event.detail,
                    "differs": sorted(event.recorded),
                    **({"cause": event.cause.value} if event.cause else {}),
                }
            )
            self.totals[event.code.value] = self.totals.get(event.code.value, 0) + 1
        elif isinstance(event, StageFailed):
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

    def view(self) -> dict[str, Any]:
        steps = []
        for step, lanes in self.steps.items():
            lane_views = []
            for lane, decisions in lanes.items():
                by_stage: dict[str, dict[str, int]] = {}
                for d in decisions:
                    codes = by_stage.setdefault(d["stage"], {})
                    codes[d["code"]] = codes.get(d["code"], 0) + 1
                lane_views.append({"lane": lane, "stages": by_stage, "decisions": decisions})
            steps.append({"step": step, "lanes": lane_views})
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "totals": dict(sorted(self.totals.items())),
            "steps": steps,
            "failures": self.failures,
            "llm": self.llm.view(),
        }
