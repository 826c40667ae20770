"""The pure folds behind `journal otel` and `journal lineage` (projections/otel_trace.py,
projections/lineage.py; docs/operations.md "Traces and lineage"): structure, ids and
determinism on synthetic runs, LLM attempts among repeated stage keys, stopped runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.events import (
    FileFingerprint,
    InputsFingerprinted,
    LLMCallAttempted,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
)
from runjournal.domain.llm import AttemptStatus
from runjournal.projections.lineage import ABORT, COMPLETE, FAIL, RUNNING, START, lineage_of
from runjournal.projections.otel_trace import (
    TraceFold,
    span_id_of,
    time_ns,
    trace_id_of,
    trace_of,
)
from support.synthetic import run_id_for, synthetic_run


def _with_attempts(events: list[RunEvent], per_decision: int) -> list[RunEvent]:
    """The run's events with `per_decision` LLM attempts after every execute decision,
    versions renumbered (the journal's order)."""
    out: list[RunEvent] = []
    for event in events:
        out.append(event)
        if isinstance(event, StageDecided) and event.code.value != "reused":
            for n in range(per_decision):
                out.append(
                    LLMCallAttempted(
                        originator_id=event.originator_id,
                        originator_version=0,
                        timestamp=event.timestamp + timedelta(microseconds=100 + n),
                        step=event.step,
                        lane=event.lane,
                        stage=event.stage,
                        chunk=event.chunk,
                        call=1,
                        attempt=n + 1,
                        profile_id="p",
                        provider="openai",
                        model="m-1",
                        status=AttemptStatus.OK if n == per_decision - 1 else AttemptStatus.TIMEOUT,
                        prompt_tokens=10,
                        completion_tokens=5 if n == per_decision - 1 else 0,
                        latency_ms=0.05,
                        cost=0.001,
                        request_sha256="a" * 64,
                    )
                )
    return [msgspec.structs.replace(e, originator_version=i + 1) for i, e in enumerate(out)]


def _attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes)


@settings(max_examples=25, deadline=None)
@given(lanes=st.integers(1, 4), chunks=st.integers(1, 4), per_decision=st.integers(0, 3))
def test_trace_structure_ids_and_determinism(lanes: int, chunks: int, per_decision: int) -> None:
    run = synthetic_run(run_id_for(lanes * 10 + chunks), lanes=lanes, chunks=chunks)
    events = _with_attempts(run.events, per_decision)
    trace = trace_of(events)
    assert trace is not None and trace == trace_of(events)  # the same events, the same trace
    assert trace.trace_id == trace_id_of(run.run_id) and len(trace.trace_id) == 16
    by_id = {s.span_id: s for s in trace.spans}
    assert len(by_id) == len(trace.spans) and all(len(i) == 8 and any(i) for i in by_id)
    [root] = [s for s in trace.spans if s.parent_id is None]
    assert root.span_id == span_id_of(run.run_id, "run")
    kinds: dict[str, int] = {}
    for span in trace.spans:
        kind = span.name.split()[0]
        kinds[kind] = kinds.get(kind, 0) + 1
        if span.parent_id is not None:
            parent = by_id[span.parent_id]
            assert parent.start_ns <= span.start_ns <= span.end_ns <= parent.end_ns
            expected = {"step": "run", "lane": "step", "stage": "lane", "chat": "stage"}[kind]
            assert parent.name.split()[0] == expected
    decisions = [e for e in events if isinstance(e, StageDecided)]
    attempts = [e for e in events if isinstance(e, LLMCallAttempted)]
    assert kinds.get("stage", 0) == len(decisions)
    assert kinds.get("chat", 0) == len(attempts)
    assert kinds["lane"] == lanes and kinds["step"] == 1
    for span in trace.spans:
        if span.name.startswith("chat "):
            a = _attrs(span)
            assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "m-1"
            assert (span.error is None) == (a["runjournal.attempt_status"] == "ok")
        if span.name.startswith("stage "):
            a = _attrs(span)
            assert a["runjournal.outcome"] in {"executed", "reused"}
            assert a["runjournal.reason_code"]


@settings(max_examples=25, deadline=None)
@given(
    lanes=st.integers(1, 3),
    chunks=st.integers(1, 3),
    per_decision=st.integers(0, 2),
    cuts=st.lists(st.integers(0, 200), max_size=6),
)
def test_streamed_drains_and_the_rest_are_the_whole_trace_once(
    lanes: int, chunks: int, per_decision: int, cuts: list[int]
) -> None:
    """What `run --otel-endpoint` streams while the run goes: drains at any points of the
    event stream, then the rest, hold every span of `trace()` exactly once and as final
    (a streamed span is the same record the whole trace has)."""
    run = synthetic_run(run_id_for(lanes * 10 + chunks), lanes=lanes, chunks=chunks)
    events = _with_attempts(run.events, per_decision)
    whole = trace_of(events)
    assert whole is not None
    fold = TraceFold()
    sent: list[Any] = []
    points = sorted({min(c, len(events)) for c in cuts})
    done = 0
    for point in [*points, len(events)]:
        for event in events[done:point]:
            fold.apply(event)
        done = point
        part = fold.drain()
        if part is not None:
            assert part.trace_id == whole.trace_id and part.spans
            sent.extend(part.spans)
    rest = fold.rest()
    assert rest is not None
    sent.extend(rest.spans)
    assert sorted(s.span_id for s in sent) == sorted(s.span_id for s in whole.spans)
    assert set(sent) == set(whole.spans)  # nothing streamed changed afterwards
    assert not any(s.name.startswith(("run ", "step ", "lane ")) for s in sent[: -len(rest.spans)])


