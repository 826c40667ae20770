"""`projections status` and `projections rebuild`: parse, call, format.

The use-cases are app/rebuild_projections.py's. Exit codes: status 0 (staleness is
reported, not an error); rebuild 0 when every view was written, 1 when any could not be;
2 for an unknown projection name or a `--run` that does not apply.
"""

from __future__ import annotations

from typing import Any

import click
from runjournal.app.rebuild_projections import projection_status, rebuild_projections
from runjournal.cli.compose import maintenance_ports
from runjournal.cli.exit_codes import ExitCode, print_error
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import resolve_cli_settings


def status(opts: dict[str, Any], *, name: str | None) -> int:
    report = projection_status(resolve_cli_settings(opts), maintenance_ports(), name=name)
    if opts.get("as_json"):
        emit_json(report.document())
        return int(ExitCode.OK)
    for row in report.projections:
        state = "stale" if row.stale else "fresh"
        found = ",".join(f"v{v}" for v in row.materialised) or "-"
        why = "; ".join(row.reasons)
        click.echo(
            f"{row.name:<14} v{row.version:<3} {row.scope:<8} {state:<6} "
            f"materialised {found:<6} {row.storage}" + (f"  ({why})" if why else "")
        )
    return int(ExitCode.OK)


def rebuild(opts: dict[str, Any], *, name: str | None, run: str | None) -> int:
    report = rebuild_projections(
        resolve_cli_settings(opts), maintenance_ports(), name=name, run=run
    )
    if opts.get("as_json"):
        emit_json(report.document())
    else:
        for r in report.projections:
            replaced = f", replaced v{r.replaced}" if r.replaced is not None else ""
            skipped = f", skipped {r.skipped}" if r.skipped else ""
            click.echo(
                f"{r.name:<14} v{r.version}: wrote {r.written}{skipped}{replaced}  {r.storage}"
            )
    for line in report.failures:
        print_error(f"not rebuilt: {line}")
    return int(ExitCode.OK if report.ok else ExitCode.FAILED)
