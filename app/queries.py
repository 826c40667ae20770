"""Read-only use-cases over a journal: the runs, one run's decisions explained.

Each takes an opened journal store (cli/compose.py `journal_for`) and returns the
document the matching `--json` command prints (docs/operations.md "JSON documents").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.app.errors import RunFailedError
from runjournal.domain.events import RunEvent
from runjournal.projections.base import fold_together
from runjournal.projections.llm_batches import LLMBatchesFold
from runjournal.projections.reasons_report import ReasonReportProjection


def resolve_run(store: JournalStore, ref: str) -> str:
    """A run id, a unique prefix or `latest`, as the journal's run id."""
    try:
        return store.resolve_run(ref)
    except JournalError as exc:
        raise RunFailedError(str(exc)) from None


def stream_events(store: JournalStore, run_id: str) -> Iterator[RunEvent]:
    """The run's events one page at a time, for a fold that must not hold the run
    (docs/performance.md "Reading commands on a large run"); consume it before closing.
    A row that does not decode (e.g. an unknown type) is a RunFailedError."""
    try:
        yield from store.projected_events(run_id)
    except JournalError as exc:
        raise RunFailedError(f"cannot read run {run_id}: {exc}") from None


def run_rows(store: JournalStore) -> list[dict[str, Any]]:
    """The journal's runs, oldest first, as `runs list --json` lists them."""
    return [_run_row(r) for r in store.list_runs()]


def _run_row(summary: Any) -> dict[str, Any]:
    return {
        "run_id": summary.run_id,
        "pipeline": summary.pipeline,
        "status": summary.status,
        "started": summary.started.isoformat() if summary.started else None,
        "ended": summary.ended.isoformat() if summary.ended else None,
        "run_dir": summary.run_dir,
    }


def explain(store: JournalStore, run: str) -> dict[str, Any]:
    """RUN's decisions by step and reason code: `explain RUN --json`'s document."""
    run_id = resolve_run(store, run)
    report, batches = ReasonReportProjection(None), LLMBatchesFold()
    fold_together(stream_events(store, run_id), report, batches)
    return batches.annotate(report.view())  # a batch run: which stage, which batch
