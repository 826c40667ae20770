"""Debug bundles (docs/internals.md "Debug bundles"): an opt-in `<debug root>/<run id>/` with
`summary/` and `trace/`.

The CLI allocates a bundle only when `--debug` asks for one, after the run id exists
and before the pipeline is resolved. `SummaryWriter` persists the redacted summary
documents; `TraceWriter` is the `TraceRecorder` port: JSON-lines records under
`trace/`. Everything crosses one boundary, `redact_obj`, before it is encoded, and the
writers never raise into the run: a failed write is kept as a `PersistenceFailure`
that the CLI reports (exit 3 when the run itself succeeded).

A bundle is marked `INCOMPLETE` from its allocation until `close()` finds every
requested write done, so a bundle left by a crash or a failed write says so itself.
Debug data is never read back: it is no checkpoint source and no cache input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
from runjournal.adapters.fsroot import AlreadyExists, FsRoot
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    CheckpointWritten,
    ChunkPlanResolved,
    LaneResolved,
    OutputsValidated,
    OutputWritten,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.identity import identity_overrides
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.ports import TraceRecorder
from runjournal.domain.redaction import redact_argv, redact_obj, redact_text, safe_error_text

__all__ = [
    "COMMAND",
    "FAILURE",
    "INCOMPLETE_MARKER",
    "LLM_TEXT_FILE",
    "RESOLUTION",
    "RUN",
    "SUMMARY_DIR",
    "SUMMARY_FILES",
    "TRACE_DIR",
    "TRACE_FILE",
    "WARNINGS",
    "BundleAllocationError",
    "DebugBundle",
    "DebugBundleError",
    "JournalSpans",
    "PersistenceFailure",
    "SummaryWriter",
    "TraceWriter",
    "TracingLLM",
    "command_payload",
    "resolution_payload",
    "trace_llm_calls",
]

SUMMARY_DIR: Final = "summary"
TRACE_DIR: Final = "trace"
TRACE_FILE: Final = "events.jsonl"
LLM_TEXT_FILE: Final = "llm-text.jsonl"  # prompt and reply text (docs/internals.md)
INCOMPLETE_MARKER: Final = "INCOMPLETE"

COMMAND: Final = "command.json"
RESOLUTION: Final = "resolution.json"
RUN: Final = "run.json"
WARNINGS: Final = "warnings.json"
FAILURE: Final = "failure.json"
SUMMARY_FILES: Final = (COMMAND, RESOLUTION, RUN, WARNINGS, FAILURE)

SUMMARY_TARGET: Final = "debug_summary"
TRACE_TARGET: Final = "debug_trace"
BUNDLE_TARGET: Final = "debug_bundle"

FORMAT_VERSION: Final = 1
TRACE_FLUSH_EVERY: Final = 64
MAX_TRACE_RECORD_BYTES: Final = 256 * 1024

_encoder = msgspec.json.Encoder(order="sorted")
_line_encoder = msgspec.json.Encoder()  # trace lines keep seq, time, kind, name, data order


# --- errors and failures -----------------------------------------------------------------


class DebugBundleError(Exception):
    """Base of the debug bundle's errors."""


class BundleAllocationError(DebugBundleError):
    """The bundle could not be allocated; `cleaned` says whether nothing of it remains."""

    def __init__(self, path: str, message: str, *, cleaned: bool) -> None:
        note = "" if cleaned else " (a partial bundle remains, marked INCOMPLETE)"
        super().__init__(safe_error_text(f"cannot allocate debug bundle {path}: {message}{note}"))
        self.path = path
        self.cleaned = cleaned


class PersistenceFailure(msgspec.Struct, frozen=True):
    """One requested debug write that did not happen: journal target, file, one line."""

    target: str
    name: str
    message: str

    def line(self) -> str:
        return f"could not write {self.target}: {self.message}"


def _failure(target: str, name: str, exc: BaseException) -> PersistenceFailure:
    return PersistenceFailure(target, name, safe_error_text(str(exc) or type(exc).__name__))


# --- the redaction boundary ----------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-safe builtins; anything exotic becomes its redacted repr, never raw bytes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {redact_text(str(_plain(k))): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=lambda v: _encoder.encode(v))
    if isinstance(value, datetime):
        return value.isoformat()
    return redact_text(repr(value))


def redacted_json(payload: Any) -> Any:
    """The one way debug data is prepared for disk: `redact_obj`, then plain JSON data."""
    return _plain(redact_obj(payload))


# --- summary ----------------------------------------------------------------------------------


