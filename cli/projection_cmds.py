"""`projections status` and `projections rebuild`: parse, call, format.

Exit codes: status 0 (staleness is reported, not an error); rebuild 0 when every view
was written, 1 when any could not be; 2 for an unknown projection name or a `--run`
that does not apply.
"""

from __future__ import annotations

from typing import Any

import click
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.adapters.projection_store import ProjectionStore, UnknownProjection
from runjournal.cli.compose import projection_store
from runjournal.cli.exit_codes import CliError, ExitCode, print_error
from runjournal.cli.output import emit_json, json_bytes, json_bytes_streamed
from runjournal.cli.query_cmds import open_cli_journal, resolve_cli_settings


def _projection_store(opts: dict[str, Any]) -> tuple[JournalStore, ProjectionStore]:
    config = resolve_cli_settings(opts)
    store = open_cli_journal(opts, read_only=True)
    return store, projection_store(store, config, json_bytes, json_bytes_streamed)


def status(opts: dict[str, Any], *, name: str | None) -> int:
    store, projections = _projection_store(opts)
    try:
        rows = projections.status(name)
    except UnknownProjection as exc:
        raise CliError(str(exc)) from None
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
    finally:
        store.close()
    if opts.get("as_json"):
        emit_json({"projections": rows})
        return int(ExitCode.OK)
    for row in rows:
        state = "stale" if row.stale else "fresh"
        found = ",".join(f"v{v}" for v in row.materialised) or "-"
        why = "; ".join(row.reasons)
        click.echo(
            f"{row.name:<14} v{row.version:<3} {row.scope:<8} {state:<6} "
            f"materialised {found:<6} {row.storage}" + (f"  ({why})" if why else "")
        )
    return int(ExitCode.OK)


def rebuild(opts: dict[str, Any], *, name: str | None, run: str | None) -> int:
    store, projections = _projection_store(opts)
    try:
        run_id = None
        if run is not None:
            try:
                run_id = store.resolve_run(run)
            except JournalError as exc:
                raise CliError(str(exc), ExitCode.FAILED) from None
        try:
            results = projections.rebuild(name, run_id)
        except UnknownProjection as exc:
            raise CliError(str(exc)) from None
        except JournalError as exc:
            raise CliError(str(exc), ExitCode.FAILED) from None
    finally:
        store.close()
    failures = [line for r in results for line in r.failures]
    if opts.get("as_json"):
        emit_json({"run_id": run_id, "projections": results})
    else:
        for r in results:
            replaced = f", replaced v{r.replaced}" if r.replaced is not None else ""
            skipped = f", skipped {r.skipped}" if r.skipped else ""
            click.echo(
                f"{r.name:<14} v{r.version}: wrote {r.written}{skipped}{replaced}  {r.storage}"
            )
    for line in failures:
        print_error(f"not rebuilt: {line}")
    return int(ExitCode.FAILED if failures else ExitCode.OK)
