"""`runjournal report RUN [-o FILE]` and `run --report`: the HTML run report.

The page is a projection of the journal: the run's events read back, folded by
`HtmlReportProjection`, drawn by `render_report_html` (docs/operations.md "The HTML run
report"). Exit codes of `report`: 0 written; 2 the file exists (without --force), its
directory is missing, or the run has no run directory here and no `-o` was given;
1 the journal cannot be read or the file cannot be written.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from typing import Any

import click
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound, FsRoot
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.cli.compose import factories, run_dirs
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import open_cli_journal
from runjournal.domain.events import RunStatus
from runjournal.domain.redaction import safe_error_text
from runjournal.projections.base import fold
from runjournal.projections.html_report import REPORT_HTML, HtmlReportProjection

__all__ = ["REPORT_HTML", "report", "report_html", "write_run_report"]


def report_html(
    store: JournalStore, run_id: str, *, refresh: int | None = None
) -> tuple[bytes, dict[str, Any]]:
    """The page of one run, from its events in the journal, and the view it drew.

    `refresh` (seconds): the page reloads itself that often, for `report --watch` while
    the run goes; a run that has ended gets the page `report` writes, whatever `refresh`.
    """
    from runjournal.projections.html_render import render_report_html  # heavy: on use only

    view = fold(HtmlReportProjection(), store.projected_events(run_id)).view()
    running = view["run"]["status"] == RunStatus.RUNNING.value
    page = render_report_html(view, refresh=refresh if running else None)
    return page.encode("utf-8"), view


def report(
    opts: dict[str, Any],
    *,
    run: str,
    output: str | None,
    force: bool,
    watch: bool = False,
    interval: float = 2.0,
) -> int:
    if output == "-" and opts.get("as_json"):
        raise CliError("-o - prints the page on stdout: it cannot be combined with --json")
    if watch and output == "-":
        raise CliError("--watch rewrites a file: it cannot be combined with -o -")
    if watch and not 0.1 <= interval <= 3600:
        raise CliError(f"--interval {interval:g}: between 0.1 and 3600 seconds")
    refresh = max(1, math.ceil(interval)) if watch else None
    if output == "-":
        data, _, _ = _page(opts, run, None)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return int(ExitCode.OK)
    # The run id, remembered before its first page is written ("latest" is resolved once:
    # another run may start), so a Ctrl-C once the page is there names the run.
    resolved: str | None = None
    wrote = False  # --watch replaces its own page after the first write
    try:
        while True:
            data, view, run_id = _page(opts, resolved or run, refresh)
            resolved = run_id
            if output is None:
                path = _into_run_dir(run_id, view["run"]["roots"]["run_dir"], data)
            else:
                path = _into_file(output, data, force=force or wrote)
            wrote = True
            if not watch or view["run"]["status"] != RunStatus.RUNNING.value:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        if not watch:
            raise
        what = f"run {resolved}" if resolved else run
        raise CliError(
            f"stopped watching {what} (the page shows it as it was)", ExitCode.INTERRUPTED
        ) from None
    doc = {
        "run_id": run_id,
        "status": view["run"]["status"],
        "file": path,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if opts.get("as_json"):
        emit_json(doc)
    else:
        click.echo(f"report of run {run_id} ({doc['status']}): {path} ({len(data)} bytes)")
    return int(ExitCode.OK)


def _page(opts: dict[str, Any], run: str, refresh: int | None) -> tuple[bytes, Any, str]:
    """The page of RUN as the journal holds it now (opened, read and closed each time)."""
    store = open_cli_journal(opts, read_only=True)
    try:
        try:
            run_id = store.resolve_run(run)
            data, view = report_html(store, run_id, refresh=refresh)
        except JournalError as exc:
            raise CliError(str(exc), ExitCode.FAILED) from None
    finally:
        store.close()
    return data, view, run_id


def _into_run_dir(run_id: str, run_dir: str | None, data: bytes) -> str:
    """`<run dir>/report.html`, replaced atomically: it is a view, like manifest.json.

    The run directory is where the journal recorded it (docs/operations.md "Where a run
    lives"), reached through its parent without following a symlink.
    """
    with run_dirs() as dirs:
        parent = dirs.holding(run_id, run_dir) if run_dir else None
        if parent is None:
            raise CliError(f"run {run_id} has no run directory here ({run_dir}); use -o FILE")
        try:
            parent.write_bytes(f"{run_id}/{REPORT_HTML}", data, overwrite=True)
        except FsError as exc:
            raise CliError(
                f"cannot write {run_dir}/{REPORT_HTML}: {exc}", ExitCode.FAILED
            ) from None
    return os.path.join(str(run_dir), REPORT_HTML)


def _into_file(output: str, data: bytes, *, force: bool) -> str:
    path = os.path.abspath(output)
    directory, name = os.path.split(path)
    if not name or os.path.isdir(path):
        raise CliError(f"-o {output}: names a directory, not a file")
    try:
        with factories().open_root(directory) as root:
            root.write_bytes(name, data, overwrite=force)
    except AlreadyExists:
        raise CliError(f"{path} exists (use --force to replace it)") from None
    except FsNotFound:
        raise CliError(f"{directory}: no such directory") from None
    except FsError as exc:
        raise CliError(f"cannot write {path}: {exc}", ExitCode.FAILED) from None
    return path


def write_run_report(
    store: JournalStore, session: Any, run_id: str, run_dir: str, output_root: FsRoot
) -> tuple[str | None, list[str]]:
    """`run --report`: write `report.html` into the run directory, once every event of
    the run is in the journal, so the page equals what `report RUN` builds later.

    Returns the path (None when not written) and one line per failure; a failure is
    journaled as `TerminalPersistenceFailed` (target `report_html`) and never replaces
    the run's primary error. The run directory is reached through `output_root`, the
    invocation's one handle on the output root (cli/compose.py).
    """
    try:
        data, _ = report_html(store, run_id)
        with output_root.subroot(run_id) as root:
            root.write_bytes(REPORT_HTML, data, overwrite=False)
        return os.path.join(run_dir, REPORT_HTML), []
    except (FsError, JournalError) as exc:
        line = safe_error_text(f"could not write report_html: {exc}")
    lines = [line]
    try:
        session.persistence_failed("report_html", line)
        session.flush()
    except Exception as exc:  # the journal itself failed: say so, keep the primary error
        lines.append(safe_error_text(f"journal: {exc}"))
    return None, lines
