"""The telemetry use-cases: a run's journal sent as an OpenTelemetry trace or as
OpenLineage run events (docs/operations.md "Traces and lineage").

Each reads the run's events from the journal the settings name (closed when done),
folds them with the pure projections (`projections/otel_trace.py`,
`projections/lineage.py`) and hands the result to its adapter. They return what was
sent (`TraceSent`, `LineageSent`) or raise a typed error: `UsageError` for what the
caller can fix (no endpoint, not an http(s) URL, the optional extra missing, a bad
cassette or path), `RunFailedError` when the journal cannot be read or the receiver
refused what was sent.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from runjournal import __version__
from runjournal.app.errors import RunFailedError, UsageError
from runjournal.app.journals import MaintenancePorts, existing_journal
from runjournal.app.output_files import write_output_file
from runjournal.app.queries import resolve_run, stream_events
from runjournal.domain.redaction import redact_url, safe_error_text


@dataclass(frozen=True)
class TraceSent:
    """A run's trace, sent: `journal otel --json`."""

    run_id: str
    trace_id: str
    spans: int
    llm_attempts: int
    endpoint: str  # redacted

    def document(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "trace_id": self.trace_id,
            "spans": self.spans,
            "llm_attempts": self.llm_attempts,
            "endpoint": self.endpoint,
        }


@dataclass(frozen=True)
class LineageSent:
    """A run's OpenLineage events, sent: `journal lineage --json`."""

    run_id: str
    run_states: list[str]  # the run's own event types, in order
    to: str  # stdout, the file written or the redacted URL
    lines: list[str]  # every event as one JSON line, whatever the transport

    def document(self) -> dict[str, Any]:
        import json

        return {
            "run_id": self.run_id,
            "run_states": self.run_states,
            "to": self.to,
            "events": [json.loads(line) for line in self.lines],
        }


