"""LLM call metadata in the trace: `TracingLLM` wraps a step's runtime (digests, never text)."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from typing import Any

import msgspec
from runjournal.adapters.debug_bundle.redacted import encoder
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.ports import TraceRecorder


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
            text = response if isinstance(response, str) else encoder.encode(response).decode()
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
