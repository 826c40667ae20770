"""The providers' batch endpoints, through their official clients (adapters/llm/batch.py).

- OpenAI Files + Batches: the requests are a JSONL file uploaded with purpose `batch`,
  the batch names it (`completion_window` 24h, our metadata naming the request set);
  results are its output file (`response.status_code`, `response.body`) and error file
  (`error.code` `batch_expired`, or an error response).
- Anthropic Message Batches: the requests go inline (`custom_id`, `params`: the Messages
  request), ordered by system and user prompt so prompts that share a prefix are
  neighbours, each marked `cache_control` where it stops sharing its prefix with another
  of the batch (adapters/llm/anthropic_transport.py); the batch is `in_progress` until
  `ended`; results stream from its `results_url` (`succeeded` with the message,
  `errored`, `expired`, `canceled`). A batch carries no metadata: one whose creation's
  answer was lost is found by its size and its requests' ids among those created since
  (`AnthropicBatchAPI.find`, docs/operations.md "Batch runs").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runjournal.adapters.llm.anthropic_transport import prompt_parts
from runjournal.domain.llm import AttemptStatus
from runjournal.domain.prompt_cache import SharedPrefixes

__all__ = ["AnthropicBatchAPI", "BatchState", "OpenAIBatchAPI", "Result", "api_for"]

OPENAI_ENDPOINT = "/v1/chat/completions"
METADATA_KEY = "runjournal_set"


@dataclass(frozen=True)
class BatchState:
    batch_id: str
    status: str
    total: int
    completed: int
    failed: int
    ended: bool
    raw: Any = None
    why: str = ""  # a failed batch's first reason

    def seen(self) -> tuple[str, int, int, int]:
        return self.status, self.total, self.completed, self.failed


@dataclass(frozen=True)
class Result:
    custom_id: str
    outcome: str  # ok | error | expired
    body: Any = None  # ok: the provider's reply (chat completion or message)
    status: AttemptStatus = AttemptStatus.SERVER_ERROR
    detail: str = ""


def _status_of(code: Any) -> AttemptStatus:
    if code in (401, 403):
        return AttemptStatus.AUTH_FAILED
    if code == 429:
        return AttemptStatus.RATE_LIMITED
    if isinstance(code, int) and code >= 500:
        return AttemptStatus.SERVER_ERROR
    return AttemptStatus.REQUEST_REFUSED


class OpenAIBatchAPI:
    uploads = True
    mark_bytes = 0  # what marking the cache adds to a line

    def lines(self, tickets: list[Any], transport: Any) -> list[bytes]:
        """The batch's lines, in the order the requests came (OpenAI caches by itself)."""
        return [self.line(t, transport) for t in tickets]

    def line(self, ticket: Any, transport: Any) -> bytes:
        doc = {
            "custom_id": ticket.key,
            "method": "POST",
            "url": OPENAI_ENDPOINT,
            "body": ticket.request,
        }
        return json.dumps(doc, sort_keys=True, ensure_ascii=False).encode() + b"\n"

    def upload(self, client: Any, name: str, data: bytes) -> str:
        return client.files.create(file=(name, data), purpose="batch").id

    def create(self, client: Any, record: Any, data: bytes) -> tuple[str, str]:
        batch = client.batches.create(
            input_file_id=record.file_id,
            endpoint=OPENAI_ENDPOINT,
            completion_window="24h",
            metadata={METADATA_KEY: record.local},
        )
        return batch.id, batch.status

    def find(self, client: Any, record: Any, claimed: set[str]) -> tuple[str, str] | None:
        """The batch our metadata names (its creation's answer was lost)."""
        for batch in client.batches.list(limit=100):
            if (batch.metadata or {}).get(METADATA_KEY) == record.local:
                return batch.id, batch.status
        return None

    def retrieve(self, client: Any, batch_id: str) -> BatchState:
        batch = client.batches.retrieve(batch_id)
        counts = batch.request_counts
        why = ""
        errors = getattr(getattr(batch, "errors", None), "data", None) or []
        if errors:
            first = errors[0]
            line = f" line {first.line}" if getattr(first, "line", None) else ""
            why = f"{first.code or 'error'}{line}: {first.message or ''}"
        return BatchState(
            batch_id=batch.id,
            status=batch.status,
            total=counts.total if counts else 0,
            completed=counts.completed if counts else 0,
            failed=counts.failed if counts else 0,
            ended=batch.status in ("completed", "failed", "expired", "cancelled"),
            raw=batch,
            why=why,
        )

    def results(self, client: Any, state: BatchState) -> Iterator[Result]:
        """The output file's results, then the error file's (fetched only once the
        output's were taken: a kill in between keeps what was stored)."""
        batch = state.raw
        for line in self._lines(client, batch.output_file_id):
            response = line.get("response") or {}
            if response.get("status_code") == 200:
                yield Result(str(line.get("custom_id")), "ok", body=response.get("body"))
        for line in self._lines(client, batch.error_file_id):
            error = line.get("error") or {}
            response = line.get("response") or {}
            custom = str(line.get("custom_id"))
            if error.get("code") in ("batch_expired", "batch_cancelled"):
                yield Result(custom, "expired", detail=str(error.get("code")))
                continue
            code = response.get("status_code")
            yield Result(
                custom,
                "error",
                status=_status_of(code),
                detail=f"answered HTTP {code} for this request",
            )

    def _lines(self, client: Any, file_id: str | None) -> list[dict[str, Any]]:
        if not file_id:
            return []
        out = []
        for raw in client.files.content(file_id).content.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                out.append(line)
        return out


