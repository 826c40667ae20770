"""`llm.json`: ask the step's LLM profile about each chunk and keep the JSON it answers.

The prompt is a template from `params.prompt` with `{text}`, `{source}`, `{step}` and
`{lane}` fields; the answer must be one JSON value (a ```json fence around it is
accepted). With `params.schema` (a JSON Schema) the runtime asks for a reply of that
shape (structured output) and re-asks when it does not validate; `temperature`,
`max_tokens` and `seed` pass through to each call. Merge lists the chunk answers in
chunk order; normalize keeps them, with a warning for each chunk whose answer was
empty. The reply itself is the artifact, so a change of model or profile is caught by
identity (profile, profile_source), never here (docs/modules.md "`llm.json`").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import msgspec
from runjournal.adapters.builtin_modules.text import BuiltinParamError
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.modules import (
    CallOptions,
    Chunk,
    Module,
    Normalized,
    PlannedCall,
    StageContext,
)

_FENCE = LazyPattern(r"^\s*```(?:json)?\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)
DEFAULT_PROMPT = "Answer with one JSON value describing this text from {source}:\n\n{text}"


class LLMReplyError(ValueError):
    """The runtime's answer is not one JSON value (the stage fails with this message)."""


class ChunkAnswer(msgspec.Struct, frozen=True):
    source: str
    answer: Any


class LLMJsonModule(Module):
    name: ClassVar[str] = "llm.json"
    fingerprint: ClassVar[str] = "llm.json/1"
    artifact_kind: ClassVar[str] = "llm-answers"
    schema: ClassVar[str] = "runjournal.llm.json/v1"
    media_type: ClassVar[str] = "application/json"
    chunk_type: ClassVar[Any] = ChunkAnswer
    merged_type: ClassVar[Any] = list[ChunkAnswer]
    artifact_type: ClassVar[Any] = list[ChunkAnswer]
    override_keys: ClassVar[tuple[str, ...] | None] = ()  # reads no --set key
    llm_stages: ClassVar[tuple[str, ...] | None] = ("extract",)  # one call per chunk
    known_params: ClassVar[tuple[str, ...] | None] = (
        "prompt",
        "system",
        "schema",
        "temperature",
        "max_tokens",
        "seed",
    )
    strict_params: ClassVar[bool] = True  # an unknown param is an error before the run
    merge_streams = True  # merge reads its parts once, in order (docs/modules.md)

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> list[str]:
        problems = []
        for name in ("prompt", "system"):
            if name in params and not isinstance(params[name], str):
                problems.append(f"llm.json: params.{name} must be a string")
        schema = params.get("schema")
        if schema is not None and (not isinstance(schema, dict) or not schema):
            problems.append("llm.json: params.schema must be a JSON Schema table")
        try:
            call_options(dict(params))
        except BuiltinParamError as exc:
            problems.append(f"llm.json: {exc}")
        return problems

    def planned_calls(self, chunk: Chunk, ctx: StageContext) -> list[PlannedCall] | None:
        """One call: the prompt and system prompt `extract` sends (its re-asks aside)."""
        try:
            prompt, system = _prompt(chunk, ctx)
        except LLMReplyError:
            return None
        return [PlannedCall(prompt=prompt, system=system)]

    def extract(self, chunk: Chunk, ctx: StageContext) -> ChunkAnswer:
        prompt, system = _prompt(chunk, ctx)
        options = call_options(ctx.params)
        schema = ctx.params.get("schema")
        if schema is not None:
            if not isinstance(schema, dict) or not schema:
                raise BuiltinParamError("params.schema must be a JSON Schema table")
            answer = ctx.llm.ask(prompt, Any, system=system, options=options, schema=schema)
            return ChunkAnswer(source=chunk.source, answer=answer)
        extra = {"options": options} if options is not None else {}
        reply = ctx.llm.complete(prompt, system=system, **extra)
        return ChunkAnswer(source=chunk.source, answer=parse_reply(reply))

    def merge(self, parts: Iterable[ChunkAnswer], ctx: StageContext) -> list[ChunkAnswer]:
        return list(parts)

    def normalize(self, merged: list[ChunkAnswer], ctx: StageContext) -> Normalized:
        empty = sum(1 for part in merged if part.answer in (None, "", [], {}))
        warnings = [f"{empty} chunk(s) got an empty answer"] if empty else []
        return Normalized(merged, warnings)


def _prompt(chunk: Chunk, ctx: StageContext) -> tuple[str, str | None]:
    """The chunk's prompt from the `prompt` template, and the `system` prompt."""
    template = ctx.params.get("prompt", DEFAULT_PROMPT)
    if not isinstance(template, str):
        raise LLMReplyError("params.prompt must be a string")
    try:
        prompt = template.format(text=chunk.text, source=chunk.source, step=ctx.step, lane=ctx.lane)
    except (KeyError, IndexError, ValueError) as exc:
        raise LLMReplyError(f"params.prompt is not a valid template: {exc}") from None
    system = ctx.params.get("system")
    return prompt, system if isinstance(system, str) else None


def call_options(params: dict[str, Any]) -> CallOptions | None:
    """`temperature`, `max_tokens` and `seed` from the step's params (None: none given)."""
    given = {k: params[k] for k in ("temperature", "max_tokens", "seed") if k in params}
    if not given:
        return None
    temperature = given.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or not 0 <= temperature <= 2
    ):
        raise BuiltinParamError("params.temperature must be a number from 0 to 2")
    for key, low in (("max_tokens", 1), ("seed", 0)):
        value = given.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        ):
            raise BuiltinParamError(f"params.{key} must be an integer ≥ {low}")
    return CallOptions(
        temperature=float(temperature) if temperature is not None else None,
        max_tokens=given.get("max_tokens"),
        seed=given.get("seed"),
    )


def parse_reply(reply: str) -> Any:
    """One JSON value, optionally inside a ```json fence; anything else is an error."""
    text = reply.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group("body")
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        preview = " ".join(reply.split())[:80]
        raise LLMReplyError(f"the model's reply is not JSON: {preview!r}") from None
