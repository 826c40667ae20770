"""Attempts that did not answer, by cause, and the waits they cost (for views of a run).

An LLM call's failed attempts are its retries' causes: each `LLMCallAttempted` that is
not `ok` is counted under its status with the wait that followed it (`wait_ms`: the
backoff or the server's `Retry-After`). The report and `explain` show these next to the
calls and attempts, so "4,648 calls" can no longer stand for attempts (docs/operations.md
"LLM usage: spent and saved").
"""

from __future__ import annotations

from typing import Any

from runjournal.domain.events import LLMCallAttempted
from runjournal.domain.llm import AttemptStatus


class RetryFold:
    def __init__(self) -> None:
        self.by_status: dict[str, list[float]] = {}  # status -> [attempts, wait ms]

    def apply(self, event: LLMCallAttempted) -> None:
        if event.status is AttemptStatus.OK:
            return
        row = self.by_status.setdefault(event.status.value, [0, 0.0])
        row[0] += 1
        row[1] += event.wait_ms

    def view(self) -> dict[str, dict[str, Any]]:
        """`{status: {"attempts": n, "wait_s": seconds}}`, in status order."""
        return {
            status: {"attempts": int(row[0]), "wait_s": round(row[1] / 1000, 3)}
            for status, row in sorted(self.by_status.items())
        }


def retries_text(retries: dict[str, dict[str, Any]]) -> str:
    """`rate_limited 3 (waited 3 s), server_error 1 (waited 0.21 s)`, or ``."""
    return ", ".join(
        f"{status} {row['attempts']} (waited {row['wait_s']:.3g} s)"
        for status, row in retries.items()
    )
