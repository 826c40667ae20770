"""The runs index: one row per run, from its allocation and terminal events."""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import RunAllocated, RunEvent, RunTerminated


class RunsIndexProjection:
    NAME: ClassVar[str] = "runs_index"
    VERSION: ClassVar[int] = 1

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self._by_aggregate: dict[Any, str] = {}

    def apply(self, event: RunEvent) -> None:
        if isinstance(event, RunAllocated):
            self._by_aggregate[event.originator_id] = event.run_id
            self.rows[event.run_id] = {
                "run_id": event.run_id,
                "pipeline": event.pipeline,
                "status": "running",
                "phase": None,
                "started": event.timestamp.isoformat(),
                "ended": None,
                "run_dir": event.run_dir,
                "host": event.host,
                "pid": event.pid,
            }
        elif isinstance(event, RunTerminated):
            run_id = self._by_aggregate.get(event.originator_id)
            if run_id is not None:
                row = self.rows[run_id]
                row["status"] = event.status.value
                row["phase"] = event.phase.value
                row["ended"] = event.timestamp.isoformat()

    def view(self) -> dict[str, Any]:
        return {"runs": sorted(self.rows.values(), key=lambda r: (r["started"], r["run_id"]))}
