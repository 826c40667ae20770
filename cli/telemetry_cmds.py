"""`journal otel` and `journal lineage`: a run's journal as OpenTelemetry traces and
OpenLineage run events (docs/operations.md "Traces and lineage").

Exit codes: 0 sent; 2 no endpoint is given or set, the URL is not http(s), or the
optional extra is not installed; 1 the journal cannot be read or the endpoint did not
take what was sent.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import click
from runjournal import __version__
from runjournal.adapters.journal import JournalError
from runjournal.app.queries import resolve_run as _resolve
from runjournal.cli.exit_codes import CliError, ExitCode, print_warning
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import open_cli_journal
from runjournal.domain.redaction import redact_url, safe_error_text
from runjournal.projections.otel_trace import trace_of


def check_http_url(url: str, what: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"{what} {redact_url(url)}: not an http(s) URL")


def load_content(path: str, what: str) -> Any:
    """The prompts and replies of a cassette, as the trace's content attributes."""
    import os

    from runjournal.adapters.llm.cassette import Cassette, CassetteError
    from runjournal.adapters.otel_export import cassette_content

    try:
        cassette = Cassette.load(os.path.abspath(path), missing_ok=False)
    except CassetteError as exc:
        raise CliError(f"{what}: {exc}") from None
    return cassette_content(cassette)


def otel(
    opts: dict[str, Any], *, run: str, endpoint: str | None, content: str | None = None
) -> int:
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
    check_http_url(url, "--endpoint")
    content_of = load_content(content, "--content") if content is not None else None
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = _resolve(store, run)
        try:
            trace = trace_of(store.events(run_id), content_of)
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


def send_run_trace(
    config: Any, run_id: str, endpoint: str | None, *, quiet: bool, content: str | None = None
) -> None:
    """`run --otel-endpoint` (or an OTLP endpoint in the environment): send the run's
    trace once it has ended. A failure is a warning: the run's outcome and exit code
    stay what they are."""
    from runjournal.adapters.otel_export import (
        OtelExportFailed,
        OtelUnavailable,
        export_trace,
        traces_url,
    )
    from runjournal.cli.compose import journal_for

    url = traces_url(endpoint)
    if url is None:
        return
    try:
        check_http_url(url, "OTLP endpoint")
        content_of = load_content(content, "--otel-content") if content is not None else None
        store = journal_for(config, read_only=True)
        try:
            trace = trace_of(store.events(run_id), content_of)
        finally:
            store.close()
        if trace is None:
            return
        count = export_trace(trace, url, tool_version=__version__)
    except CliError as exc:
        print_warning(f"trace of run {run_id} not sent: {exc.message}")
        return
    except (JournalError, OtelUnavailable, OtelExportFailed) as exc:
        print_warning(f"trace of run {run_id} not sent: {redact_url(str(exc))}")
        return
    if not quiet:
        click.echo(
            f"sent the trace of run {run_id}: {count} span(s) to {redact_url(url)}", err=True
        )


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
    from runjournal.adapters.lineage_emit import (
        LineageSendFailed,
        LineageUnavailable,
        http_sender,
        run_events,
        to_json_lines,
    )
    from runjournal.projections.lineage import lineage_of

    kind = transport or ("http" if url else "file" if path else "console")
    if kind == "file" and not path:
        raise CliError("--transport file needs --path FILE")
    if kind == "http":
        if not url:
            raise CliError("--transport http needs --url URL")
        check_http_url(url, "--url")
    if (path and kind != "file") or (url and kind != "http"):
        raise CliError(f"--path goes with --transport file and --url with http, not {kind}")
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = _resolve(store, run)
        try:
            records = lineage_of(store.events(run_id))
        except JournalError as exc:
            raise CliError(f"cannot read run {run_id}: {exc}", ExitCode.FAILED) from None
    finally:
        store.close()
    if not records:
        raise CliError(f"run {run_id} has no RunAllocated event", ExitCode.FAILED)
    try:
        events = run_events(records, tool_version=__version__, namespace=namespace)
        lines = to_json_lines(events)
        if kind == "console":
            where = "stdout"
            if not opts.get("as_json"):
                for line in lines:
                    click.echo(line)
                return int(ExitCode.OK)
        elif kind == "file":
            assert path is not None
            data = "".join(line + "\n" for line in lines).encode()
            where = _write_file(path, data, force=force)
        else:
            assert url is not None
            send = http_sender(url)
            for event in events:
                send(event)
            where = redact_url(url)
    except LineageUnavailable as exc:
        raise CliError(str(exc)) from None
    except LineageSendFailed as exc:
        raise CliError(safe_error_text(redact_url(str(exc))), ExitCode.FAILED) from None
    states = [r.event_type for r in records if r.parent is None]
    if opts.get("as_json"):  # the events themselves, whatever the transport
        emit_json(
            {
                "run_id": run_id,
                "run_states": states,
                "to": where,
                "events": [json.loads(line) for line in lines],
            }
        )
    else:
        click.echo(f"sent run {run_id}: {len(records)} OpenLineage event(s) to {where}")
    return int(ExitCode.OK)


def _write_file(output: str, data: bytes, *, force: bool) -> str:
    import os

    from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound
    from runjournal.cli.compose import factories

    path = os.path.abspath(output)
    directory, name = os.path.split(path)
    if not name or os.path.isdir(path):
        raise CliError(f"--path {output}: names a directory, not a file")
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
