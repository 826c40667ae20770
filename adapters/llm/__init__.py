"""The LLM runtime (docs/internals.md "The LLM runtime").

`client_options` (how a profile's endpoint is called), `reply_formats` (reply formats and their
check), `retry` (backoff, Retry-After), `ratelimit` (per-endpoint limits), `budget`
(`--max-cost`, `--max-tokens`), `cassette` (record/replay), `transport` (one request
through the `openai` client) and `runtime` (`LLMServices`, metered calls).
"""

from __future__ import annotations
