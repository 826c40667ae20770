"""Settling chunk plans: one durable group, before any plan is recorded (issue 26).

`settle_plans` publishes every computed plan with `durable=False`, makes them durable
with one `sync()` of the store, and only then emits the `ChunkPlanResolved` events that
name them published (docs/internals.md "Group durability").
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from runjournal.domain.chunking import Span
from runjournal.domain.events import ChunkPlanResolved, PlanOutcome
from runjournal.domain.ports import PlanPublishError
from runjournal.domain.runner.plans import PlannedSource, settle_plans


class Ledger:
    """What `settle_plans` uses of the run's ledger, recording the order of things."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.persistence_errors: list[str] = []
        self.journal = (
            self  # the typed recorder (docs/internals.md "Recording a run (`RunRecorder`)")
        )

    def plan_resolved(self, **fields: Any) -> None:
        self.log.append(("emit", ChunkPlanResolved, fields))

    def persistence_error(self, message: str) -> None:
        self.persistence_errors.append(message)


class Store:
    def __init__(self, log: list[Any], *, sync_fails: bool = False) -> None:
        self.log = log
        self.sync_fails = sync_fails

    def get(self, key: str) -> Any:  # pragma: no cover - settle_plans never reads
        raise AssertionError("not read")

    def publish(self, key: str, spans: list[Span], facts: Any = None, *, durable: bool = True):
        self.log.append(("publish", key, durable))
        return True

    def sync(self) -> None:
        self.log.append(("sync",))
        if self.sync_fails:
            raise PlanPublishError("chunk plans may not be durable: [Errno 5] I/O error")


def planned(n: int, *, publish: bool = True) -> list[PlannedSource]:
    return [
        PlannedSource(
            source=SimpleNamespace(name=f"doc{i}.md"),  # type: ignore[arg-type]
            key=f"{i:064x}",
            facts=None,  # type: ignore[arg-type]
            spans=[Span(0, 3)],
            outcomes=[PlanOutcome.COMPUTED],
            chunks=[],
            publish=publish,
        )
        for i in range(n)
    ]


def test_plans_are_published_undurably_then_synced_once_before_they_are_recorded() -> None:
    log: list[Any] = []
    ledger = Ledger(log)
    settle_plans(planned(5), Store(log), ledger)  # type: ignore[arg-type]
    kinds = [entry[0] for entry in log]
    assert kinds == ["publish"] * 5 + ["sync"] + ["emit"] * 5
    assert all(entry[2] is False for entry in log if entry[0] == "publish")
    events = [entry[2] for entry in log if entry[0] == "emit"]
    assert all(entry[1] is ChunkPlanResolved for entry in log if entry[0] == "emit")
    assert [e["source"] for e in events] == [f"doc{i}.md" for i in range(5)]  # plan order
    assert all(e["outcomes"] == [PlanOutcome.COMPUTED, PlanOutcome.PUBLISHED] for e in events)
    assert ledger.persistence_errors == []


def test_nothing_to_publish_takes_no_sync() -> None:
    log: list[Any] = []
    settle_plans(planned(3, publish=False), Store(log), Ledger(log))  # type: ignore[arg-type]
    assert [entry[0] for entry in log] == ["emit"] * 3


def test_a_failed_sync_is_reported_and_the_plans_are_still_used() -> None:
    log: list[Any] = []
    ledger = Ledger(log)
    settle_plans(planned(4), Store(log, sync_fails=True), ledger)  # type: ignore[arg-type]
    assert ledger.persistence_errors == ["4 chunk plans may not be durable: [Errno 5] I/O error"]
    assert [entry[0] for entry in log].count("emit") == 4  # every source still recorded
