"""`adapters/otel_export.py`: a trace larger than one batch goes out in several OTLP
requests, the same ones every time, every span's parent among the spans sent
(docs/operations.md "Traces and lineage")."""

from __future__ import annotations

import math

import pytest
from runjournal.adapters import otel_export
from runjournal.projections.otel_trace import trace_of
from support.otlp_receiver import Receiver, spans_of
from support.synthetic import run_id_for, synthetic_run


def test_a_large_trace_goes_in_batches_the_same_each_time(monkeypatch) -> None:
    trace = trace_of(synthetic_run(run_id_for(3), lanes=4, chunks=3).events)
    assert trace is not None and len(trace.spans) > 7
    monkeypatch.setattr(otel_export, "BATCH", 7)
    receiver = Receiver()
    try:
        for _ in range(2):
            sent = otel_export.export_trace(trace, receiver.url + "/v1/traces", tool_version="t")
            assert sent == len(trace.spans)
    finally:
        receiver.stop()
    batches = math.ceil(len(trace.spans) / 7)
    assert len(receiver.bodies) == 2 * batches
    assert receiver.bodies[:batches] == receiver.bodies[batches:]
    spans = [s for r in receiver.requests()[:batches] for s in spans_of(r)]
    ids = {s.span_id for s in spans}
    assert len(ids) == len(trace.spans)
    assert all(not s.parent_span_id or s.parent_span_id in ids for s in spans)
    assert spans[0].name == "run synthetic" and not spans[0].parent_span_id


def test_an_endpoint_that_refuses_is_one_error(monkeypatch) -> None:
    trace = trace_of(synthetic_run(run_id_for(4), lanes=1, chunks=1).events)
    assert trace is not None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    receiver = Receiver()
    receiver.stop()  # nothing listens there any more
    with pytest.raises(otel_export.OtelExportFailed, match="did not accept"):
        otel_export.export_trace(trace, receiver.url + "/v1/traces", tool_version="t")
