"""`journal otel` and `journal lineage`: a run's journal as OpenTelemetry traces and
OpenLineage run events (docs/operations.md "Traces and lineage").

Exit codes: 0 sent; 2 no endpoint is given or set, the URL is not http(s), or the
optional extra is not installed; 1 the journal cannot be read or the endpoint did not
take what was sent.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import click
from runjournal import __version__
from runjournal.adapters.journal import JournalError
from runjournal.app.queries import resolve_run as _resolve
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import open_cli_journal
from runjournal.domain.redaction import redact_url, safe_error_text
from runjournal.projections.otel_trace import trace_of


def _http_url(url: str, what: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"{what} {redact_url(url)}: not an http(s) URL")


def otel(opts: dict[str, Any], *, run: str, endpoint: str | None) -> int:
    from runjournal.adapters.otel_export import (
        ENDPOINT_VARIABLES,
        OtelExportFailed,
        OtelUnavailable,
        export_trace,
        traces_url,
    )

    url = traces_url(endpoint)
    if url is None:
        raise CliError(f"no OTLP endpoint: use --endpoint URL or set {ENDPOINT_VARIABLES[1]}")
    _http_url(url, "--endpoint")
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = _resolve(store, run)
        try:
            trace = trace_of(store.events(run_id))
        except JournalError as exc:
            raise CliError(f"cannot read run {run_id}: {exc}", ExitCode.FAILED) from None
    finally:
        store.close()
    if trace is None:
        raise CliError(f"run {run_id} has no RunAllocated event", ExitCode.FAILED)
    try:
        count = export_trace(trace, url, tool_version=__version__)
    except OtelUnavailable as exc:
        raise CliError(str(exc)) from None
    except OtelExportFailed as exc:
        raise CliError(safe_error_text(redact_url(str(exc))), ExitCode.FAILED) from None
    attempts = sum(1 for span in trace.spans if span.name.startswith("chat "))
    doc = {
        "run_id": run_id,
        "trace_id": trace.trace_id.hex(),
        "spans": count,
        "llm_attempts": attempts,
        "endpoint": redact_url(url),
    }
    if opts.get("as_json"):
        emit_json(doc)
    else:
        click.echo(
            f"sent run {run_id} as trace {doc['trace_id']}: {count} span(s) "
            f"({attempts} LLM attempt(s)) to {doc['endpoint']}"
        )
    return int(ExitCode.OK)
