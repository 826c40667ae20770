"""`journal audit`, `journal export` and `journal import`: parse, call, format.

The use-cases are app/audit_run.py's and app/export_import.py's.

Exit codes: audit 0 clean (an unchained run too, with a warning), 1 any difference,
invariant violation, hash-chain break or run-directory mismatch (docs/operations.md
"Auditing a run"). export 0 written,
2 the file exists (without --force) or its directory is missing, 1 the journal or the
write failed. import 0 imported or already imported, 2 the file is missing or not a
runjournal export, 1 verification failed or the journal holds other events of the run.
"""

from __future__ import annotations

from typing import Any

import click
from runjournal.adapters.journal.chain import ChainReport, ChainStatus
from runjournal.adapters.journal.sealer import SealCheck
from runjournal.adapters.run_directory_check import (
    RunDirectoryCheck,
    RunDirectoryStatus,
)
from runjournal.app.audit_run import IntegrityProblem, chain_stripped
from runjournal.app.audit_run import audit as audit_run_use_case
from runjournal.app.export_import import export_run_file, import_run_file
from runjournal.cli.compose import factories, maintenance_ports
from runjournal.cli.exit_codes import ExitCode, print_error, print_warning
from runjournal.cli.keys_cmds import trusted_keys
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
    with open_cli_journal(opts, read_only=True) as store:
        outcome = audit_run_use_case(store, run, trusted, open_root=factories().open_root)
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
    result = export_run_file(
        resolve_cli_settings(opts), maintenance_ports(), run=run, output=output, force=force
    )
    if opts.get("as_json"):
        emit_json(result.document())
    else:
        click.echo(
            f"exported run {result.run_id}: {result.events} events to {result.file} "
            f"({result.bytes} bytes)"
        )
    return int(ExitCode.OK)


# --- import ----------------------------------------------------------------------


def import_(opts: dict[str, Any], *, file: str) -> int:
    result = import_run_file(resolve_cli_settings(opts), maintenance_ports(), file=file)
    if opts.get("as_json"):
        emit_json(result.document())
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
