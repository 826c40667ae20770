"""The native Anthropic provider: one Messages API request through the official `anthropic`
client (the optional extra `anthropic`; docs/configuration.md "LLM profiles").

The runtime builds every request in one form (model, messages, sampling options, a
`json_schema` response format); this transport sends it as a Messages request:

- the system messages become the `system` blocks, marked `cache_control: ephemeral`, so
  requests that share a system prompt (every chunk of a step) hit the prompt cache;
- the first user message is cut in two text blocks where it stops sharing a prefix with
  another prompt of the same system prompt (at a whitespace, domain/prompt_cache.py
  `marked_prefix`), the first marked `cache_control` too, so prompts that share a long
  prefix (a template before its `{text}`) hit the cache as well: online, what it shares
  with a prompt sent before it; in a message batch, with any other of the batch
  (adapters/llm/batch_apis.py orders the batch so those prompts are neighbours);
- a `json_schema` response format becomes one tool whose `input_schema` is the step's
  JSON Schema, forced with `tool_choice`: the reply is the tool call's input, as JSON
  (a schema that is not an object is wrapped in `{"value": …}` and unwrapped);
- `max_tokens` is required by the API: 1024 when the call and the profile set none;
  sampling keys the API does not know (`seed`, a server's own keys) are not sent.

The reply's usage: `input_tokens` + `cache_creation_input_tokens` +
`cache_read_input_tokens` are its prompt tokens, the cache reads its `cached_tokens`,
the cache writes its `cache_write_tokens` (priced apart, `prices`); `stop_reason`
`max_tokens` is a cut reply (`finish_reason` `length`). Retries, errors and limits are
the `openai` transport's (the two official clients share their HTTP layer and error
classes), with the client's own retries off.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from runjournal.adapters.llm.cassette import Reply
from runjournal.adapters.llm.replies import usage_problem
from runjournal.adapters.llm.transport import OpenAITransport, TransportError
from runjournal.domain.llm import AttemptStatus
from runjournal.domain.prompt_cache import (
    RECENT_PROMPTS,
    SharedPrefixes,
    marked_prefix,
    prefix_tokens,
)

__all__ = ["DEFAULT_MAX_TOKENS", "TOOL_NAME", "AnthropicTransport"]

DEFAULT_MAX_TOKENS = 1024
TOOL_NAME = "reply"
# Messages API request keys a profile's `params` or a call may set (others are not sent).
_SAMPLING = ("temperature", "top_p", "top_k", "stop_sequences", "metadata")
_EPHEMERAL = {"type": "ephemeral"}


class PromptMarks:
    """The user prompts an endpoint sent (the latest `RECENT_PROMPTS` of each system
    prompt): how much of a new one an earlier one had (thread-safe; docs/operations.md
    "Prompt caching")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, SharedPrefixes] = {}

    def shared(self, system: str, prompt: str) -> int:
        with self._lock:
            seen = self._seen.setdefault(system, SharedPrefixes(RECENT_PROMPTS))
            return seen.remember(prompt)


def prompt_parts(request: dict[str, Any]) -> tuple[str, str]:
    """A request's system prompt and first user prompt (what the cache marks cover)."""
    messages = request.get("messages") or []
    system = "\n\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    user = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    return system, user if isinstance(user, str) else ""


class MissingExtra(TransportError):
    pass


class AnthropicTransport(OpenAITransport):
    PATH = "/v1/messages"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marks = PromptMarks()

    def payload(self, request: dict[str, Any], shared: int | None = None) -> dict[str, Any]:
        """What is sent for `request`; `shared`: how much of its user prompt another
        prompt of the batch has (None: online, against the prompts sent before it)."""
        return self._payload(request, shared)

    def _sdk(self) -> tuple[Any, Any]:
        try:
            import anthropic  # the optional extra
        except ImportError:
            raise MissingExtra(
                AttemptStatus.REQUEST_REFUSED,
                f"{self.endpoint}: provider 'anthropic' needs the anthropic extra "
                "(pip install 'runjournal[anthropic]')",
            ) from None
        return anthropic, anthropic.Anthropic

    def _payload(self, request: dict[str, Any], shared: int | None = None) -> dict[str, Any]:
        messages = request.get("messages") or []
        system, prompt = prompt_parts(request)
        if shared is None:
            shared = self.marks.shared(system, prompt)
        context = prefix_tokens(len(system)) if system else 0
        cut = marked_prefix(prompt, shared, context) if prompt else 0
        body: dict[str, Any] = {
            "model": request.get("model"),
            "max_tokens": int(request.get("max_tokens") or DEFAULT_MAX_TOKENS),
            "messages": [
                {"role": m.get("role"), "content": m.get("content")}
                for m in messages
                if m.get("role") != "system"
            ],
        }
        if cut:
            first = next(m for m in body["messages"] if m["role"] == "user")
            blocks = [{"type": "text", "text": prompt[:cut], "cache_control": dict(_EPHEMERAL)}]
            if prompt[cut:]:
                blocks.append({"type": "text", "text": prompt[cut:]})
            first["content"] = blocks
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]
        for key in _SAMPLING:
            if key in request:
                body[key] = request[key]
        schema = _schema_of(request)
        if schema is not None:
            wrapped = schema.get("type") != "object"
            body["tools"] = [
                {
                    "name": TOOL_NAME,
                    "description": "Give the answer as this tool's input.",
                    "input_schema": (
                        {"type": "object", "properties": {"value": schema}, "required": ["value"]}
                        if wrapped
                        else schema
                    ),
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": TOOL_NAME}
        return body

    def _reply_of(self, request: dict[str, Any], completion: Any) -> Reply:
        if not isinstance(completion, dict):
            completion = {}
        blocks = completion.get("content")
        blocks = blocks if isinstance(blocks, list) else []
        schema = _schema_of(request)
        content: str | None = None
        if schema is not None:
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    value = block.get("input")
                    if schema.get("type") != "object" and isinstance(value, dict):
                        value = value.get("value")
                    content = json.dumps(value, ensure_ascii=False)
                    break
        if content is None:
            texts = [
                b.get("text")
                for b in blocks
                if isinstance(b, dict)
                and b.get("type") == "text"
                and isinstance(b.get("text"), str)
            ]
            content = "".join(texts) if texts else None
        if content is None:
            raise TransportError(
                AttemptStatus.MALFORMED_RESPONSE,
                f"{self.endpoint} sent a message without text or tool input",
                http_status=200,
            )
        usage = completion.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        fresh, done = usage.get("input_tokens"), usage.get("output_tokens")
        problem = usage_problem(fresh, done)
        if problem is not None:
            raise TransportError(
                AttemptStatus.REPLY_INVALID,
                f"{self.endpoint} sent a message whose {problem}",
                http_status=200,
            )
        read = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        prompt = fresh + read + written if isinstance(fresh, int) else -1
        stop = completion.get("stop_reason")
        return Reply(
            content=self._scrub(content),
            prompt_tokens=prompt,
            completion_tokens=done if isinstance(done, int) else -1,
            finish_reason="length" if stop == "max_tokens" else "stop",
            cached_tokens=read,
            cache_write_tokens=written,
        )


def _schema_of(request: dict[str, Any]) -> dict[str, Any] | None:
    fmt = request.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if isinstance(schema, dict):
            return schema
    return None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
