"""`journal audit`, `journal export` and `journal import`: parse, call, format.

Exit codes: audit 0 clean, 1 any difference or invariant violation. export 0 written,
2 the file exists (without --force) or its directory is missing, 1 the journal or the
write failed. import 0 imported or already imported, 2 the file is missing or not a
runjournal export, 1 verification failed or the journal holds other events of the run.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import click
from runjournal import __version__
from runjournal.adapters.export import (
    ExportError,
    ImportConflict,
    NotAnExport,
    decode_export,
    export_run,
    import_run,
)
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound, FsRoot
from runjournal.adapters.journal import JournalError, JournalStore, open_journal
from runjournal.cli.errors import CliError, ExitCode, print_error
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import open_cli_journal, resolve_cli_settings
from runjournal.domain.audit import AuditReport, Difference, Problem, audit_run

# --- shared ----------------------------------------------------------------------


def _resolve(store: JournalStore, ref: str) -> str:
    try:
        return store.resolve_run(ref)
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None


def _where(d: Difference) -> str:
    chunk = f" chunk {d.chunk[:12]}" if d.chunk else ""
    return f"step '{d.step}' lane '{d.lane}' {d.stage}{chunk}"


# --- audit -----------------------------------------------------------------------


def audit(opts: dict[str, Any], *, run: str) -> int:
    store = open_cli_journal(opts)
    try:
        run_id = _resolve(store, run)
        try:
            report = audit_run(store.events(run_id))
        except JournalError as exc:
            raise CliError(f"cannot replay run {run_id}: {exc}", ExitCode.FAILED) from None
    finally:
        store.close()
    if opts.get("as_json"):
        emit_json(_audit_doc(report))
    else:
        _print_audit(report)
    if report.ok:
        return int(ExitCode.OK)
    print_error(
        f"audit of run {report.run_id}: {len(report.differences)} difference(s), "
        f"{len(report.violations)} invariant violation(s)"
    )
    return int(ExitCode.FAILED)


def _audit_doc(report: AuditReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "verdict": report.verdict.value,
        "events": report.events,
        "decisions": report.decisions,
        "differences": [
            {
                "version": d.version,
                "step": d.step,
                "lane": d.lane,
                "stage": d.stage,
                "chunk": d.chunk or None,
                "recorded": d.recorded.value,
                "redecided": d.redecided.value,
                "problem": d.problem.value,
                "detail": d.detail,
            }
            for d in report.differences
        ],
        "violations": [
            {"version": v.version, "event": v.event, "message": v.message}
            for v in report.violations
        ],
    }


def _print_audit(report: AuditReport) -> None:
    click.echo(
        f"run {report.run_id}: {report.verdict.value} "
        f"({report.decisions} decisions re-decided, {report.events} events checked)"
    )
    for d in report.differences:
        if d.problem is Problem.CODE:
            what = f"recorded {d.recorded.value}, re-decided {d.redecided.value}"
        else:
            what = f"{d.problem.value}: {d.detail} (recorded {d.recorded.value})"
        click.echo(f"  event {d.version}: {_where(d)}: {what}")
    for v in report.violations:
        click.echo(f"  event {v.version}: invariant: {v.event}: {v.message}")


# --- export ----------------------------------------------------------------------


def export(opts: dict[str, Any], *, run: str, output: str, force: bool) -> int:
    path = os.path.abspath(output)
    directory, name = os.path.split(path)
    if not name:
        raise CliError(f"-o {output}: names a directory, not a file")
    store = open_cli_journal(opts)
    try:
        run_id = _resolve(store, run)
        try:
            data, count = export_run(
                store,
                run_id,
                tool_version=__version__,
                created_by=f"runjournal {__version__} journal export",
            )
        except (JournalError, ExportError) as exc:
            raise CliError(f"cannot export run {run_id}: {exc}", ExitCode.FAILED) from None
    finally:
        store.close()
    try:
        with FsRoot.open(directory) as root:
            root.write_bytes(name, data, overwrite=force)
    except AlreadyExists:
        raise CliError(f"{path} exists (use --force to replace it)") from None
    except FsNotFound:
        raise CliError(f"{directory}: no such directory") from None
    except FsError as exc:
        raise CliError(f"cannot write {path}: {exc}", ExitCode.FAILED) from None
    doc = {
        "run_id": run_id,
        "events": count,
        "file": path,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if opts.get("as_json"):
        emit_json(doc)
    else:
        click.echo(f"exported run {run_id}: {count} events to {path} ({len(data)} bytes)")
    return int(ExitCode.OK)


# --- import ----------------------------------------------------------------------


def import_(opts: dict[str, Any], *, file: str) -> int:
    path = os.path.abspath(file)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        export = decode_export(data)
    except NotAnExport as exc:
        raise CliError(f"{path}: {exc}") from None
    except ExportError as exc:
        raise CliError(f"{path}: refused: {exc}", ExitCode.FAILED) from None
    store = _open_target_journal(opts)
    try:
        result = import_run(store, export)
    except ImportConflict as exc:
        raise CliError(f"{path}: refused: {exc}", ExitCode.FAILED) from None
    except JournalError as exc:
        raise CliError(f"{path}: cannot import: {exc}", ExitCode.FAILED) from None
    finally:
        store.close()
    status = "already_imported" if result.already_imported else "imported"
    if opts.get("as_json"):
        emit_json(
            {
                "run_id": result.run_id,
                "events": result.events,
                "status": status,
                "resumed_after": result.resumed_after,
                "file": path,
            }
        )
    elif result.already_imported:
        click.echo(f"run {result.run_id} already imported ({result.events} events)")
    else:
        resumed = (
            f" (completing an earlier import of {result.resumed_after})"
            if result.resumed_after
            else ""
        )
        click.echo(f"imported run {result.run_id}: {result.events} events{resumed}")
    return int(ExitCode.OK)


def _open_target_journal(opts: dict[str, Any]) -> JournalStore:
    """Like other commands, but a SQLite journal that does not exist yet is created."""
    config = resolve_cli_settings(opts)
    try:
        return open_journal(config.journal)
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