class SummaryWriter:
    """Writes the summary documents, each atomically, each through `redact_obj`."""

    def __init__(self, root: FsRoot) -> None:
        self._root = root
        self.failures: list[PersistenceFailure] = []
        self.written: list[str] = []

    def write(self, name: str, payload: Mapping[str, Any]) -> bool:
        """Persist one summary document; a failure is recorded, never raised."""
        if name not in SUMMARY_FILES:
            raise ValueError(f"not a summary document: {name!r}")
        body = {"format_version": FORMAT_VERSION, "document": name.removesuffix(".json")}
        body.update(payload)
        try:
            data = msgspec.json.format(_encoder.encode(redacted_json(body)), indent=2) + b"\n"
            self._root.write_bytes(name, data)
        except (OSError, ValueError, msgspec.EncodeError) as exc:
            self.failures.append(_failure(SUMMARY_TARGET, name, exc))
            return False
        if name not in self.written:
            self.written.append(name)
        return True


def command_payload(
    *,
    argv: list[str],
    run_id: str,
    tool_version: str,
    pipeline: str,
    pipeline_file: str,
    overrides: Mapping[str, str],
    resume: bool,
    recompute: Iterable[str],
    inputs: Iterable[str],
    debug: str,
) -> dict[str, Any]:
    """`command.json`: the invocation; `--set` values as they enter identity (markers)."""
    return {
        "run_id": run_id,
        "tool_version": tool_version,
        "argv": redact_argv(list(argv)),
        "pipeline": pipeline,
        "pipeline_file": pipeline_file,
        "overrides": identity_overrides(overrides),
        "resume": resume,
        "recompute": list(recompute),
        "inputs": list(inputs),
        "debug": debug,
    }


def _profile_view(profile: Any) -> dict[str, Any]:
    return {
        "id": getattr(profile, "id", None),
        "source_kind": getattr(profile, "source_kind", None),
        "api_key_env": getattr(profile, "api_key_env", None),
        "profile": getattr(profile, "digest", None),
        "profile_source": getattr(profile, "source_digest", None),
        **(profile.non_secret() if hasattr(profile, "non_secret") else {}),
    }


