"""The export and import use-cases: `journal export` and `journal import`
(docs/internals.md "Export and import (`adapters/export.py`)").

An export is one run's events as a hash-chained file, with a signed checkpoint when the
user has a key (adapters/export.py); an import verifies a whole file first, then streams
its events into the target journal (created when it is a SQLite file that does not exist
yet). The journal is owned by one `ExitStack`; results are typed (`ExportResult`,
`ImportResult`, each with the `--json` document); a file that exists (without `force`),
is missing or is not an export is a `UsageError`, a failed verification, journal or write
a `RunFailedError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from typing import Any

from runjournal import __version__
from runjournal.adapters.export import (
    ExportError,
    ImportConflict,
    NotAnExport,
    export_checkpoints,
    export_events,
    export_run,
    import_checkpoints,
    import_stream,
    verify_export,
)
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.app.errors import RunFailedError, UsageError
from runjournal.app.journals import MaintenancePorts, existing_journal
from runjournal.app.output_files import write_output_file
from runjournal.app.queries import resolve_run


@dataclass(frozen=True)
class ExportResult:
    """One run written to an export file."""

    run_id: str
    events: int
    file: str  # absolute
    bytes: int
    sha256: str

    def document(self) -> dict[str, Any]:
        """`journal export --json`."""
        return {
            "run_id": self.run_id,
            "events": self.events,
            "file": self.file,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class ImportResult:
    """One export file read into the journal (or found there already)."""

    run_id: str
    events: int
    already_imported: bool
    resumed_after: int  # events an earlier, interrupted import of the file had written
    file: str  # absolute

    @property
    def status(self) -> str:
        return "already_imported" if self.already_imported else "imported"

    def document(self) -> dict[str, Any]:
        """`journal import --json`."""
        return {
            "run_id": self.run_id,
            "events": self.events,
            "status": self.status,
            "resumed_after": self.resumed_after,
            "file": self.file,
        }


def export_run_file(
    config: Any, ports: MaintenancePorts, *, run: str, output: str, force: bool = False
) -> ExportResult:
    """Write RUN (an id, a unique prefix or `latest`) to the file `output`."""
    path = os.path.abspath(output)
    if not os.path.basename(path):
        raise UsageError(f"-o {output}: names a directory, not a file")
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(existing_journal(config, ports, read_only=True))
        run_id = resolve_run(store, run)
        try:
            data, count = export_run(
                store,
                run_id,
                tool_version=__version__,
                created_by=f"runjournal {__version__} journal export",
                signer=ports.export_signer(),
            )
        except (JournalError, ExportError) as exc:
            raise RunFailedError(f"cannot export run {run_id}: {exc}") from None
    write_output_file(ports, path, data, force=force)
    return ExportResult(run_id, count, path, len(data), hashlib.sha256(data).hexdigest())


def import_run_file(config: Any, ports: MaintenancePorts, *, file: str) -> ImportResult:
    """Verify the export `file` whole, then read its run into the journal `config` names."""
    path = os.path.abspath(file)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:  # verified whole first, then streamed: memory holds one batch of events
        header = verify_export(data)
        checkpoints = export_checkpoints(data)
    except NotAnExport as exc:
        raise UsageError(f"{path}: {exc}") from None
    except ExportError as exc:
        raise RunFailedError(f"{path}: refused: {exc}") from None
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(_target_journal(config, ports))
        try:
            result = import_stream(store, header, lambda: export_events(data))
            import_checkpoints(store, header.run_id, checkpoints)
        except (ImportConflict, ExportError) as exc:
            raise RunFailedError(f"{path}: refused: {exc}") from None
        except JournalError as exc:
            raise RunFailedError(f"{path}: cannot import: {exc}") from None
    return ImportResult(
        result.run_id, result.events, result.already_imported, result.resumed_after, path
    )


def _target_journal(config: Any, ports: MaintenancePorts) -> JournalStore:
    """Like other commands, but a SQLite journal that does not exist yet is created."""
    try:
        return ports.journal_for(config)
    except JournalError as exc:
        raise RunFailedError(str(exc)) from None
