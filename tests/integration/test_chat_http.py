"""The LLM transport's HTTP client (adapters/llm/chat_http.py) against loopback servers.

Kept-alive connections are reused, an idle connection the server closed is dropped
before it is used (the request is not lost or failed), error answers carry their body
and headers, timeouts and refused connections are typed, and the environment's proxy
is used (docs/internals.md "The LLM runtime").
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from runjournal.adapters.llm import chat_http

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]
    close_after: bool = False
    status: int = 200
    extra: dict[str, str] = {}

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self.seen.append(
            {
                "port": self.client_address[1],
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "proxy_auth": self.headers.get("Proxy-Authorization"),
                "body": body,
            }
        )
        answer = json.dumps(
            {"error": {"message": "slow down"}} if self.status >= 400 else {"ok": 1}
        )
        data = answer.encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in self.extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if self.close_after:  # closes without saying so: the client's idle one goes stale
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    closed: threading.Semaphore  # released once per connection the server has closed

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self.closed.release()


@pytest.fixture
def server() -> Iterator[tuple[_Server, type[_Handler]]]:
    handler = type("H", (_Handler,), {"seen": []})
    httpd = _Server(("127.0.0.1", 0), handler)
    httpd.closed = threading.Semaphore(0)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd, handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _client(httpd: _Server, path: str = "/v1", **kw: Any) -> chat_http.ChatClient:
    port = httpd.server_address[1]
    options = {"connect_timeout": 2.0, "read_timeout": 5.0, **kw}
    return chat_http.ChatClient(base_url=f"http://127.0.0.1:{port}{path}", api_key="k", **options)


def _post(client: chat_http.ChatClient) -> Any:
    with client.post_chat(BODY) as response:
        assert response.status_code == 200
        return json.loads(b"".join(response.iter_bytes()))


def test_requests_reuse_one_kept_alive_connection(server: Any) -> None:
    httpd, handler = server
    client = _client(httpd)
    try:
        assert [_post(client) for _ in range(3)] == [{"ok": 1}] * 3
    finally:
        client.close()
    assert len({s["port"] for s in handler.seen}) == 1  # one connection for the three
    assert {s["path"] for s in handler.seen} == {"/v1/chat/completions"}
    assert {s["auth"] for s in handler.seen} == {"Bearer k"}
    assert handler.seen[0]["body"] == BODY


def test_an_idle_connection_the_server_closed_is_not_used(server: Any) -> None:
    httpd, handler = server
    handler.close_after = True
    client = _client(httpd)
    try:
        for _ in range(3):  # each would fail (RemoteDisconnected) on the stale connection
            assert _post(client) == {"ok": 1}
            httpd.closed.acquire()  # the server has closed it: the pooled one is stale
    finally:
        client.close()
    assert len(handler.seen) == 3  # every request sent once, on its own connection
    assert len({s["port"] for s in handler.seen}) == 3


def test_an_error_answer_carries_its_body_and_headers(server: Any) -> None:
    httpd, handler = server
    handler.status = 429
    handler.extra = {"Retry-After": "3"}
    client = _client(httpd)
    try:
        with pytest.raises(chat_http.StatusError) as caught, client.post_chat(BODY):
            pass
    finally:
        client.close()
    assert caught.value.status_code == 429
    assert caught.value.body == {"error": {"message": "slow down"}}
    assert caught.value.headers["retry-after"] == "3"


def test_a_server_that_does_not_answer_is_a_timeout() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # accepts (the kernel does), never answers
    try:
        port = listener.getsockname()[1]
        client = chat_http.ChatClient(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="k",
            connect_timeout=2.0,
            read_timeout=0.2,
        )
        with pytest.raises(chat_http.RequestTimeout), client.post_chat(BODY):
            pass
        client.close()
    finally:
        listener.close()


def test_a_refused_connection_is_a_connection_failure() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    client = chat_http.ChatClient(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="k", connect_timeout=2, read_timeout=2
    )
    with pytest.raises(chat_http.ConnectionFailure) as caught, client.post_chat(BODY):
        pass
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


def test_a_plain_http_proxy_from_the_environment_gets_the_full_url(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    httpd, handler = server  # stands in for the proxy: it answers what it is sent
    proxy = f"http://user:secret@127.0.0.1:{httpd.server_address[1]}"
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    client = chat_http.ChatClient(
        base_url="http://models.example:8000/v1", api_key="k", connect_timeout=2, read_timeout=5
    )
    try:
        assert _post(client) == {"ok": 1}
    finally:
        client.close()
    assert handler.seen[0]["path"] == "http://models.example:8000/v1/chat/completions"
    assert handler.seen[0]["proxy_auth"] == "Basic dXNlcjpzZWNyZXQ="  # user:secret


def test_no_proxy_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "models.example")
    monkeypatch.setenv("no_proxy", "models.example")
    assert chat_http._proxy_for("https", "models.example") is None
    assert chat_http._proxy_for("https", "api.other.example") == ("proxy.example", 3128, {})


def test_a_base_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        chat_http.ChatClient(base_url="ftp://x/v1", api_key="k", connect_timeout=1, read_timeout=1)
