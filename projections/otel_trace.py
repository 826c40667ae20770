"""A run as a trace: plain span records folded from its events (docs/operations.md
"Traces and lineage").

The run is the trace and its root span; under it one span per step, under a step one
per lane, under a lane one per stage decision (its reason code, category and outcome as
attributes), and under a stage one `chat <model>` span per `LLMCallAttempted`, with the
OpenTelemetry GenAI semantic conventions' attributes and our cost as
`runjournal.cost`. Times are the journal's timestamps; the trace id is derived from the
run id and every span id from the run id and the event (or step, lane) it stands for,
so two exports of one run are the same bytes.

Pure: no OpenTelemetry import here. `adapters/otel_export.py` turns these records into
the SDK's spans and sends them.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runjournal.domain.events import (
    LaneResolved,
    LLMCallAttempted,
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
    Timestamp,
)
from runjournal.domain.llm import AttemptStatus
from runjournal.projections.stage_outcomes import Outcome, immediate, key_of

# An attribute's value as OTLP carries it (no nested maps here).
AttrValue = str | bool | int | float | tuple[str, ...]

SERVICE_NAME = "runjournal"
SCOPE_NAME = "runjournal.journal"

# What an attempt's status says of the reply's finish reason: the journal keeps the
# status, not the server's `finish_reason` (an answered reply ended normally, a
# truncated one hit its length); an unanswered attempt has none.
_FINISH_REASONS: dict[AttemptStatus, tuple[str, ...]] = {
    AttemptStatus.OK: ("stop",),
    AttemptStatus.REPLY_TRUNCATED: ("length",),
}


class SpanKind:
    INTERNAL = "internal"
    CLIENT = "client"


@dataclass(frozen=True)
class SpanRecord:
    """One span, as plain data: ids are raw bytes (8 for a span)."""

    span_id: bytes
    parent_id: bytes | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: tuple[tuple[str, AttrValue], ...]
    error: str | None = None  # the status message of a span whose status is error


@dataclass(frozen=True)
class TraceRecord:
    trace_id: bytes  # 16 bytes
    run_id: str
    resource: tuple[tuple[str, AttrValue], ...]
    spans: tuple[SpanRecord, ...]


def trace_id_of(run_id: str) -> bytes:
    return _digest("trace", run_id, size=16)


def span_id_of(run_id: str, *parts: str) -> bytes:
    return _digest("span", run_id, *parts, size=8)


def _digest(*parts: str, size: int) -> bytes:
    raw = hashlib.sha256("\x00".join(("runjournal-otel", *parts)).encode()).digest()[:size]
    # an all-zero id is invalid in OTLP: vanishingly unlikely, never emitted
    return raw if any(raw) else b"\x01" + raw[1:]


def time_ns(moment: Timestamp) -> int:
    """Nanoseconds since the epoch, exactly (whole seconds, then the microseconds)."""
    return int(moment.replace(microsecond=0).timestamp()) * 1_000_000_000 + (
        moment.microsecond * 1000
    )


@dataclass
class _Open:
    """A span being folded: its times grow to cover its children."""

    span_id: bytes
    parent_id: bytes | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    kind: str = SpanKind.INTERNAL
    error: str | None = None
    order: int = 0

    def cover(self, start_ns: int, end_ns: int) -> None:
        self.start_ns = min(self.start_ns, start_ns)
        self.end_ns = max(self.end_ns, end_ns)

    def record(self) -> SpanRecord:
        return SpanRecord(
            span_id=self.span_id,
            parent_id=self.parent_id,
            name=self.name,
            kind=self.kind,
            start_ns=self.start_ns,
            end_ns=max(self.end_ns, self.start_ns),
            attributes=tuple(sorted(self.attributes.items())),
            error=self.error,
        )


# The extra attributes of an attempt, by its request digest: the prompt and reply text
# (`journal otel --content`), None where there is none.
ContentOf = Callable[[str], Mapping[str, AttrValue] | None]


class TraceFold:
    """Fold a run's events into its `TraceRecord` (`trace()` once the events end)."""

    def __init__(self, content: ContentOf | None = None) -> None:
        self._content = content
        self.run_id = ""
        self._run: _Open | None = None
        self._steps: dict[str, _Open] = {}
        self._lanes: dict[tuple[str, str], _Open] = {}
        self._stages: dict[str, _Open] = {}  # by the decision's event version (`_decided`)
        self._shared = (0, 0)  # the last decision's version, and how many shared it before
        # decisions waiting for their stage to run, by stage key (oldest first)
        self._pending: dict[tuple[str, str, str, str], deque[str]] = {}
        # the newest decision per stage key: where an LLM attempt of that stage belongs
        self._current: dict[tuple[str, str, str, str], str] = {}
        self._attempts: list[_Open] = []
        self._order = 0
        self._drained: set[bytes] = set()  # spans already handed out by `drain`

    # --- folding ------------------------------------------------------------------

    def apply(self, event: RunEvent) -> None:
        at = time_ns(event.timestamp)
        if isinstance(event, RunAllocated):
            self.run_id = event.run_id
            self._run = _Open(
                span_id=span_id_of(event.run_id, "run"),
                parent_id=None,
                name=f"run {event.pipeline}",
                start_ns=at,
                end_ns=at,
                attributes={
                    "runjournal.run_id": event.run_id,
                    "runjournal.pipeline": event.pipeline,
                    "runjournal.tool_version": event.tool_version,
                    "runjournal.recompute": tuple(event.recompute),
                },
            )
            return
        if self._run is None:
            return  # a run without its allocation: nothing to hang spans on
        self._run.cover(at, at)
        if isinstance(event, RunTerminated):
            self._run.attributes["runjournal.status"] = event.status.value
            self._run.attributes["runjournal.phase"] = event.phase.value
            if event.error is not None:
                self._run.error = event.error.message
        elif isinstance(event, LaneResolved):
            lane = self._lane(event.step, event.lane, at)
            lane.attributes["runjournal.lane_identity"] = event.lane_identity
            lane.attributes["runjournal.forced"] = event.forced
            lane.attributes["runjournal.chunks"] = event.chunks
        elif isinstance(event, StageDecided):
            self._decided(event, at)
        elif isinstance(event, StageExecuted | StageFailed):
            self._ran(event, at)
        elif isinstance(event, LLMCallAttempted):
            self._attempt(event, at)

    def _step(self, step: str, at: int) -> _Open:
        span = self._steps.get(step)
        if span is None:
            assert self._run is not None
            span = self._steps[step] = _Open(
                span_id=span_id_of(self.run_id, "step", step),
                parent_id=self._run.span_id,
                name=f"step {step}",
                start_ns=at,
                end_ns=at,
                attributes={"runjournal.step": step},
                order=self._next(),
            )
        span.cover(at, at)
        return span

    def _lane(self, step: str, lane: str, at: int) -> _Open:
        parent = self._step(step, at)
        span = self._lanes.get((step, lane))
        if span is None:
            span = self._lanes[(step, lane)] = _Open(
                span_id=span_id_of(self.run_id, "lane", step, lane),
                parent_id=parent.span_id,
                name=f"lane {step}/{lane}",
                start_ns=at,
                end_ns=at,
                attributes={"runjournal.step": step, "runjournal.lane": lane},
                order=self._next(),
            )
        span.cover(at, at)
        return span

    def _next(self) -> int:
        self._order += 1
        return self._order

    def _decided(self, event: StageDecided, at: int) -> None:
        lane = self._lane(event.step, event.lane, at)
        outcome = immediate(event)
        # the decisions a reuse summary stands for share its version (docs/internals.md
        # "Reuse summaries"): each after the first is keyed `<version>.<n>`
        version = event.originator_version
        n = self._shared[1] + 1 if self._shared[0] == version else 0
        self._shared = (version, n)
        key_id = str(version) if n == 0 else f"{version}.{n}"
        span = _Open(
            span_id=span_id_of(self.run_id, "event", key_id),
            parent_id=lane.span_id,
            name=f"stage {event.stage.value}",
            start_ns=at,
            end_ns=at,
            attributes={
                "runjournal.step": event.step,
                "runjournal.lane": event.lane,
                "runjournal.stage": event.stage.value,
                "runjournal.chunk": event.chunk,
                "runjournal.reason_code": event.code.value,
                "runjournal.reason_category": event.category.value,
                "runjournal.forced": event.forced,
                "runjournal.resumed": event.resumed,
                "runjournal.outcome": (outcome or Outcome.NOT_STARTED).value,
            },
            order=self._next(),
        )
        if outcome is Outcome.FAILED:
            span.error = event.detail
        self._stages[key_id] = span
        key = key_of(event)
        self._current[key] = key_id
        if outcome is None:
            self._pending.setdefault(key, deque()).append(key_id)

    def _ran(self, event: StageExecuted | StageFailed, at: int) -> None:
        self._lane(event.step, event.lane, at)
        waiting = self._pending.get(key_of(event))
        if not waiting:
            return
        span = self._stages[waiting.popleft()]
        span.cover(at, at)
        if isinstance(event, StageExecuted):
            span.attributes["runjournal.outcome"] = Outcome.EXECUTED.value
            span.attributes["runjournal.size"] = event.size
        else:
            span.attributes["runjournal.outcome"] = Outcome.FAILED.value
            span.attributes["runjournal.failure_code"] = event.code.value
            if event.cause is not None:
                span.attributes["runjournal.failure_cause"] = event.cause.value
            span.error = event.message

    def _attempt(self, event: LLMCallAttempted, at: int) -> None:
        lane = self._lane(event.step, event.lane, at)
        version = self._current.get(key_of(event))
        parent = self._stages[version] if version is not None else lane
        start = at - int(event.latency_ms * 1_000_000)
        attributes: dict[str, AttrValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": event.provider,
            "gen_ai.request.model": event.model,
            "gen_ai.usage.input_tokens": event.prompt_tokens,
            "gen_ai.usage.output_tokens": event.completion_tokens,
            "runjournal.cost": event.cost,
            "runjournal.profile": event.profile_id,
            "runjournal.call": event.call,
            "runjournal.attempt": event.attempt,
            "runjournal.attempt_status": event.status.value,
            "runjournal.request_sha256": event.request_sha256,
            "runjournal.replayed": event.replayed,
        }
        error = None
        if event.status is AttemptStatus.OK:
            # the journal keeps the model asked for; the reply came from that model name
            attributes["gen_ai.response.model"] = event.model
        else:
            attributes["error.type"] = event.status.value
            error = event.status.value
        finish = _FINISH_REASONS.get(event.status)
        if finish:
            attributes["gen_ai.response.finish_reasons"] = finish
        if event.http_status is not None:
            attributes["http.response.status_code"] = event.http_status
        if event.reply_sha256:
            attributes["runjournal.reply_sha256"] = event.reply_sha256
        if self._content is not None and event.status is AttemptStatus.OK:
            attributes.update(self._content(event.request_sha256) or {})
        span = _Open(
            span_id=span_id_of(self.run_id, "event", str(event.originator_version)),
            parent_id=parent.span_id,
            name=f"chat {event.model}",
            start_ns=start,
            end_ns=at,
            attributes=attributes,
            kind=SpanKind.CLIENT,
            error=error,
            order=self._next(),
        )
        parent.cover(start, at)
        lane.cover(start, at)
        self._steps[event.step].cover(start, at)
        if self._run is not None:
            self._run.cover(start, at)
        self._attempts.append(span)

    # --- the result -----------------------------------------------------------------

    def trace(self) -> TraceRecord | None:
        """The trace; None when the events held no `RunAllocated`."""
        if self._run is None:
            return None
        # parents cover their children: stages their attempts, lanes their stages, …
        for stage in self._stages.values():
            step, lane_id = stage.attributes["runjournal.step"], stage.attributes["runjournal.lane"]
            lane = self._lanes[(str(step), str(lane_id))]
            lane.cover(stage.start_ns, stage.end_ns)
        for (step, _), lane in self._lanes.items():
            self._steps[step].cover(lane.start_ns, lane.end_ns)
        for step in self._steps.values():
            self._run.cover(step.start_ns, step.end_ns)
        if "runjournal.status" not in self._run.attributes:
            self._run.attributes["runjournal.status"] = "running"
        children = sorted(
            [*self._steps.values(), *self._lanes.values(), *self._stages.values(), *self._attempts],
            key=lambda span: span.order,
        )
        return TraceRecord(
            trace_id=trace_id_of(self.run_id),
            run_id=self.run_id,
            resource=(("service.name", SERVICE_NAME),),
            spans=(self._run.record(), *(span.record() for span in children)),
        )

    # --- streaming: final spans while the run goes -----------------------------------

    def drain(self) -> TraceRecord | None:
        """The spans that became final since the last drain, as a partial trace (None when
        there are none): every LLM attempt, and every stage whose decision took effect
        (reused) or whose execution ended. Lanes, steps, the run and stages still waiting
        are final only when the run ends: `rest()` has them. The drained spans and the
        rest together are exactly `trace()`'s spans (docs/operations.md "Traces and
        lineage")."""
        if self._run is None:
            return None
        waiting = {version for queue in self._pending.values() for version in queue}
        done = [
            span
            for version, span in self._stages.items()
            if version not in waiting and span.span_id not in self._drained
        ]
        done += [span for span in self._attempts if span.span_id not in self._drained]
        if not done:
            return None
        done.sort(key=lambda span: span.order)
        self._drained.update(span.span_id for span in done)
        return self._partial(tuple(span.record() for span in done))

    def rest(self) -> TraceRecord | None:
        """`trace()` without the spans `drain` handed out."""
        whole = self.trace()
        if whole is None:
            return None
        return self._partial(tuple(s for s in whole.spans if s.span_id not in self._drained))

    def trace_id(self) -> bytes:
        return trace_id_of(self.run_id)

    def attempt_count(self) -> int:
        """The LLM attempts folded so far (one `chat` span each)."""
        return len(self._attempts)

    def _partial(self, spans: tuple[SpanRecord, ...]) -> TraceRecord:
        return TraceRecord(
            trace_id=trace_id_of(self.run_id),
            run_id=self.run_id,
            resource=(("service.name", SERVICE_NAME),),
            spans=spans,
        )


def trace_of(events: Any, content: ContentOf | None = None) -> TraceRecord | None:
    """The trace of one run's events (an iterable of `RunEvent`)."""
    fold = TraceFold(content)
    for event in events:
        fold.apply(event)
    return fold.trace()
