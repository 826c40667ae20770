"""`RunLedger.stored_checkpoint`: a checkpoint a worker wrote into the bucket is journaled
as the executor verified it, or as a failed write (docs/internals.md "Object-storage
cache")."""

from __future__ import annotations

from typing import Any

from runjournal.domain.decisions import Stage
from runjournal.domain.ports import CheckpointKey
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.tasks import StoredCheckpoint


class Journal:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def checkpoint_written(self, **data: Any) -> None:
        self.events.append(("written", data))

    def checkpoint_write_failed(self, **data: Any) -> None:
        self.events.append(("failed", data))


class Recorder:
    def write(self, key: CheckpointKey, record: Any) -> tuple[str, int]:
        raise AssertionError("the coordinator writes nothing a worker wrote")


KEY = CheckpointKey("s", "l", Stage.EXTRACT, "a" * 64)


def test_a_verified_write_is_journaled_with_the_workers_digest_and_the_lease_released() -> None:
    journal, released = Journal(), []
    ledger = RunLedger(journal, Recorder())  # type: ignore[arg-type]
    stored = StoredCheckpoint("e" * 64, 120, "0" * 64, 7)
    ledger.stored_checkpoint(KEY, stored, then=lambda: released.append(True))
    [(kind, data)] = journal.events
    assert kind == "written" and (data["sha256"], data["size"]) == ("e" * 64, 120)
    assert released == [True] and ledger.persistence_errors == []


def test_a_refused_write_is_journaled_as_failed_and_the_run_goes_on() -> None:
    journal, released = Journal(), []
    ledger = RunLedger(journal, Recorder())  # type: ignore[arg-type]
    why = "checkpoint written by a worker is not the bucket's: x"
    stored = StoredCheckpoint("e" * 64, 120, "0" * 64, 7, error=why)
    ledger.stored_checkpoint(KEY, stored, then=lambda: released.append(True))
    [(kind, data)] = journal.events
    assert kind == "failed" and why in data["message"]
    assert released == [True] and ledger.persistence_errors
