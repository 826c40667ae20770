"""One chat-completion request to an OpenAI-compatible endpoint, through the `openai` client.

The endpoint's clients are built on first use and reused by every call after, with the
client's own retries off: the runtime retries, so every attempt is journaled. Each
calling thread gets a client of its own (the same key, URL and timeouts, the first
client's TLS context; past `MAX_CLIENTS` threads they are shared again): a client's
connection pool walks all its connections on every request and again when the reply is
closed, so one client shared by 64 threads cost each request about 1,600 Python function
calls more than a client per thread (docs/performance.md
"Concurrency: `--jobs N` against an LLM endpoint"). `openai` is imported only when the
first request is sent (start-up time is measured). Every failure becomes a
`TransportError` with a typed status; its message names the endpoint and the HTTP status,
never the key, a header or the request.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from runjournal.adapters.llm.cassette import Reply
from runjournal.adapters.llm.replies import (
    AttemptDeadline,
    BodyTooLarge,
    read_bounded,
    refuses_schema,
    usage_problem,
)
from runjournal.adapters.llm.retry import parse_retry_after
from runjournal.domain.llm import AttemptStatus

_SERVER_MESSAGE_LIMIT = 200
# Calling threads per client (each thread keeps its client; see the module docstring), and
# how many clients one endpoint has at most (threads past that share them again).
THREADS_PER_CLIENT = 1
MAX_CLIENTS = 64


class TransportError(Exception):
    def __init__(
        self,
        status: AttemptStatus,
        message: str,
        *,
        http_status: int | None = None,
        retry_after: float | None = None,
        schema_refused: bool = False,
    ) -> None:
        super().__init__(message)
        self.schema_refused = schema_refused  # a 4xx blaming the response format
        self.status = status
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after


def _server_message(body: Any, scrub: Callable[[str], str]) -> str:
    """A short account of an error body (its `message`, else its start), scrubbed of
    every secret the process holds *before* it is cut: a cut secret is not found."""
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
    text = " ".join(scrub(text).split())
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


def _tls_context(client: Any) -> Any:
    """The TLS context the client's HTTP library built (None where it cannot be found:
    each further client would load the CA bundle again, so the threads share one)."""
    pool = getattr(getattr(getattr(client, "_client", None), "_transport", None), "_pool", None)
    return getattr(pool, "_ssl_context", None)


class OpenAITransport:
    """Sends requests to one endpoint; `scrub` removes every secret the process holds
    from any text the endpoint sent, as it arrives (reply content, error text)."""

    PATH = "/chat/completions"  # relative to the client's base URL

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
        self._httpx_response: Any = None
        self._lock = threading.Lock()
        self._clients: list[Any] = []  # the calling threads' clients; [0] is `_client`
        self._threads = 0  # calling threads seen (each one's client is chosen once)
        self._generation = 0  # bumped by `close`: threads then choose again
        self._local = threading.local()
        self._headers: dict[str, Any] = {"X-Stainless-Raw-Response": "stream"}
        self._tls: Any = None  # the first client's TLS context, which the others share
        self._template: Any = None  # the request options each send copies
        self.clients_built = 0  # clients this transport created (tests count them)

    def connect(self) -> None:
        """Build the client now (the import is not part of any attempt's latency)."""
        self._get_client()

    def _thread_client(self) -> Any:
        """The calling thread's client: chosen on its first request, kept after."""
        local = self._local
        if getattr(local, "generation", -1) == self._generation and local.client is not None:
            return local.client
        first = self._get_client()
        with self._lock:
            slot = (self._threads // THREADS_PER_CLIENT) % MAX_CLIENTS
            self._threads += 1
            if self._client is None:  # closed meanwhile
                return first
            if self._tls is None:  # no TLS context to share: one client for all threads
                slot = 0
            while len(self._clients) <= slot:
                self._clients.append(self._build(tls=self._tls))
            client = self._clients[slot]
            local.generation, local.client = self._generation, client
        return client

    def _get_client(self) -> Any:
        client = self._client  # built once: the lock only while it is not (or closed)
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                sdk, client_class = self._sdk()
                self._openai = sdk  # the SDK module: its exception classes
                # the Response type of the HTTP library the client is built on: what its
                # `post` returns unparsed
                http_lib = importlib.import_module(
                    sdk.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0]
                )
                self._httpx_response = http_lib.Response
                self._client_class = client_class
                self._client = self._build(tls=None)
                self._clients = [self._client]
                self._tls = _tls_context(self._client)
                self._headers = self._request_headers(self._client)
                self._template = self._options_template(sdk)
            return self._client

    def _request_headers(self, client: Any) -> dict[str, Any]:
        """Each request's own headers: the raw-response header (the body stays streamed)
        and, where the client lets a header be omitted, none of its `X-Stainless-*`
        telemetry (platform, runtime, retry count, read timeout): about 350 fewer Python
        function calls a request (docs/performance.md "Concurrency: `--jobs N` against an
        LLM endpoint"). What the endpoint needs (key, content type, version) is kept."""
        omit_class = getattr(self._openai, "Omit", None)
        headers: dict[str, Any] = {}
        if omit_class is not None:
            names = [*client.default_headers, "X-Stainless-Retry-Count", "X-Stainless-Read-Timeout"]
            for name in names:
                if name.lower().startswith("x-stainless-"):
                    headers[name] = omit_class()
        headers["X-Stainless-Raw-Response"] = "stream"
        return headers

    def _options_template(self, sdk: Any) -> Any:
        """The request options every send copies with its body (a shallow copy is about
        18 Python calls; building them anew, what the client's `post` does, about 220);
        None where the client's options class is not found (then `post` is used)."""
        models = getattr(sdk, "_models", None)
        options_class = getattr(models, "FinalRequestOptions", None)
        if options_class is None or not hasattr(options_class, "model_copy"):
            return None
        # the endpoint's full URL, as the client would join it to its base URL: joining
        # and parsing it again cost about 220 calls a request (kept relative when the base
        # URL carries a query, which the client's join keeps in its own way)
        base = self._client.base_url
        url = self.PATH if base.query else str(base).rstrip("/") + self.PATH
        return options_class.construct(
            method="post", url=url, headers=self._headers, json_data=None
        )

    def _build(self, *, tls: Any) -> Any:
        """One client of this endpoint; a further one reuses the first's TLS context
        (building one loads the CA bundle: about 18 ms of CPU)."""
        sdk = self._openai
        extra: dict[str, Any] = {}
        if tls is not None:
            extra["http_client"] = sdk.DefaultHttpxClient(verify=tls)
        self.clients_built += 1
        return self._client_class(
            api_key=self._api_key,
            base_url=self._base_url,
            max_retries=0,
            timeout=sdk.Timeout(self._read, connect=self._connect),
            **extra,
        )

    def _sdk(self) -> tuple[Any, Any]:
        """The official client's module and class (imported on first use)."""
        import openai  # lazy: about 0.8 s of imports, paid only by runs that call

        return openai, openai.OpenAI

    def _payload(self, request: dict[str, Any]) -> dict[str, Any]:
        """The body sent for `request` (the runtime's chat-completions form)."""
        return request

    def _reply_of(self, request: dict[str, Any], completion: Any) -> Reply:
        return self._reply(completion)

    def close(self) -> None:
        with self._lock:
            clients, self._clients, self._client = self._clients, [], None
            self._generation += 1
            self._threads = 0
        for client in clients:
            client.close()

    def send(
        self,
        request: dict[str, Any],
        *,
        attempt_timeout: float = 600.0,
        max_reply_bytes: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> tuple[Reply, int]:
        """One attempt; returns the reply and the HTTP status, or raises TransportError.

        The body is read in chunks under the attempt's total deadline and size cap
        (adapters/llm/replies.py), never all at once.
        """
        client = self._thread_client()
        openai = self._openai
        http_status: int | None = None
        deadline = clock() + attempt_timeout
        try:
            # The client's generic POST (its "undocumented endpoints" form) with the request
            # as built, not `chat.completions.create`: the same HTTP layer, retries off,
            # errors and auth, without re-transforming the typed parameters (about 0.5 ms
            # of CPU a call, docs/performance.md
            # "Concurrency: `--jobs N` against an LLM endpoint"). The raw-response header
            # keeps the body streamed, so it is read under the size cap and deadline.
            template = self._template
            if template is not None:  # what `post` does, from a copy of built options
                options = template.model_copy(update={"json_data": self._payload(request)})
                response = client.request(self._httpx_response, options)
            else:
                response = client.post(
                    self.PATH,
                    body=self._payload(request),
                    cast_to=self._httpx_response,
                    options={"headers": dict(self._headers)},
                )
            try:
                http_status = int(response.status_code)
                data = self._body(response, max_reply_bytes, deadline, clock)
            finally:
                response.close()
            completion = json.loads(data)
        except BodyTooLarge as exc:
            raise TransportError(
                AttemptStatus.REPLY_TOO_LARGE,
                f"{self.endpoint} sent a response larger than max_reply_bytes "
                f"{max_reply_bytes} ({exc.args[0]} bytes read or announced)",
                http_status=http_status,
            ) from None
        except AttemptDeadline:
            raise TransportError(
                AttemptStatus.TIMEOUT,
                f"{self.endpoint} did not finish its answer within attempt_timeout "
                f"{attempt_timeout:g} s",
                http_status=http_status,
            ) from None
        except openai.APIStatusError as exc:
            code = int(exc.status_code)
            status = _status_of_http(code)
            detail = _server_message(exc.body, self._scrub)
            raise TransportError(
                status,
                f"{self.endpoint} answered HTTP {code}" + (f": {detail}" if detail else ""),
                http_status=code,
                retry_after=parse_retry_after(dict(exc.response.headers)),
                schema_refused=status is AttemptStatus.REQUEST_REFUSED and refuses_schema(detail),
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
        except (
            openai.APIResponseValidationError,
            ValueError,
            TypeError,
            KeyError,
            RecursionError,
        ) as exc:
            raise TransportError(
                AttemptStatus.MALFORMED_RESPONSE,
                f"{self.endpoint} sent a response that is not a chat completion "
                f"({type(exc).__name__})",
                http_status=http_status,
            ) from None
        return self._reply_of(request, completion), http_status

    # --- the batch endpoints (adapters/llm/batch.py) -------------------------------------

    def client(self) -> Any:
        """The endpoint's `openai` client (files and batches calls of a batch run)."""
        return self._get_client()

    def parse(self, completion: Any, request: dict[str, Any] | None = None) -> Reply:
        """A reply read as an online one is (a batch result's body), for `request`."""
        return self._reply_of(request or {}, completion)

    def payload(self, request: dict[str, Any]) -> dict[str, Any]:
        """What is sent for `request` (a batch's line holds it)."""
        return self._payload(request)

    def remote(self, call: Callable[[], Any]) -> Any:
        """One files or batches call; the client's errors typed as an attempt's are."""
        self._get_client()
        openai = self._openai
        try:
            return call()
        except openai.APIStatusError as exc:
            code = int(exc.status_code)
            detail = _server_message(exc.body, self._scrub)
            raise TransportError(
                _status_of_http(code),
                f"{self.endpoint} answered HTTP {code}" + (f": {detail}" if detail else ""),
                http_status=code,
                retry_after=parse_retry_after(dict(exc.response.headers)),
            ) from None
        except openai.APITimeoutError:
            raise TransportError(
                AttemptStatus.TIMEOUT, f"{self.endpoint} did not answer within the timeouts"
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
                f"{self.endpoint} sent a batch response that could not be read "
                f"({type(exc).__name__})",
            ) from None

    def _body(
        self, response: Any, limit: int, deadline: float, clock: Callable[[], float]
    ) -> bytes:
        """The body under the size cap and deadline; the HTTP library's errors typed."""
        try:
            return read_bounded(
                response.iter_bytes(),
                limit=limit,
                deadline=deadline,
                clock=clock,
                declared=response.headers.get("content-length"),
            )
        except (BodyTooLarge, AttemptDeadline):
            raise
        except Exception as exc:  # the client's HTTP library, raised while the body streams
            name = type(exc).__name__
            timeout = "Timeout" in name
            raise TransportError(
                AttemptStatus.TIMEOUT if timeout else AttemptStatus.CONNECTION_ERROR,
                f"{self.endpoint} broke off its answer ({name})"
                if not timeout
                else f"{self.endpoint} stopped sending its answer (read {self._read:g} s)",
                http_status=int(response.status_code),
            ) from None

    def _reply(self, completion: Any) -> Reply:
        if not isinstance(completion, dict):
            completion = {}
        try:
            choice = completion["choices"][0]
            content = choice["message"]["content"]
        except (LookupError, TypeError):
            content = None
            choice = None
        if not isinstance(content, str):
            raise TransportError(
                AttemptStatus.MALFORMED_RESPONSE,
                f"{self.endpoint} sent a completion without message content",
                http_status=200,
            )
        usage = completion.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        prompt = usage.get("prompt_tokens")
        done = usage.get("completion_tokens")
        problem = usage_problem(prompt, done)
        if problem is not None:
            raise TransportError(
                AttemptStatus.REPLY_INVALID,
                f"{self.endpoint} sent a completion whose {problem}",
                http_status=200,
            )
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if not isinstance(cached, int) or isinstance(cached, bool) or cached < 0:
            cached = 0  # absent (most servers) or not a count: nothing from the cache
        if isinstance(prompt, int):
            cached = min(cached, prompt)
        return Reply(
            content=self._scrub(content),  # before anything reads, cuts or stores it
            prompt_tokens=prompt if isinstance(prompt, int) else -1,
            completion_tokens=done if isinstance(done, int) else -1,
            finish_reason=finish if isinstance(finish, str) else None,
            cached_tokens=cached,
        )