# how far the provider's clock may be behind ours when a lost batch is looked for
CLOCK_SKEW_S = 600.0
_ANTHROPIC_RETRYABLE = ("api_error", "overloaded_error", "rate_limit_error", "timeout_error")


class AnthropicBatchAPI:
    uploads = False
    # a user prompt cut in two marked blocks: at most this much longer than unmarked
    mark_bytes = 128

    def lines(self, tickets: list[Any], transport: Any) -> list[bytes]:
        """The batch's lines ordered by system and user prompt (then key), each marked
        for the cache at the prefix it shares with another prompt of the batch."""
        parts = [(prompt_parts(t.request), t) for t in tickets]
        seen: dict[str, SharedPrefixes] = {}
        for (system, prompt), _ in parts:
            seen.setdefault(system, SharedPrefixes()).add(prompt)
        out = []
        for (system, prompt), ticket in sorted(parts, key=lambda p: (*p[0], p[1].key)):
            shared = seen[system].shared(prompt)
            params = transport.payload(ticket.request, shared=shared)
            doc = {"custom_id": ticket.key, "params": params}
            out.append(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode() + b"\n")
        return out

    def line(self, ticket: Any, transport: Any) -> bytes:
        """One request's line, unmarked (its size, to split batches)."""
        doc = {"custom_id": ticket.key, "params": transport.payload(ticket.request, shared=0)}
        return json.dumps(doc, sort_keys=True, ensure_ascii=False).encode() + b"\n"

    def upload(self, client: Any, name: str, data: bytes) -> str:  # pragma: no cover
        raise NotImplementedError("message batches take their requests inline")

    def create(self, client: Any, record: Any, data: bytes) -> tuple[str, str]:
        requests = [json.loads(line) for line in data.splitlines() if line]
        batch = client.messages.batches.create(requests=requests)
        return batch.id, batch.processing_status

    def find(self, client: Any, record: Any, claimed: set[str]) -> tuple[str, str] | None:
        """The message batch a lost creation made: a message batch carries no metadata,
        so it is looked for among those created since the creation was asked (less
        `CLOCK_SKEW_S`), newest first, that no record claims and that hold as many
        requests as the record. One that has ended is ours only if its results' ids are
        the record's keys; of those still in progress (their requests cannot be read)
        the oldest is followed: if it is another's after all, it ends without our
        results and they are submitted again in the follow-up round, never paid twice
        (docs/operations.md "Batch runs")."""
        since = record.submitting_at
        if since is None:
            return None
        since -= CLOCK_SKEW_S
        keys = set(record.keys)
        running: tuple[str, str] | None = None
        for batch in client.messages.batches.list(limit=100):
            created = batch.created_at.timestamp()
            if created < since:
                break  # newest first: the rest are older
            if batch.id in claimed:
                continue
            c = batch.request_counts
            total = c.processing + c.succeeded + c.errored + c.expired + c.canceled
            if total != len(keys):
                continue
            if batch.processing_status != "ended":
                running = (batch.id, batch.processing_status)
                continue
            ids = {item.custom_id for item in client.messages.batches.results(batch.id)}
            if ids == keys:
                return batch.id, batch.processing_status
        return running

    def retrieve(self, client: Any, batch_id: str) -> BatchState:
        batch = client.messages.batches.retrieve(batch_id)
        c = batch.request_counts
        failed = c.errored + c.expired + c.canceled
        return BatchState(
            batch_id=batch.id,
            status=batch.processing_status,
            total=c.processing + c.succeeded + failed,
            completed=c.succeeded,
            failed=failed,
            ended=batch.processing_status == "ended",
            raw=batch,
        )

    def results(self, client: Any, state: BatchState) -> Iterator[Result]:
        """The results as they stream from the batch's `results_url`."""
        for item in client.messages.batches.results(state.batch_id):
            result = item.result
            kind = result.type
            if kind == "succeeded":
                body = result.message.model_dump(mode="json")
                yield Result(item.custom_id, "ok", body=body)
            elif kind in ("expired", "canceled"):
                yield Result(item.custom_id, "expired", detail=kind)
            else:
                error = getattr(getattr(result, "error", None), "error", None)
                etype = str(getattr(error, "type", "api_error"))
                status = (
                    AttemptStatus.SERVER_ERROR
                    if etype in _ANTHROPIC_RETRYABLE
                    else AttemptStatus.REQUEST_REFUSED
                )
                yield Result(item.custom_id, "error", status=status, detail=etype)


def api_for(provider: str) -> OpenAIBatchAPI | AnthropicBatchAPI:
    return AnthropicBatchAPI() if provider == "anthropic" else OpenAIBatchAPI()
