"""Send a run's trace over OTLP/HTTP (protobuf) through the official OpenTelemetry SDK.

`projections/otel_trace.py` folds the journal into plain span records; here they become
the SDK's `ReadableSpan`s, with the ids and times the records carry (no id generator,
no clock), and go out through `OTLPSpanExporter.export()` (docs/operations.md "Traces
and lineage"). The SDK is imported on first use only: the `otel` extra, and start-up
time stays as it is (docs/performance.md "Start-up").
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

from runjournal.domain.redaction import redact_obj
from runjournal.projections.otel_trace import SCOPE_NAME, SpanKind, TraceRecord

TRACES_PATH = "/v1/traces"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class OtelUnavailable(Exception):
    """The `otel` extra is not installed."""


class OtelExportFailed(Exception):
    """The endpoint did not take the spans."""


def traces_url(endpoint: str | None) -> str | None:
    """The traces URL: `--endpoint` first, then the OTLP variables; None when none is set.

    A base URL (`http://collector:4318`) gets `/v1/traces`, as `OTEL_EXPORTER_OTLP_ENDPOINT`
    does in every OpenTelemetry SDK; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and a URL that
    already ends in `/v1/traces` are used as they are.
    """
    if endpoint:
        return _with_path(endpoint)
    signal = os.environ.get(ENDPOINT_VARIABLES[0], "").strip()
    if signal:
        return signal
    base = os.environ.get(ENDPOINT_VARIABLES[1], "").strip()
    return _with_path(base) if base else None


def _with_path(url: str) -> str:
    url = url.strip()
    return url if url.rstrip("/").endswith(TRACES_PATH) else url.rstrip("/") + TRACES_PATH


def cassette_content(cassette: Any) -> Callable[[str], dict[str, Any] | None]:
    """`gen_ai.input.messages` and `gen_ai.output.messages` (JSON, the GenAI conventions'
    message shape) of the exchange a cassette recorded for a request digest, passed
    through the redaction component first (docs/operations.md "Redaction")."""

    def text_of(content: Any) -> str:
        return content if isinstance(content, str) else json.dumps(content, sort_keys=True)

    def content_of(digest: str) -> dict[str, Any] | None:
        exchange = cassette.exchange(digest)
        if exchange is None:
            return None
        asked = [
            {
                "role": str(m.get("role", "user")),
                "parts": [{"type": "text", "content": text_of(m.get("content", ""))}],
            }
            for m in exchange.request.get("messages", [])
            if isinstance(m, dict)
        ]
        answered = [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": exchange.reply.content}],
                "finish_reason": exchange.reply.finish_reason or "stop",
            }
        ]
        return {
            "gen_ai.input.messages": json.dumps(redact_obj(asked), sort_keys=True),
            "gen_ai.output.messages": json.dumps(redact_obj(answered), sort_keys=True),
        }

    return content_of


def readable_spans(trace: TraceRecord, *, tool_version: str) -> list[Any]:
    """The SDK's spans for a trace record, ids and times as recorded."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags
        from opentelemetry.trace import SpanKind as OtelKind
    except ImportError as exc:
        raise OtelUnavailable(
            f"OpenTelemetry is not installed ({exc.name}): pip install 'runjournal[otel]'"
        ) from None

    trace_id = int.from_bytes(trace.trace_id, "big")
    resource = Resource(dict(trace.resource))  # not Resource.create: no host or SDK facts
    scope = InstrumentationScope(SCOPE_NAME, tool_version)
    kinds = {SpanKind.INTERNAL: OtelKind.INTERNAL, SpanKind.CLIENT: OtelKind.CLIENT}

    def context(span_id: bytes) -> Any:
        return SpanContext(
            trace_id,
            int.from_bytes(span_id, "big"),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )

    spans = []
    for record in trace.spans:
        status = (
            Status(StatusCode.ERROR, record.error)
            if record.error is not None
            else Status(StatusCode.UNSET)
        )
        spans.append(
            ReadableSpan(
                name=record.name,
                context=context(record.span_id),
                parent=context(record.parent_id) if record.parent_id else None,
                resource=resource,
                attributes={
                    k: list(v) if isinstance(v, tuple) else v for k, v in record.attributes
                },
                kind=kinds[record.kind],
                status=status,
                start_time=record.start_ns,
                end_time=record.end_ns,
                instrumentation_scope=scope,
            )
        )
    return spans


# Spans per OTLP request: a large run's trace stays far below the exporter's 64 MiB
# request limit and a collector's usual 4 MiB one.
BATCH = 1000


def export_trace(
    trace: TraceRecord, url: str, *, tool_version: str, timeout: float | None = None
) -> int:
    """Send every span of the trace to `url`, `BATCH` spans per OTLP/HTTP request (the
    run's span first); the span count.

    `timeout` None: the SDK's (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s by default), retries
    included. The SDK's own log lines are kept quiet: the caller says what failed, in
    one line.
    """
    spans = readable_spans(trace, tool_version=tool_version)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    quiet = logging.getLogger("opentelemetry")  # the exporter and its HTTP client
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
    sent = 0
    try:
        for start in range(0, len(spans), BATCH):  # the same batches every time
            batch = spans[start : start + BATCH]
            if exporter.export(batch) is not SpanExportResult.SUCCESS:
                raise OtelExportFailed(
                    f"{url} did not accept the {len(spans)} span(s) ({sent} sent before)"
                )
            sent += len(batch)
    finally:
        exporter.shutdown()
    return sent
