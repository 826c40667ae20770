"""One chat-completion request to an OpenAI-compatible endpoint, through the `openai` client.

The client is created once per endpoint and reused by every call (its HTTP connection
pool is thread-safe), with the client's own retries off: the runtime retries, so every
attempt is journaled. `openai` is imported only when the first request is sent (start-up
time is measured). Every failure becomes a `TransportError` with a typed status; its
message names the endpoint and the HTTP status, never the key, a header or the request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from runjournal.adapters.llm.cassette import Reply
from runjournal.adapters.llm.retry import parse_retry_after
from runjournal.domain.llm import AttemptStatus

_SERVER_MESSAGE_LIMIT = 200


class TransportError(Exception):
    def __init__(
        self,
        status: AttemptStatus,
        message: str,
        *,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after


def _server_message(body: Any) -> str:
    """A short account of an error body (its `message`, else its start)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            text = inner["message"]
        else:
            text = str(inner)
    elif body is None:
        text = ""
    else:
        text = str(body)
    text = " ".join(text.split())
    return text[:_SERVER_MESSAGE_LIMIT]


def _status_of_http(code: int) -> AttemptStatus:
    if code in (401, 403):
        return AttemptStatus.AUTH_FAILED
    if code == 429:
        return AttemptStatus.RATE_LIMITED
    if code == 408:
        return AttemptStatus.TIMEOUT
    if code >= 500:
        return AttemptStatus.SERVER_ERROR
    return AttemptStatus.REQUEST_REFUSED


class OpenAITransport:
    """Sends requests to one endpoint; `scrub` removes the key from any text it returns."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        connect_timeout: float,
        read_timeout: float,
        scrub: Callable[[str], str],
        shown_endpoint: str,
    ) -> None:
        self._base_url = base_url
        self._api_key = api_key
        self._connect = connect_timeout
        self._read = read_timeout
        self._scrub = scrub
        self.endpoint = shown_endpoint
        self._client: Any = None
        self._lock = threading.Lock()

    def connect(self) -> None:
        """Build the client now (the import is not part of any attempt's latency)."""
        self._get_client()

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai  # lazy: about 0.8 s of imports, paid only by runs that call

                self._openai = openai
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    max_retries=0,
                    timeout=openai.Timeout(self._read, connect=self._connect),
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def send(self, request: dict[str, Any]) -> tuple[Reply, int]:
        """One attempt; returns the reply and the HTTP status, or raises TransportError."""
        client = self._get_client()
        openai = self._openai
        body = {k: v for k, v in request.items() if k not in ("model", "messages")}
        http_status: int | None = None
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=request["model"], messages=request["messages"], extra_body=body
            )
            http_status = int(raw.http_response.status_code)
            completion = raw.parse()
        except openai.APIStatusError as exc:
            code = int(exc.status_code)
            status = _status_of_http(code)
            detail = self._scrub(_server_message(exc.body))
            raise TransportError(
                status,
                f"{self.endpoint} answered HTTP {code}" + (f": {detail}" if detail else ""),
                http_status=code,
                retry_after=parse_retry_after(dict(exc.response.headers)),
            ) from None
        except openai.APITimeoutError:
            raise TransportError(
                AttemptStatus.TIMEOUT,
                f"{self.endpoint} did not answer within the timeouts "
                f"(connect {self._connect:g} s, read {self._read:g} s)",
            ) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc.__context__
            why = type(cause).__name__ if cause is not None else "connection error"
            raise TransportError(
                AttemptStatus.CONNECTION_ERROR, f"cannot reach {self.endpoint} ({why})"
            ) from None
        except (openai.APIResponseValidationError, ValueError, TypeError, KeyError) as exc:
            raise TransportError(
                AttemptStatus.MALFORMED_RESPONSE,
                f"{self.endpoint} sent a response that is not a chat completion "
                f"({type(exc).__name__})",
                http_status=http_status,
            ) from None
        return self._reply(completion), http_status

    def _reply(self, completion: Any) -> Reply:
        try:
            choice = completion.choices[0]
            content = choice.message.content
        except (AttributeError, IndexError, TypeError):
            content = None
            choice = None
        if not isinstance(content, str):
            raise TransportError(
                AttemptStatus.MALFORMED_RESPONSE,
                f"{self.endpoint} sent a completion without message content",
                http_status=200,
            )
        usage = getattr(completion, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        done = getattr(usage, "completion_tokens", None)
        return Reply(
            content=content,
            prompt_tokens=prompt if isinstance(prompt, int) else -1,
            completion_tokens=done if isinstance(done, int) else -1,
            finish_reason=getattr(choice, "finish_reason", None),
        )