def resolution_payload(
    settings: list[dict[str, object]],
    *,
    pipeline: ResolvedPipeline | None = None,
    profiles: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """`resolution.json`: settings with origins, then what P3 resolved (identities only).

    Sources and references appear as name, sha256 and size: never their bytes.
    """
    doc: dict[str, Any] = {
        "status": "failed" if error is not None else "resolved",
        "settings": settings,
        "error": error,
        "pipeline": None,
    }
    if pipeline is not None:
        used = profiles or {}
        doc["pipeline"] = {
            "name": pipeline.name,
            "chunking": msgspec.to_builtins(pipeline.chunking),
            "sources": [
                {"name": s.name, "sha256": s.sha256, "size": len(s.data)} for s in pipeline.sources
            ],
            "references": [
                {
                    "name": name,
                    "sha256": digest,
                    "size": len(pipeline.references.get(name, "").encode("utf-8")),
                }
                for name, digest in sorted(pipeline.reference_digests.items())
            ],
            "overrides": identity_overrides(pipeline.overrides),
            "steps": [
                {
                    "id": step.id,
                    "module": {
                        "name": type(step.module).name or type(step.module).__qualname__,
                        "fingerprint": step.module.fingerprint,
                        "artifact_kind": step.module.artifact_kind,
                        "schema": step.module.schema,
                    },
                    "validators": [type(v).fingerprint for v in step.validators],
                    "scope": step.scope.value,
                    "consumes": list(step.consumes),
                    "params": dict(step.params),
                    "components": msgspec.to_builtins(step.components),
                    "profile": _profile_view(used[step.id]) if step.id in used else None,
                }
                for step in pipeline.steps
            ],
        }
    return doc


# --- trace --------------------------------------------------------------------------------------


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class TraceWriter:
    """The `TraceRecorder` port on `trace/events.jsonl`: one redacted JSON object a line.

    Records are buffered and appended in batches (one fsync per batch). Thread-safe:
    modules may record from parallel extract workers. The first failed append is kept
    and later records are counted as dropped; `record` never raises into the run.
    """

    def __init__(
        self,
        root: FsRoot,
        *,
        clock: Callable[[], str] = _now_iso,
        flush_every: int = TRACE_FLUSH_EVERY,
        max_record_bytes: int = MAX_TRACE_RECORD_BYTES,
        file_name: str = TRACE_FILE,
    ) -> None:
        self._root = root
        self._file = file_name
        self._clock = clock
        self._flush_every = max(1, flush_every)
        self._max_record = max_record_bytes
        self._lock = threading.Lock()
        self._buffer: list[bytes] = []
        self._seq = 0
        self._closed = False
        self.dropped = 0
        self.failures: list[PersistenceFailure] = []

    @property
    def records(self) -> int:
        return self._seq

    def record(self, kind: str, name: str, data: Mapping[str, Any]) -> None:
        try:
            body = redacted_json(dict(data))
        except Exception as exc:  # material that cannot even be copied: say so, redacted
            body = {"unrecordable": redact_text(f"{type(exc).__name__}: {exc}")}
        with self._lock:
            if self._closed:
                return  # late material (after the run's end) has nowhere to go
            if self.failures:
                self.dropped += 1
                return
            self._seq += 1
            line = {
                "seq": self._seq,
                "time": self._clock(),
                "kind": redact_text(str(kind)),
                "name": redact_text(str(name)),
                "data": body,
            }
            encoded = _line_encoder.encode(line)
            if len(encoded) > self._max_record:
                line["data"] = {
                    "omitted": "record too large",
                    "bytes": len(encoded),
                    "sha256": hashlib.sha256(encoded).hexdigest(),
                }
                encoded = _line_encoder.encode(line)
            self._buffer.append(encoded + b"\n")
            if len(self._buffer) >= self._flush_every:
                self._flush_locked()

    def flush(self) -> bool:
        with self._lock:
            return self._flush_locked()

    def close(self) -> bool:
        """Flush what is buffered; later records are ignored. True if nothing failed."""
        with self._lock:
            ok = self._flush_locked()
            self._closed = True
            return ok and not self.failures

    def _flush_locked(self) -> bool:
        if self.failures:
            self.dropped += len(self._buffer)
            self._buffer.clear()
            return False
        if not self._buffer:
            return True
        data = b"".join(self._buffer)
        pending = len(self._buffer)
        self._buffer.clear()
        try:
            self._root.append_line(self._file, data)
        except (OSError, ValueError) as exc:
            self.dropped += pending
            self.failures.append(_failure(TRACE_TARGET, self._file, exc))
            return False
        return True


class JournalSpans:
    """A journal listener that turns run events into trace spans (no runner change).

    Steps and lanes get `begin`/`end` records, stages their decisions, executions and
    failures. Unattached (no trace requested) it does nothing and keeps no state. A
    recorder that fails (`RECORDER_ERRORS`) never reaches `emit`: the failure is noted in
    the trace instead. Any other exception is a bug in the translation and propagates.
    """

    # What a TraceRecorder may raise when it cannot record: I/O, encoding, its own state.
    RECORDER_ERRORS = (OSError, ValueError, RuntimeError)

    def __init__(self) -> None:
        self._trace: TraceRecorder | None = None
        self._step: str | None = None
        self._step_lanes = 0

    def attach(self, trace: TraceRecorder | None) -> None:
        self._trace = trace

    def __call__(self, event: RunEvent) -> None:
        trace = self._trace
        if trace is None:
            return
        try:
            self._translate(trace, event)
        except self.RECORDER_ERRORS as exc:  # the trace is lost, not the run: leave a note
            with contextlib.suppress(*self.RECORDER_ERRORS):
                trace.record("trace", "error", {"error": f"{type(exc).__name__}: {exc}"})

    def _end_step(self, trace: TraceRecorder, status: str) -> None:
        if self._step is not None:
            trace.record(
                "step", self._step, {"event": "end", "lanes": self._step_lanes, "status": status}
            )
            self._step = None

    def _translate(self, trace: TraceRecorder, e: RunEvent) -> None:
        if isinstance(e, ChunkPlanResolved):
            trace.record(
                "plan",
                e.source,
                {"plan_key": e.plan_key, "outcomes": e.outcomes, "chunks": e.chunks},
            )
        elif isinstance(e, LaneResolved):
            if e.step != self._step:
                self._end_step(trace, "done")
                self._step, self._step_lanes = e.step, 0
                trace.record("step", e.step, {"event": "begin"})
            self._step_lanes += 1
            trace.record(
                "lane",
                f"{e.step}/{e.lane}",
                {
                    "event": "begin",
                    "step": e.step,
                    "lane": e.lane,
                    "lane_identity": e.lane_identity,
                    "chunks": e.chunks,
                    "forced": e.forced,
                    "dependencies": len(e.dependencies),
                },
            )
        elif isinstance(e, StageDecided):
            trace.record(
                "stage",
                e.stage.value,
                {
                    "event": "decided",
                    "step": e.step,
                    "lane": e.lane,
                    "chunk": e.chunk,
                    "code": e.code,
                    "category": e.category,
                    "checkpoint": e.checkpoint,
                    "forced": e.forced,
                    "resumed": e.resumed,
                },
            )
        elif isinstance(e, StageExecuted):
            trace.record(
                "stage",
                e.stage.value,
                {
                    "event": "executed",
                    "step": e.step,
                    "lane": e.lane,
                    "chunk": e.chunk,
                    "sha256": e.sha256,
                    "size": e.size,
                },
            )
        elif isinstance(e, StageFailed):
            where = {"step": e.step, "lane": e.lane, "chunk": e.chunk, "code": e.code}
            trace.record("stage", e.stage.value, {"event": "failed", **where, "message": e.message})
            trace.record("lane", f"{e.step}/{e.lane}", {"event": "end", "status": "failed"})
        elif isinstance(e, CheckpointWritten | CheckpointWriteFailed):
            ok = isinstance(e, CheckpointWritten)
            trace.record(
                "checkpoint",
                e.stage.value,
                {"step": e.step, "lane": e.lane, "chunk": e.chunk, "written": ok},
            )
        elif isinstance(e, ArtifactGenerated):
            trace.record(
                "lane",
                f"{e.step}/{e.lane}",
                {
                    "event": "end",
                    "status": "restored" if e.restored else "done",
                    "kind": e.kind,
                    "sha256": e.sha256,
                    "size": e.size,
                    "warnings": len(e.warnings),
                },
            )
        elif isinstance(e, OutputsValidated):
            trace.record("outputs", "validated", {"checked": e.checked, "refused": e.refused})
        elif isinstance(e, OutputWritten):
            trace.record("output", e.name, {"sha256": e.sha256, "size": e.size})
        elif isinstance(e, RunTerminated):
            self._end_step(trace, e.status.value)
            trace.record("run", "terminated", {"status": e.status, "phase": e.phase})


class TracingLLM:
    """Wraps a step's LLM runtime to trace call metadata: digests and sizes, not text.

    The text itself goes to `trace/llm-text.jsonl`, written by the metered runtime.
    """

    def __init__(self, runtime: Any, trace: TraceRecorder, *, step: str) -> None:
        self._runtime = runtime
        self._trace = trace
        self._step = step
        profile = getattr(runtime, "profile", None)
        self._meta = {
            "step": step,
            "profile": getattr(profile, "id", None),
            "provider": getattr(profile, "provider", None),
            "model": getattr(profile, "model", None),
        }

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    def for_call(self, scope: Any) -> TracingLLM:
        """The traced runtime of one stage execution (its attempts, if metered, pass through)."""
        inner_for_call = getattr(self._runtime, "for_call", None)
        call = inner_for_call(scope) if inner_for_call is not None else None
        traced = TracingLLM(
            call if call is not None else self._runtime, self._trace, step=self._step
        )
        traced.attempts = call.attempts if call is not None else []  # type: ignore[attr-defined]
        return traced

    def complete(self, prompt: str, *, system: str | None = None, **kw: Any) -> str:
        return self._traced(
            prompt, system, lambda: self._runtime.complete(prompt, system=system, **kw)
        )

    def ask(self, prompt: str, reply_type: Any, *, system: str | None = None, **kw: Any) -> Any:
        return self._traced(
            prompt, system, lambda: self._runtime.ask(prompt, reply_type, system=system, **kw)
        )

    def _traced(self, prompt: str, system: str | None, call: Callable[[], Any]) -> Any:
        request = {
            **self._meta,
            "prompt_sha256": _text_digest(prompt),
            "prompt_chars": len(prompt),
            "system_sha256": _text_digest(system) if system is not None else None,
            "system_chars": len(system) if system is not None else 0,
        }
        self._trace.record("llm", "request", request)
        started = time.monotonic()
        try:
            response = call()
        except Exception as exc:
            self._trace.record(
                "llm",
                "error",
                {
                    **self._meta,
                    "error_type": type(exc).__name__,
                    "cause": getattr(getattr(exc, "cause", None), "value", None),
                    "duration_ms": round((time.monotonic() - started) * 1000, 3),
                },
            )
            raise
        try:
            text = response if isinstance(response, str) else _encoder.encode(response).decode()
        except (msgspec.EncodeError, TypeError, ValueError):
            text = repr(response)
        self._trace.record(
            "llm",
            "response",
            {
                **self._meta,
                "response_sha256": _text_digest(text),
                "response_chars": len(text),
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            },
        )
        return response


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def trace_llm_calls(pipeline: ResolvedPipeline, trace: TraceRecorder) -> ResolvedPipeline:
    """The same pipeline with every step's LLM runtime traced (identities are untouched)."""
    steps = tuple(
        dataclasses.replace(step, llm=TracingLLM(step.llm, trace, step=step.id))
        if step.llm is not None
        else step
        for step in pipeline.steps
    )
    return dataclasses.replace(pipeline, steps=steps)


# --- the bundle -----------------------------------------------------------------------------------


class DebugBundle:
    """One run's allocated bundle: `summary/` always, `trace/` when trace was requested."""

    def __init__(
        self, *, path: str, run_id: str, root: FsRoot, summary: FsRoot, trace: FsRoot | None
    ) -> None:
        self.path = path
        self.run_id = run_id
        self._root = root
        self._summary_root = summary
        self._trace_root = trace
        self.summary = SummaryWriter(summary)
        self.trace: TraceWriter | None = TraceWriter(trace) if trace is not None else None
        # LLM prompt and reply text, beside the trace events (which carry digests only).
        self.llm_text: TraceWriter | None = (
            TraceWriter(trace, file_name=LLM_TEXT_FILE) if trace is not None else None
        )
        self._marker_failures: list[PersistenceFailure] = []
        self._closed = False

    @classmethod
    def allocate(cls, debug_root: str, run_id: str, *, trace: bool) -> DebugBundle:
        """Create `<debug root>/<run id>/` exclusively, marked INCOMPLETE, with its roots.

        All or nothing: on a failure after the exclusive mkdir, the half-made bundle is
        removed again (it is ours); only if that removal fails too does it remain, still
        marked INCOMPLETE. Raises `BundleAllocationError`.
        """
        planned = os.path.join(os.path.abspath(debug_root), run_id)
        try:
            parent = FsRoot.open(debug_root, create=True)
        except (OSError, ValueError) as exc:
            raise BundleAllocationError(planned, str(exc), cleaned=True) from None
        opened: list[FsRoot] = []
        try:
            try:
                parent.mkdir(run_id, exclusive=True)
            except AlreadyExists as exc:  # not ours: never touch it
                raise BundleAllocationError(planned, str(exc), cleaned=True) from None
            except (OSError, ValueError) as exc:
                raise BundleAllocationError(planned, str(exc), cleaned=True) from None
            try:
                root = parent.subroot(run_id)
                opened.append(root)
                root.write_bytes(INCOMPLETE_MARKER, _marker_text(run_id), overwrite=False)
                root.mkdir(SUMMARY_DIR, exclusive=True)
                summary = root.subroot(SUMMARY_DIR)
                opened.append(summary)
                trace_root = None
                if trace:
                    root.mkdir(TRACE_DIR, exclusive=True)
                    trace_root = root.subroot(TRACE_DIR)
                    opened.append(trace_root)
            except (OSError, ValueError) as exc:
                for fs in opened:
                    fs.close()
                cleaned = True
                try:
                    parent.remove_tree(run_id, missing_ok=True)
                except (OSError, ValueError):
                    cleaned = False
                raise BundleAllocationError(planned, str(exc), cleaned=cleaned) from None
        finally:
            parent.close()
        return cls(path=root.path, run_id=run_id, root=root, summary=summary, trace=trace_root)

    @property
    def failures(self) -> list[PersistenceFailure]:
        trace = self.trace.failures if self.trace is not None else []
        text = self.llm_text.failures if self.llm_text is not None else []
        return [*self.summary.failures, *trace, *text, *self._marker_failures]

    def close(self) -> list[PersistenceFailure]:
        """Flush the trace; clear the INCOMPLETE marker only if nothing failed.

        Returns every persistence failure of the bundle (empty when it is complete).
        """
        if self._closed:
            return self.failures
        self._closed = True
        if self.llm_text is not None:
            self.llm_text.close()
        if self.trace is not None:
            self.trace.close()
            if self.trace.dropped and self.trace.failures:
                first = self.trace.failures[0]
                self.trace.failures[0] = msgspec.structs.replace(
                    first, message=f"{first.message} ({self.trace.dropped} record(s) lost)"
                )
        if not self.failures:
            try:
                self._root.remove(INCOMPLETE_MARKER)
            except (OSError, ValueError) as exc:
                self._marker_failures.append(_failure(BUNDLE_TARGET, INCOMPLETE_MARKER, exc))
        for fs in (self._trace_root, self._summary_root, self._root):
            if fs is not None:
                fs.close()
        return self.failures


def _marker_text(run_id: str) -> bytes:
    return (
        f"debug bundle of run {run_id} is incomplete: the run has not finished writing it,\n"
        "or a write failed (see `runjournal journal show` for TerminalPersistenceFailed).\n"
    ).encode()
