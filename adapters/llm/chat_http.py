"""The HTTP client of the LLM transport: POST `{base_url}/chat/completions`, kept-alive.

Built on the standard library's `http.client` (docs/performance.md "Concurrency:
`--jobs N` against an LLM endpoint": the `openai` client spent about 2 ms of CPU on
each request, building typed parameters and going through two HTTP layers; this module
about 0.3 ms). One `ChatClient` per endpoint keeps a pool of idle keep-alive connections
(thread-safe: a connection is used by one request at a time); an idle connection the
server has closed is dropped before it is reused, and a request is never re-sent by this
module (the runtime retries, so every attempt is journaled).

Timeouts: `connect_timeout` for the TCP connect and the TLS handshake, `read_timeout` for
every read after it. `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` from the environment are
honoured (a CONNECT tunnel for https). TLS verifies the server against the system's
certificate store (`ssl.create_default_context`).

Failures are raised as `StatusError` (an HTTP status >= 400, with the parsed error body
and the headers), `RequestTimeout`, `ConnectionFailure` (its `__cause__` is the socket
or protocol error); the body of a 2xx is streamed by the caller (`Response.iter_bytes`).
"""

from __future__ import annotations

import http.client
import json
import select
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

__all__ = [
    "DEFAULT_BASE_URL",
    "ChatClient",
    "ConnectionFailure",
    "RequestTimeout",
    "Response",
    "StatusError",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_CHUNK = 64 * 1024
_ERROR_BODY_LIMIT = 64 * 1024  # what is read of an error body (its message is cut anyway)
_MAX_IDLE = 128  # idle connections kept per endpoint


class StatusError(Exception):
    """The server answered an HTTP status >= 400."""

    def __init__(self, status_code: int, body: Any, headers: dict[str, str]) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.body = body  # the parsed JSON error body, else its text
        self.headers = headers


class RequestTimeout(Exception):
    """Connecting or reading passed its timeout."""


class ConnectionFailure(Exception):
    """The connection could not be made, or broke before the answer's headers."""


class Response:
    """A 2xx answer whose body is still to be read."""

    def __init__(self, raw: http.client.HTTPResponse) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers = raw.headers  # case-insensitive `get`

    def iter_bytes(self) -> Iterator[bytes]:
        """The body in chunks as they arrive (a slow server cannot make one read wait
        for more than one read timeout)."""
        read = self._raw.read1
        while True:
            chunk = read(_CHUNK)
            if not chunk:
                return
            yield chunk


class _Connection(http.client.HTTPConnection):
    read_timeout: float = 600.0

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


class _TLSConnection(http.client.HTTPSConnection):
    read_timeout: float = 600.0

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


class ChatClient:
    """Chat-completion requests to one base URL with one key."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        connect_timeout: float,
        read_timeout: float,
        user_agent: str = "runjournal",
    ) -> None:
        url = urllib.parse.urlsplit((base_url or DEFAULT_BASE_URL).rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._tls = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._tls else 80)
        self._path = f"{url.path}/chat/completions"
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": user_agent,
        }
        self._proxy = _proxy_for(url.scheme, self._host)
        self._target = self._path
        if self._proxy is not None and not self._tls:  # a plain proxy takes the full URL
            self._target = f"http://{self._host}:{self._port}{self._path}"
            self._headers.update(self._proxy[2])
        self._context: ssl.SSLContext | None = None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    # --- connections ---------------------------------------------------------------------

    def _new(self) -> http.client.HTTPConnection:
        host, port = self._host, self._port
        if self._proxy is not None:
            host, port = self._proxy[0], self._proxy[1]
        conn: http.client.HTTPConnection
        if self._tls:
            if self._context is None:
                self._context = ssl.create_default_context()
            conn = _TLSConnection(host, port, timeout=self._connect_timeout, context=self._context)
            if self._proxy is not None:  # TLS through a CONNECT tunnel of the proxy
                conn.set_tunnel(self._host, self._port, headers=self._proxy[2])
        else:
            conn = _Connection(host, port, timeout=self._connect_timeout)
        conn.read_timeout = self._read_timeout  # type: ignore[attr-defined]
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection the server has not closed, or a new one (and whether new)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(), True
            sock = conn.sock
            if sock is not None and not _readable(sock):
                return conn, False
            conn.close()  # closed by the server (or it sent what no request asked for)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- one request ---------------------------------------------------------------------

    @contextmanager
    def post_chat(self, body: dict[str, Any]) -> Iterator[Response]:
        """POST the body; yields the 2xx response (raises StatusError, RequestTimeout,
        ConnectionFailure). The connection is reused only when the body was read whole."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        conn, _ = self._take()
        reusable = False
        try:
            try:
                conn.request("POST", self._target, body=data, headers=self._headers)
                raw = conn.getresponse()
            except TimeoutError as exc:
                raise RequestTimeout(str(exc)) from exc
            except (OSError, http.client.HTTPException) as exc:
                raise ConnectionFailure(type(exc).__name__) from exc
            if raw.status >= 400:
                raise _status_error(raw)
            response = Response(raw)
            yield response
            # read whole: a body of known length is done at 0 left (read1 does not close it)
            reusable = (raw.isclosed() or raw.length == 0) and not raw.will_close
            raw.close()
        finally:
            if reusable:
                self._give_back(conn)
            else:
                conn.close()


def _status_error(raw: http.client.HTTPResponse) -> StatusError:
    """The error answer: its body (at most 64 KiB of it) parsed when it is JSON."""
    headers = {k.lower(): v for k, v in raw.headers.items()}
    try:
        text = raw.read(_ERROR_BODY_LIMIT).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException):
        text = ""
    body: Any = text
    with suppress(ValueError):
        body = json.loads(text)
    return StatusError(int(raw.status), body, headers)


def _readable(sock: Any) -> bool:
    """An idle keep-alive socket that is readable was closed (or is out of step)."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _proxy_for(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """The environment's proxy for this scheme and host: host, port, CONNECT headers."""
    proxies = urllib.request.getproxies()
    url = proxies.get(scheme)
    if not url or urllib.request.proxy_bypass(host):
        return None
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if not parsed.hostname:
        return None
    headers: dict[str, str] = {}
    if parsed.username is not None:
        import base64

        user = urllib.parse.unquote(parsed.username)
        password = urllib.parse.unquote(parsed.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        headers["Proxy-Authorization"] = f"Basic {token}"
    return parsed.hostname, parsed.port or 8080, headers
