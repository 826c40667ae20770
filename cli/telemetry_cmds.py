"""`journal otel` and `journal lineage`: parse, call app/telemetry.py, render
(docs/operations.md "Traces and lineage").

Exit codes: 0 sent; 2 no endpoint is given or set, the URL is not http(s), or the
optional extra is not installed; 1 the journal cannot be read or the endpoint did not
take what was sent.
"""

from __future__ import annotations

from typing import Any

import click
from runjournal.app.telemetry import send_lineage, send_trace, trace_url
from runjournal.cli.compose import maintenance_ports
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.llm_wiring import cassette_content
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import resolve_cli_settings


def otel(
    opts: dict[str, Any], *, run: str, endpoint: str | None, content: str | None = None
) -> int:
    from runjournal.adapters.otel_export import ENDPOINT_VARIABLES

    url = trace_url(endpoint)
    if url is None:
        raise CliError(f"no OTLP endpoint: use --endpoint URL or set {ENDPOINT_VARIABLES[1]}")
    content_of = cassette_content(content, "--content") if content is not None else None
    sent = send_trace(
        resolve_cli_settings(opts), maintenance_ports(), run=run, url=url, content=content_of
    )
    if opts.get("as_json"):
        emit_json(sent.document())
    else:
        click.echo(
            f"sent run {sent.run_id} as trace {sent.trace_id}: {sent.spans} span(s) "
            f"({sent.llm_attempts} LLM attempt(s)) to {sent.endpoint}"
        )
    return int(ExitCode.OK)


def lineage(
    opts: dict[str, Any],
    *,
    run: str,
    transport: str | None,
    path: str | None,
    url: str | None,
    namespace: str,
    force: bool,
) -> int:
    kind = transport or ("http" if url else "file" if path else "console")
    sent = send_lineage(
        resolve_cli_settings(opts),
        maintenance_ports(),
        run=run,
        transport=kind,
        path=path,
        url=url,
        namespace=namespace,
        force=force,
    )
    if opts.get("as_json"):  # the events themselves, whatever the transport
        emit_json(sent.document())
    elif kind == "console":
        for line in sent.lines:
            click.echo(line)
    else:
        click.echo(f"sent run {sent.run_id}: {len(sent.lines)} OpenLineage event(s) to {sent.to}")
    return int(ExitCode.OK)
