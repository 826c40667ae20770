"""`journal audit`, `journal export` and `journal import`: parse, call, format.

Exit codes: audit 0 clean (an unchained run too, with a warning), 1 any difference,
invariant violation, hash-chain break or run-directory mismatch (docs/operations.md
"Auditing a run"). export 0 written,
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
    export_checkpoints,
    export_events,
    export_run,
    import_checkpoints,
    import_stream,
    verify_export,
)
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.adapters.journal.chain import ChainReport, ChainStatus
from runjournal.adapters.journal.sealer import SealCheck
from runjournal.adapters.run_directory_check import (
    RunDirectoryCheck,
    RunDirectoryStatus,
)
from runjournal.app.audit_run import IntegrityProblem, chain_stripped
from runjournal.app.audit_run import audit as audit_run_use_case
from runjournal.app.queries import resolve_run as _resolve
from runjournal.cli.compose import factories, journal_for
from runjournal.cli.exit_codes import CliError, ExitCode, print_error, print_warning
from runjournal.cli.keys_cmds import export_signer, trusted_keys
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import open_cli_journal, resolve_cli_settings
from runjournal.cli.seal_cmds import seal_note
from runjournal.domain.audit import AuditReport, Difference, Problem
from runjournal.domain.events import RunAllocated

# --- shared ----------------------------------------------------------------------


def _where(d: Difference) -> str:
    chunk = f" chunk {d.chunk[:12]}" if d.chunk else ""
    return f"step '{d.step}' lane '{d.lane}' {d.stage}{chunk}"


# --- audit -----------------------------------------------------------------------


def audit(opts: dict[str, Any], *, run: str, keys: tuple[str, ...] = ()) -> int:
    trusted = trusted_keys(keys)
    store = open_cli_journal(opts, read_only=True)
    try:
        outcome = audit_run_use_case(store, run, trusted, open_root=factories().open_root)
    finally:
        store.close()
    report, chain, run_dir, seals = outcome.report, outcome.chain, outcome.run_dir, outcome.seals
    run_id, tampering, clean = outcome.run_id, outcome.tampering, outcome.clean
    if opts.get("as_json"):
        emit_json(outcome.document)
    else:
        _print_audit(report, chain, run_dir, tampering, clean, seals, outcome.allocated)
    if chain.status is ChainStatus.UNCHAINED and not chain_stripped(chain, outcome.allocated):
        print_warning(
            f"run {report.run_id or run_id} was recorded without the journal hash chain: "
            "edits to its events cannot be detected"
        )
    if clean:
        return int(ExitCode.OK)
    found = (
        f"{len(report.differences)} difference(s), {len(report.violations)} invariant violation(s)"
    )
    if tampering:
        first = tampering[0]
        found += (
            f", {len(tampering)} integrity problem(s) (first: event {first.version} {first.event})"
        )
    print_error(f"audit of run {report.run_id or run_id}: {found}")
    return int(ExitCode.FAILED)


def _chain_note(chain: ChainReport, allocated: RunAllocated | None) -> str:
    if chain.status is ChainStatus.VERIFIED:
        return "hash chain verified"
    if chain_stripped(chain, allocated):
        return "hash chain stripped"
    if chain.status is ChainStatus.UNCHAINED:
        return "unchained: recorded before the journal hash chain, edits cannot be detected"
    if chain.status is ChainStatus.BROKEN:
        return f"hash chain broken at {len(chain.breaks)} place(s)"
    return "no events"


def _print_audit(
    report: AuditReport,
    chain: ChainReport,
    run_dir: RunDirectoryCheck,
    tampering: list[IntegrityProblem],
    clean: bool,
    seals: SealCheck,
    allocated: RunAllocated | None,
) -> None:
    verdict = "ok" if clean else "different"
    checked = (
        f", run directory checked ({run_dir.files_checked} files)"
        if run_dir.status is RunDirectoryStatus.CHECKED
        else ""
    )
    click.echo(
        f"run {report.run_id}: {verdict} "
        f"({report.decisions} decisions re-decided, {report.events} events checked, "
        f"{_chain_note(chain, allocated)}, {seal_note(seals)}{checked})"
    )
    for d in report.differences:
        if d.problem is Problem.CODE:
            what = f"recorded {d.recorded.value}, re-decided {d.redecided.value}"
        else:
            what = f"{d.problem.value}: {d.detail} (recorded {d.recorded.value})"
        click.echo(f"  event {d.version}: {_where(d)}: {what}")
    for v in report.violations:
        click.echo(f"  event {v.version}: invariant: {v.event}: {v.message}")
    for p in tampering:
        where = f"event {p.version}" if p.version else "run"
        click.echo(f"  {where}: {p.check.value}: {p.event or 'run'}: {p.message}")


# --- export ----------------------------------------------------------------------


def export(opts: dict[str, Any], *, run: str, output: str, force: bool) -> int:
    path = os.path.abspath(output)
    directory, name = os.path.split(path)
    if not name:
        raise CliError(f"-o {output}: names a directory, not a file")
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = _resolve(store, run)
        try:
            data, count = export_run(
                store,
                run_id,
                tool_version=__version__,
                created_by=f"runjournal {__version__} journal export",
                signer=export_signer(),
            )
        except (JournalError, ExportError) as exc:
            raise CliError(f"cannot export run {run_id}: {exc}", ExitCode.FAILED) from None
    finally:
        store.close()
    try:
        with factories().open_root(directory) as root:
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
    try:  # verified whole first, then streamed: memory holds one batch of events
        header = verify_export(data)
        checkpoints = export_checkpoints(data)
    except NotAnExport as exc:
        raise CliError(f"{path}: {exc}") from None
    except ExportError as exc:
        raise CliError(f"{path}: refused: {exc}", ExitCode.FAILED) from None
    store = _open_target_journal(opts)
    try:
        result = import_stream(store, header, lambda: export_events(data))
        import_checkpoints(store, header.run_id, checkpoints)
    except ImportConflict as exc:
        raise CliError(f"{path}: refused: {exc}", ExitCode.FAILED) from None
    except ExportError as exc:
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
        return journal_for(config)
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
