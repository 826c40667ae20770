"""Which stages' LLM requests went through which provider batch, and how each batch ended.

A pure fold of `LLMBatchSubmitted`, `LLMBatchPolled` and `LLMBatchCompleted`
(docs/operations.md "Batch runs"), for `explain` (its `llm_batches`, and the batch of
each decision listed).
"""

from __future__ import annotations

from typing import Any

from runjournal.domain.events import (
    LLMBatchCompleted,
    LLMBatchPolled,
    LLMBatchSubmitted,
    RunEvent,
)


class LLMBatchesFold:
    def __init__(self) -> None:
        self.batches: dict[str, dict[str, Any]] = {}  # batch id -> its view, in order seen
        # (step, lane, stage, chunk) -> the batches that held its requests, in order
        self.stages: dict[tuple[str, str, str, str], list[str]] = {}

    def apply(self, event: RunEvent) -> None:
        if isinstance(event, LLMBatchSubmitted):
            view = self.batches.setdefault(
                event.batch_id,
                {
                    "batch_id": event.batch_id,
                    "request_set": event.request_set,
                    "profile_id": event.profile_id,
                    "model": event.model,
                    "round": event.round,
                    "requests": event.requests,
                    "resumed": event.resumed,
                    "status": "submitted",
                    "steps": {},
                },
            )
            for stage in event.stages:
                key = (stage.step, stage.lane, stage.stage.value, stage.chunk)
                held = self.stages.setdefault(key, [])
                if event.batch_id not in held:
                    held.append(event.batch_id)
                    view["steps"][stage.step] = view["steps"].get(stage.step, 0) + 1
        elif isinstance(event, LLMBatchPolled) and event.batch_id in self.batches:
            self.batches[event.batch_id].update(
                status=event.status,
                total=event.total,
                completed=event.completed,
                failed=event.failed,
            )
        elif isinstance(event, LLMBatchCompleted) and event.batch_id in self.batches:
            self.batches[event.batch_id].update(
                status=event.status,
                collected={
                    "completed": event.completed,
                    "errored": event.errored,
                    "expired": event.expired,
                },
            )

    def view(self) -> list[dict[str, Any]]:
        return list(self.batches.values())

    def batch_of(self, step: str, lane: str, stage: str, chunk: str) -> list[str]:
        return self.stages.get((step, lane, stage, chunk), [])

    def annotate(self, view: dict[str, Any]) -> dict[str, Any]:
        """An `explain` view with `llm_batches`, and each decision whose stage's requests
        went through a batch with its `batches` (ids, in order); unchanged when the run
        had none."""
        if not self.batches:
            return view
        for step in view.get("steps", []):
            for lane in step.get("lanes", []):
                for decision in lane.get("decisions", []):
                    held = self.batch_of(
                        step["step"], lane["lane"], decision["stage"], decision["chunk"]
                    )
                    if held:
                        decision["batches"] = held
        return {**view, "llm_batches": self.view()}


def batch_lines(batches: list[dict[str, Any]]) -> list[str]:
    """`explain`'s lines for the provider batches a run used (docs/operations.md
    "Batch runs")."""
    lines = []
    for b in batches:
        steps = ", ".join(f"{n} of {step}" for step, n in b["steps"].items())
        got = b.get("collected")
        how = (
            f"{got['completed']} completed, {got['errored']} errored, {got['expired']} expired"
            if got
            else "not collected"
        )
        again = " (followed: submitted before)" if b["resumed"] else ""
        follow = f", follow-up round {b['round']}" if b["round"] > 1 else ""
        lines.append(
            f"batch: {b['batch_id']}{again} {b['status']}: {b['requests']} request(s){follow}"
            f" ({steps}); {how}"
        )
    return lines