def check_http_url(url: str, what: str) -> None:
    """Refuse anything but an http(s) URL with a host (the URL shown redacted)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{what} {redact_url(url)}: not an http(s) URL")


def trace_url(endpoint: str | None) -> str | None:
    """The traces URL from `endpoint`, else from the OTLP environment variables."""
    from runjournal.adapters.otel_export import traces_url

    return traces_url(endpoint)


def send_trace(
    config: Any,
    ports: MaintenancePorts,
    *,
    run: str,
    url: str,
    content: Any = None,
    url_name: str = "--endpoint",
) -> TraceSent:
    """Send run `run`'s trace to the OTLP/HTTP traces `url` (a `trace_url`); `url_name`
    is how an unusable URL is named in the error."""
    from runjournal.adapters.otel_export import OtelExportFailed, OtelUnavailable, export_trace
    from runjournal.projections.otel_trace import trace_of

    check_http_url(url, url_name)
    with contextlib.closing(existing_journal(config, ports, read_only=True)) as store:
        run_id = resolve_run(store, run)
        trace = trace_of(stream_events(store, run_id), content)
    if trace is None:
        raise RunFailedError(f"run {run_id} has no RunAllocated event", run_id=run_id)
    try:
        count = export_trace(trace, url, tool_version=__version__)
    except OtelUnavailable as exc:
        raise UsageError(str(exc)) from None
    except OtelExportFailed as exc:
        raise RunFailedError(safe_error_text(redact_url(str(exc))), run_id=run_id) from None
    attempts = sum(1 for span in trace.spans if span.name.startswith("chat "))
    return TraceSent(run_id, trace.trace_id.hex(), count, attempts, redact_url(url))


def send_lineage(
    config: Any,
    ports: MaintenancePorts,
    *,
    run: str,
    transport: str,
    path: str | None = None,
    url: str | None = None,
    namespace: str,
    force: bool = False,
) -> LineageSent:
    """Run `run`'s OpenLineage events: to stdout (`console`: the caller prints `lines`),
    a new file (`file`, `path`; replaced only with `force`) or an HTTP receiver (`http`)."""
    from runjournal.adapters.lineage_emit import (
        LineageSendFailed,
        LineageUnavailable,
        http_sender,
        run_events,
        to_json_lines,
    )
    from runjournal.projections.lineage import lineage_of

    if transport == "file" and not path:
        raise UsageError("--transport file needs --path FILE")
    if transport == "http":
        if not url:
            raise UsageError("--transport http needs --url URL")
        check_http_url(url, "--url")
    if (path and transport != "file") or (url and transport != "http"):
        raise UsageError(f"--path goes with --transport file and --url with http, not {transport}")
    with contextlib.closing(existing_journal(config, ports, read_only=True)) as store:
        run_id = resolve_run(store, run)
        records = lineage_of(stream_events(store, run_id))
    if not records:
        raise RunFailedError(f"run {run_id} has no RunAllocated event", run_id=run_id)
    try:
        events = run_events(records, tool_version=__version__, namespace=namespace)
        lines = to_json_lines(events)
        if transport == "file":
            assert path is not None
            data = "".join(line + "\n" for line in lines).encode()
            to = _write_file(ports, path, data, force=force)
        elif transport == "http":
            assert url is not None
            send = http_sender(url)
            for event in events:
                send(event)
            to = redact_url(url)
        else:
            to = "stdout"
    except LineageUnavailable as exc:
        raise UsageError(str(exc)) from None
    except LineageSendFailed as exc:
        raise RunFailedError(safe_error_text(redact_url(str(exc))), run_id=run_id) from None
    states = [r.event_type for r in records if r.parent is None]
    return LineageSent(run_id, states, to, lines)


def _write_file(ports: MaintenancePorts, output: str, data: bytes, *, force: bool) -> str:
    """Write the events file through the confined root of its directory."""
    path = os.path.abspath(output)
    if not os.path.basename(path) or os.path.isdir(path):
        raise UsageError(f"--path {output}: names a directory, not a file")
    write_output_file(ports, path, data, force=force)
    return path


class TraceStream:
    """A run's trace sent while the run goes (`run --otel-endpoint`).

    `listen` is one of the run session's listeners: it folds each event as it is recorded
    (`projections/otel_trace.py` `TraceFold`), under a lock, and nothing else. A thread
    sends the spans that became final (LLM attempts, stages that were reused or ran) every
    `interval` seconds; `close()`, once the run has ended, sends the rest (stages that never
    ran, lanes, steps, the run). What is sent in all is exactly what `journal otel` sends
    of the run afterwards, in other batches. A send that fails stops the stream: `close()`
    raises it as a `RunFailedError` (the caller warns; the run's outcome stays).
    """

    def __init__(
        self,
        url: str,
        *,
        content: Any = None,
        interval: float = 2.0,
        send: Any = None,
    ) -> None:
        import threading

        from runjournal.projections.otel_trace import TraceFold

        check_http_url(url, "OTLP endpoint")
        self.url = url
        self._fold = TraceFold(content)
        self._lock = threading.Lock()
        self._send = send or self._export
        self._interval = interval
        self._stop = threading.Event()
        self._failed: BaseException | None = None
        self.spans = 0  # sent so far
        self._thread = threading.Thread(target=self._loop, name="otel-stream", daemon=True)
        self._thread.start()

    def listen(self, event: Any) -> None:
        with self._lock:
            self._fold.apply(event)

    def stop(self) -> None:
        """Stop sending (the run did not reach its end): nothing more is sent."""
        self._stop.set()
        self._thread.join()

    def close(self) -> TraceSent | None:
        """Stop the thread and send the rest; what was sent in all (None: no run)."""
        self._stop.set()
        self._thread.join()
        if self._failed is None:
            with self._lock:
                rest = self._fold.rest()
            if rest is not None:
                self._deliver(rest)
        if self._failed is not None:
            raise RunFailedError(safe_error_text(redact_url(str(self._failed)))) from None
        run_id, trace_id = self._fold.run_id, self._fold.trace_id()
        if not run_id:
            return None
        attempts = self._fold.attempt_count()
        return TraceSent(run_id, trace_id.hex(), self.spans, attempts, redact_url(self.url))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval) and self._failed is None:
            with self._lock:
                part = self._fold.drain()
            if part is not None:
                self._deliver(part)

    def _deliver(self, part: Any) -> None:
        try:
            self.spans += self._send(part, self.url)
        except Exception as exc:  # the exporter's, or the extra missing: reported at close
            self._failed = exc

    @staticmethod
    def _export(part: Any, url: str) -> int:
        from runjournal.adapters.otel_export import export_trace

        return export_trace(part, url, tool_version=__version__)