def test_times_are_the_journals_in_nanoseconds() -> None:
    run = synthetic_run(run_id_for(7), lanes=1, chunks=1)
    first, last = run.events[0].timestamp, run.events[-1].timestamp
    trace = trace_of(run.events)
    assert trace is not None
    root = trace.spans[0]
    assert (root.start_ns, root.end_ns) == (time_ns(first), time_ns(last))
    assert time_ns(first) == int(first.timestamp()) * 10**9 + first.microsecond * 1000


def test_events_without_an_allocation_give_no_trace_and_no_lineage() -> None:
    run = synthetic_run(run_id_for(8), lanes=1, chunks=1)
    assert trace_of(run.events[1:]) is None
    assert lineage_of(run.events[1:]) == []


def _states(records: list[Any], job: str) -> list[str]:
    return [r.event_type for r in records if r.job == job]


def _with_sources(events: list[RunEvent], names: list[str]) -> list[RunEvent]:
    first = events[0]
    fingerprinted = InputsFingerprinted(
        originator_id=first.originator_id,
        originator_version=0,
        timestamp=first.timestamp,
        sources=[FileFingerprint(n, "b" * 64, 10) for n in names],
        references=[],
    )
    out = [first, fingerprinted, *events[1:]]
    return [msgspec.structs.replace(e, originator_version=i + 1) for i, e in enumerate(out)]


def test_lineage_of_a_succeeded_run() -> None:
    run = synthetic_run(run_id_for(9), lanes=2, chunks=2)
    run.events[:] = _with_sources(run.events, ["docs/0000.md", "docs/0001.md", "docs/other.md"])
    records = lineage_of(run.events)
    assert _states(records, "synthetic") == [START, RUNNING, COMPLETE]
    assert _states(records, "synthetic.terms") == [START, COMPLETE]
    end = records[-1]
    assert end.run_uuid == str(run.events[0].originator_id)
    assert {d.name for d in end.outputs} == {
        "artifacts/terms/0000.json",
        "artifacts/terms/0001.json",
    }
    step_end = [r for r in records if r.job == "synthetic.terms"][-1]
    assert step_end.parent == (end.run_uuid, "synthetic")
    decisions = dict(step_end.decisions or ())
    assert decisions["outcome:executed"] == 2 * (2 + 2)  # two lanes: two extracts, merge, normalize
    assert {d.name for d in step_end.outputs} == {
        "artifact:terms/docs/0000.md/terms",
        "artifact:terms/docs/0001.md/terms",
    }
    assert {d.name for d in step_end.inputs} == {"docs/0000.md", "docs/0001.md"}
    assert {d.name for d in end.inputs} == {"docs/0000.md", "docs/0001.md", "docs/other.md"}
    assert lineage_of(run.events) == records


def _ended(events: list[RunEvent], status: RunStatus, message: str | None) -> list[RunEvent]:
    last = events[-1]
    assert isinstance(last, RunTerminated)
    error = RunError(message=message) if message else None
    return [
        *events[:-1],
        msgspec.structs.replace(last, status=status, phase=RunPhase.EXECUTION, error=error),
    ]


def test_lineage_of_failed_interrupted_abandoned_and_running_runs() -> None:
    run = synthetic_run(run_id_for(10), lanes=1, chunks=1)
    failed = lineage_of(_ended(run.events, RunStatus.FAILED, "it broke"))
    assert _states(failed, "synthetic")[-1] == FAIL and failed[-1].error == "it broke"
    for status in (RunStatus.INTERRUPTED, RunStatus.ABANDONED):
        stopped = lineage_of(_ended(run.events, status, None))
        assert _states(stopped, "synthetic")[-1] == ABORT
    running = lineage_of(run.events[:-1])
    assert _states(running, "synthetic") == [START, RUNNING]
    assert _states(running, "synthetic.terms") == [START]
    # a decision to execute whose stage never ran: the step is aborted
    cut = [
        e for e in run.events if type(e).__name__ != "StageExecuted" or e.stage.value != "normalize"
    ]
    stopped = lineage_of(_ended(cut, RunStatus.INTERRUPTED, None))
    assert _states(stopped, "synthetic.terms")[-1] == ABORT


def test_every_gen_ai_attribute_is_one_the_conventions_define() -> None:
    semconv = pytest.importorskip(
        "opentelemetry.semconv._incubating.attributes.gen_ai_attributes",
        reason="opentelemetry-semantic-conventions comes with the otel extra",
    )
    defined = {v for k, v in vars(semconv).items() if k.startswith("GEN_AI_")}
    run = synthetic_run(run_id_for(11), lanes=1, chunks=1)
    trace = trace_of(_with_attempts(run.events, 2))
    assert trace is not None
    used = {k for s in trace.spans for k, _ in s.attributes if k.startswith("gen_ai.")}
    assert used and used <= defined, used - defined
