"""The recover use-case: `recover` (docs/operations.md "Recovery").

Runs whose process is gone are terminalized as abandoned (the attempts their LLM call log
holds journaled first, docs/operations.md "LLM call log"); leftover temp files are swept
from the roots and from the output roots the journal's runs recorded, unless a run may
still be writing. The journal is owned by one `ExitStack`; the result is a typed
`RecoverReport` (its `document()` the `recover --json` document), a failure a
`RunFailedError`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

from runjournal.adapters.fsroot import FsError
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.adapters.process_identity import is_alive
from runjournal.app.errors import RunFailedError
from runjournal.app.journals import MaintenancePorts, existing_journal, journal_exists
from runjournal.app.llm_call_log import journal_pending, logged_pending
from runjournal.app.terminal import Terminalizer
from runjournal.domain.events import RunStatus
from runjournal.domain.names import recorded_run_parent


@dataclass
class RecoverReport:
    """What recover abandoned, left alone and swept (or, with `dry_run`, would)."""

    dry_run: bool
    journal: str  # the journal's location, as the settings name it
    journal_found: bool
    abandoned: list[dict[str, Any]] = field(default_factory=list)  # run_id, pid, host, llm_*
    skipped: list[dict[str, Any]] = field(default_factory=list)  # run_id, pid, host, why
    temp_files: dict[str, list[str]] = field(default_factory=dict)  # root label -> names

    @property
    def temp_sweep(self) -> str:
        return "skipped: a run may still be writing" if self.skipped else "done"

    def document(self) -> dict[str, Any]:
        """`recover --json`."""
        return {
            "dry_run": self.dry_run,
            "journal_found": self.journal_found,
            "abandoned": self.abandoned,
            "skipped": self.skipped,
            "temp_files": self.temp_files,
            "temp_sweep": self.temp_sweep,
        }


def recover_runs(config: Any, ports: MaintenancePorts, *, dry_run: bool = False) -> RecoverReport:
    """Terminalize dead runs as abandoned; sweep leftover temp files under the roots and
    the output roots the journal's runs recorded."""
    # A run killed before its journal existed left no run to abandon, but maybe temp files.
    report = RecoverReport(dry_run, config.journal, journal_exists(config.journal))
    recorded: list[str] = []  # where the journal's runs put their run directories
    with contextlib.ExitStack() as stack:
        store = None
        if report.journal_found:
            store = stack.enter_context(existing_journal(config, ports, read_only=False))
        for summary in store.list_runs() if store is not None else ():
            recorded.append(recorded_run_parent(summary.run_id, summary.run_dir) or "")
            if summary.status is not RunStatus.RUNNING:
                continue
            alive = is_alive(summary.pid, summary.host, summary.process_start)
            row: dict[str, Any] = {
                "run_id": summary.run_id,
                "pid": summary.pid,
                "host": summary.host,
            }
            if alive is not False:
                why = "still running" if alive else "another host"
                report.skipped.append({**row, "why": why})
                continue
            row.update(_abandon(store, summary.run_id, summary.pid, summary.host, dry_run))
            report.abandoned.append(row)
    # A live writer's temp file must not vanish under it: sweep only when no run that may
    # still be writing (live here, or on another host) is in the journal.
    roots = [
        ("output", config.output_root),
        ("cache", config.cache_root),
        ("debug", config.debug_root),
    ]
    known = {os.path.realpath(path) for _, path in roots}
    for home in dict.fromkeys(filter(None, recorded)):
        if os.path.realpath(home) not in known:
            roots.append((f"output:{home}", home))  # an output root the journal recorded
    for label, path in roots if not report.skipped else ():
        if os.path.isdir(path):
            try:
                with ports.open_root(path) as root:
                    report.temp_files[label] = root.sweep_temp_files(dry_run=dry_run)
            except FsError as exc:
                raise RunFailedError(f"cannot sweep {label} root: {exc}") from None
    return report


def _abandon(
    store: JournalStore, run_id: str, pid: int, host: str, dry_run: bool
) -> dict[str, int]:
    """Journal the attempts the run's LLM call log holds and its journal lacks, then
    terminalize it as abandoned (docs/operations.md "LLM call log"); what was accounted."""
    try:
        pending, log = logged_pending(store, run_id)
        accounted = {
            "llm_attempts": len(pending),
            "llm_in_doubt": sum(1 for p in pending if p.attempt.status.value == "in_doubt"),
        }
        if dry_run:
            return accounted
        run = store.load_run(run_id)
        session = store.session(run)
        if pending:
            journal_pending(session, pending)
        terminal = Terminalizer(session=session, run_id=run_id)
        terminal.abandon(f"process {pid} on {host} ended without terminalizing")
        session.flush()
    except JournalError as exc:
        raise RunFailedError(f"cannot abandon {run_id}: {exc}") from None
    if log is not None:
        from runjournal.adapters.llm.calllog import remove_log

        with contextlib.suppress(OSError):
            remove_log(log)
    return accounted
