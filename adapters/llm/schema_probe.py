"""`runjournal check --online`: does each endpoint honour the `json_schema` response format?

After the models route answered (adapters/llm/probe.py), one small chat completion through
the official `openai` client (no retries, short timeouts, `max_tokens` 32): the prompt asks
for one JSON object, the `json_schema` response format for another (a tiny schema with
one allowed value). A server that enforces the schema answers the schema's object; one
that ignores the response format follows the prompt (or answers anything else), and is
named before a run spends anything on it (docs/operations.md "`check`").

The verdict, per endpoint (`probed[].json_schema` of `check --json`):

- `honoured`: the reply is the schema's object;
- `ignored`: a reply that does not conform (a problem: structured replies would be
  re-asked and fail);
- `refused`: a 4xx blaming the response format (the run falls back to `json_object`
  mode by itself, as it does for such a server; not a problem);
- `not_used`: the profile asks for `json_object` mode (`structured_output`), or is an
  `anthropic` one (a structured reply is a forced tool call there), no request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from runjournal.adapters.llm.client_options import StructuredOutput
from runjournal.adapters.llm.replies import refuses_schema
from runjournal.adapters.llm.reply_formats import strip_fence
from runjournal.adapters.profiles import Profile
from runjournal.adapters.secrets import remember_secrets
from runjournal.domain.redaction import redact_text, scrub_known

PROBE_TIMEOUT_S = 30.0  # a local model may take a while for its first tokens
PROBE_MAX_TOKENS = 32
_UNKEYED = "unused"  # an OpenAI-compatible server without auth still wants a header

# The schema allows one object; the prompt asks for another, so only a server that
# enforces the schema answers it.
EXPECTED = {"answer": "runjournal-check"}
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["runjournal-check"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
PROMPT = 'Reply with exactly this JSON object and nothing else: {"colour": "blue"}'


@dataclass(frozen=True)
class SchemaVerdict:
    verdict: str  # honoured, ignored, refused, not_used, unknown
    problem: str | None = None  # one line when the endpoint cannot be trusted with a schema


def probe_json_schema(
    profile: Profile, environ: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S
) -> SchemaVerdict:
    """Send the probe and judge the reply (see the module docstring)."""
    if profile.client.structured_output is not StructuredOutput.JSON_SCHEMA:
        return SchemaVerdict("not_used")
    if profile.provider == "anthropic":  # asked as a forced tool call, not a response format
        return SchemaVerdict("not_used")
    import openai  # lazy: only `check --online` pays for the import here

    remember_secrets(profile.secrets(environ))  # scrubbed from whatever the server says
    shown = (
        f"profile '{profile.id}' ({redact_text(profile.base_url or 'https://api.openai.com/v1')})"
    )
    env = profile.key_env()
    key = environ.get(env) if env else None
    client = openai.OpenAI(
        api_key=key or _UNKEYED,
        base_url=profile.base_url,
        max_retries=0,
        timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
    )
    try:
        reply = client.chat.completions.create(
            model=profile.model,
            messages=[{"role": "user", "content": PROMPT}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "runjournal_check", "schema": SCHEMA, "strict": True},
            },
            max_tokens=PROBE_MAX_TOKENS,
            temperature=0,
        )
    except openai.APIStatusError as exc:
        text = scrub_known(" ".join(str(exc.message).split()))[:200]
        if 400 <= exc.status_code < 500 and refuses_schema(text):
            return SchemaVerdict("refused")
        return SchemaVerdict(
            "unknown",
            f"{shown}: the json_schema probe answered {exc.status_code}: {text}",
        )
    except openai.APIError as exc:
        text = scrub_known(" ".join(str(exc).split()))[:200]
        return SchemaVerdict("unknown", f"{shown}: no answer to the json_schema probe: {text}")
    finally:
        client.close()
    content = ""
    if reply.choices and reply.choices[0].message is not None:
        content = reply.choices[0].message.content or ""
    try:
        value = json.loads(strip_fence(content))
    except ValueError:
        value = None
    if value == EXPECTED:
        return SchemaVerdict("honoured")
    got = scrub_known(" ".join(content.split()))[:80]
    return SchemaVerdict(
        "ignored",
        f"{shown}: the server ignores the json_schema response format (asked for "
        f"{json.dumps(EXPECTED)} by schema, got {got!r}): structured replies would be "
        "refused and re-asked; use a server that enforces it, or structured_output = "
        '"json_object" in the profile (docs/configuration.md "LLM profiles")',
    )
