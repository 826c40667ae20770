"""`FakeRecorder`: an in-memory `RunRecorder` (domain/ports.py) for the runner's unit tests.

Each method goes through the `Run` aggregate's command for its event, as the journal
session does (adapters/journal/session.py), so a runner that records out of order fails
its unit tests too; nothing is redacted, batched or stored. `events` are the recorded
events after `RunAllocated`; `of(T)` the ones of type T; `records()` each as its type's
name and its fields without the envelope (for comparing two runs).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from runjournal.domain.events import BatchStage, RunEvent, WarningRecorded
from runjournal.domain.run import Run

T0 = datetime(2026, 12, 1, tzinfo=UTC)
_ENVELOPE = ("originator_id", "originator_version", "timestamp")


def _clock() -> Any:
    now = [T0]

    def tick() -> datetime:
        now[0] += timedelta(milliseconds=1)
        return now[0]

    return tick


def allocated_run(run_id: str = "20261201T000000Z-0a0b0c0d") -> Run:
    """A `Run` with its `RunAllocated` recorded (and collected), ready for commands."""
    run = Run.allocate(
        _clock(),
        run_id=run_id,
        pipeline="p",
        pipeline_file="/p/pipeline.toml",
        argv=[],
        tool_version="0",
        run_dir=f"/out/{run_id}",
        output_root="/out",
        cache_root="/cache",
        workspace=None,
        debug_bundle=None,
        host="h",
        pid=1,
        process_start=0.0,
    )
    run.collect_events()
    return run


class FakeRecorder:
    def __init__(self, run: Run | None = None) -> None:
        self.run = run if run is not None else allocated_run()
        self.events: list[RunEvent] = []

    def of(self, event_type: type[RunEvent]) -> list[Any]:
        return [e for e in self.events if type(e) is event_type]

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for event in self.events:
            fields = msgspec.to_builtins(event)
            for name in _ENVELOPE:
                fields.pop(name)
            out.append((type(event).__name__, fields))
        return out

    def _keep(self, event: RunEvent) -> None:
        self.events.append(event)

    # --- RunRecorder ---------------------------------------------------------------

    def inputs_fingerprinted(self, **fields: Any) -> None:
        self._keep(self.run.record_inputs(**fields))

    def plan_resolved(self, **fields: Any) -> None:
        self._keep(self.run.record_plan(**fields))

    def lane_resolved(self, **fields: Any) -> None:
        self._keep(self.run.resolve_lane(**fields))

    def lease_waited(self, **fields: Any) -> None:
        self._keep(self.run.record_lease_wait(**fields))

    def decided(self, **fields: Any) -> None:
        self._keep(self.run.decide(**fields))

    def lane_reused(self, *, step: str, lane: str, stages: list[Any]) -> None:
        # no earlier run to name: each decision is recorded, as a session without one does
        for item in stages:
            self._keep(self.run.record_reused(step=step, lane=lane, item=item))

    def executed(self, **fields: Any) -> None:
        self._keep(self.run.record_execution(**fields))

    def stage_failed(self, **fields: Any) -> None:
        self._keep(self.run.record_stage_failure(**fields))

    def llm_attempt(self, **fields: Any) -> None:
        self._keep(self.run.record_llm_attempt(**fields))

    def llm_reused(self, **fields: Any) -> None:
        self._keep(self.run.record_llm_reuse(**fields))

    def llm_batch_submitted(self, **fields: Any) -> None:
        stages = [BatchStage(*stage) for stage in fields.pop("stages")]
        self._keep(self.run.record_llm_batch_submitted(stages=stages, **fields))

    def llm_batch_polled(self, **fields: Any) -> None:
        self._keep(self.run.record_llm_batch_polled(**fields))

    def llm_batch_completed(self, **fields: Any) -> None:
        self._keep(self.run.record_llm_batch_completed(**fields))

    def checkpoint_written(self, **fields: Any) -> None:
        self._keep(self.run.record_checkpoint(**fields))

    def checkpoint_write_failed(self, **fields: Any) -> None:
        self._keep(self.run.record_checkpoint_failure(**fields))

    def artifact(self, **fields: Any) -> None:
        self._keep(self.run.record_artifact(**fields))

    def warning(self, **fields: Any) -> None:
        self._keep(self.run.trigger(WarningRecorded, **fields))
