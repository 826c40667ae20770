"""A fault-injecting fake OpenAI-compatible chat-completions server, on loopback only.

Start it as a subprocess (what the tests and benchmarks do; stop it by pid):

    python -m tests.support.fake_openai --port 0 [--latency 0.1] [--api-key KEY]
    python tests/support/fake_openai.py --port 0

It prints one line, `listening http://127.0.0.1:PORT/v1`, then serves until SIGTERM.
`FakeOpenAI` runs the same server in a thread when a test wants it in-process.

Answers are deterministic: for a `json_schema` response format, the simplest instance
of the schema with strings taken from the prompt's words; otherwise `{"echo": N}` (the
prompt's word count), or in `json_object` mode the instance of a schema shown in the
system message after "JSON Schema:". Usage counts words. Faults are scripted *in the prompt*, so
concurrent requests stay deterministic: a line `FAULTS: 429@1, 500, ok` in the first
user message makes that prompt's 1st request a 429 with `Retry-After: 1`, its 2nd a
500, and every later one succeed (counted per first-user-message, so re-asks of one
prompt continue its script). Kinds: `ok`, `429[@SECONDS]`, `500`, `502`, `503[@S]`,
`401`, `403`, `400`, `timeout` (answers only after `--hang` seconds), `malformed`
(200 with a body that is not JSON), `nocontent` (a completion without content),
`reset` (the connection is reset), `badjson` (a reply that is not JSON), `badshape`
(JSON that breaks the schema). Hostile kinds: `400schema` (a 400 blaming the
response format), `length` (the reply cut in half, `finish_reason: "length"`),
`tokens30` (`completion_tokens` 10**30), `slowloris` (headers at once, then one body
byte every 0.5 s for `--hang` seconds), `huge` (a 64 MiB body without Content-Length).
`REPLY: text` makes the reply exactly `text`. `--ignore-schema` (`ignore_schema=True`)
makes a server that ignores every response format, as some OpenAI-compatible servers do.

Echo kinds send back the credential the request carried (the bearer token, or for Basic
auth the decoded `user:password`), as a hostile server would (issue #27): `echo400` (a
400 whose message quotes it), `echocut` (a 400 whose message puts it across the
client's 200-character cut), `echosplit` (a 400 with a line break inside it),
`echoauth` (a 400 quoting the whole `Authorization` header, base64 for Basic),
`echojunk` (a reply that is not JSON, the credential late enough to be cut in a
preview), `echocontent` (a valid reply whose every string holds it).

Control endpoints: `GET /_control/requests` (every request: path, model, first prompt,
response format, whether Authorization was sent), `GET /_control/usage` (requests
received, replies sent and the tokens they billed), `POST /_control/reset`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_FAULTS = re.compile(r"^FAULTS:\s*(?P<list>.+)$", re.MULTILINE)
_REPLY = re.compile(r"^REPLY:\s?(?P<text>.*)$", re.MULTILINE)


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9][A-Za-z0-9'.-]*", text)


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    for _ in range(16):
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            target: Any = root
            for part in node["$ref"][2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            node = target
        else:
            break
    return node


def sample(node: Any, root: dict[str, Any], words: list[str], depth: int = 0) -> Any:
    """The simplest instance of a JSON Schema, strings filled with prompt words."""
    node = _resolve(node, root)
    if not isinstance(node, dict) or depth > 12:
        return None
    if "const" in node:
        return node["const"]
    if isinstance(node.get("enum"), list) and node["enum"]:
        return node["enum"][0]
    for combo in ("anyOf", "oneOf", "allOf"):
        if isinstance(node.get(combo), list) and node[combo]:
            options = [o for o in node[combo] if _resolve(o, root).get("type") != "null"]
            return sample((options or node[combo])[0], root, words, depth + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in node):
        props = node.get("properties", {})
        return {name: sample(sub, root, words, depth + 1) for name, sub in props.items()}
    if kind == "array":
        count = max(1, int(node.get("minItems", 1)))
        return [sample(node.get("items", {}), root, words, depth + 1) for _ in range(count)]
    if kind == "string":
        text = " ".join(words[depth : depth + 2]) or "fake"
        low = int(node.get("minLength", 0))
        return text + "x" * max(0, low - len(text))
    if kind == "integer":
        return int(node.get("minimum", 1))
    if kind == "number":
        return float(node.get("minimum", 1))
    if kind == "boolean":
        return True
    return None


def _shown_schema(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """JSON mode: a model that follows a schema written in the system message."""
    for message in messages:
        text = str(message.get("content", ""))
        if message.get("role") == "system" and "JSON Schema:\n" in text:
            with contextlib.suppress(ValueError):
                return json.loads(text.split("JSON Schema:\n", 1)[1])
    return None


def _credential(auth: str | None) -> str:
    """What the `Authorization` header carries: a bearer token, or Basic's `user:password`."""
    scheme, _, value = (auth or "").partition(" ")
    if scheme.lower() == "basic":
        with contextlib.suppress(ValueError):
            return base64.b64decode(value).decode("utf-8", "replace")
    return value or "no-credential"


def _echoed(value: Any, text: str) -> Any:
    """`value` with every string replaced by `text`."""
    if isinstance(value, str):
        return text
    if isinstance(value, dict):
        return {k: _echoed(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_echoed(v, text) for v in value]
    return value


CACHE_MIN = 1024  # prompt tokens (words here) before a prefix is cached, as OpenAI's
CACHE_STEP = 128  # and the increments it caches in


def prompt_cache(seen: set[str], body: dict[str, Any]) -> int:
    """OpenAI-style prompt caching: the longest prefix of this prompt (its messages' words
    in order, in steps of 128 from 1,024) an earlier request had; then this prompt's
    prefixes are remembered. `seen` is the server's (hold its lock)."""
    words: list[str] = []
    for message in body.get("messages") or []:
        words += _words(str(message.get("content", "")))
    cached = 0
    prefixes = []
    for end in range(CACHE_MIN, len(words) + 1, CACHE_STEP):
        key = hashlib.sha256(" ".join(words[:end]).encode()).hexdigest()
        prefixes.append(key)
        if key in seen:
            cached = end
    seen.update(prefixes)
    return cached


def completion(
    body: dict[str, Any],
    *,
    kind: str = "ok",
    auth: str | None = None,
    nth: int = 1,
    cached: int = 0,
) -> dict[str, Any]:
    """The chat completion this server answers `body` with (a reply kind, not a fault):
    the same function serves the online endpoint and the batch fake's output lines, so a
    batch answers byte for byte what the online endpoint does."""
    messages = body.get("messages") or []
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    first = users[0] if users else ""
    key = hashlib.sha256(first.encode()).hexdigest()
    reply = _REPLY.search(first)
    fmt = body.get("response_format") or {}
    words = _words(first)
    if reply:
        content = reply.group("text")
    elif kind == "badjson":
        content = "this is not json"
    elif kind == "echojunk":
        content = "not json; the key I was sent is " + "." * 60 + _credential(auth)
    elif kind == "badshape":
        content = json.dumps({"unexpected": True})
    elif fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        content = json.dumps(sample(schema, schema, words), sort_keys=True)
    elif fmt.get("type") == "json_object" and _shown_schema(messages) is not None:
        schema = _shown_schema(messages) or {}
        content = json.dumps(sample(schema, schema, words), sort_keys=True)
    else:
        content = json.dumps({"echo": len(words)})
    if kind == "echocontent":
        content = json.dumps(_echoed(json.loads(content), f"echo {_credential(auth)}"))
    finish = "stop"
    if kind == "length":
        content, finish = content[: max(1, len(content) // 2)], "length"
    prompt_tokens = sum(len(_words(str(m.get("content", "")))) for m in messages)
    completion_tokens = 10**30 if kind == "tokens30" else len(_words(content)) + 1
    return {
        "id": f"chatcmpl-{key[:12]}-{nth}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model") or "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": min(cached, prompt_tokens)},
        },
    }


def _usage() -> dict[str, int]:
    """What the server was asked and billed: requests received, replies sent (HTTP 200
    with usage), and the tokens those replies reported."""
    return {
        "requests": 0,
        "answered": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,  # of prompt_tokens, served from the prompt cache
    }


def hang_at(handler: BaseHTTPRequestHandler, state: Any, what: str) -> bool:
    """A kill point of the batch fakes: the request's effect stands (the file stored,
    the batch created), but it is never answered while `state.hang_after[what]` is set
    and reached (True: hung), so the client dies not knowing it. `state` has `lock`,
    `seen_kind`, `hang_after` and `hanging` (fake_openai_batch.py, fake_anthropic.py)."""
    with state.lock:
        seen = state.seen_kind.get(what, 0)
        state.seen_kind[what] = seen + 1
        after = state.hang_after.get(what)
        if after is None or seen < after:
            return False
        state.hanging[what] = state.hanging.get(what, 0) + 1
    try:
        for _ in range(6000):  # 5 minutes at most
            with state.lock:
                if what not in state.hang_after:
                    break
            threading.Event().wait(0.05)
    finally:
        with state.lock:
            state.hanging[what] -= 1
    handler.close_connection = True
    return True


class _State:
    def __init__(
        self,
        *,
        latency: float,
        hang: float,
        api_key: str | None,
        echo_auth: bool,
        ignore_schema: bool = False,
    ):
        self.ignore_schema = ignore_schema  # answer as if no response format was asked
        self.latency = latency
        self.hang = hang
        self.api_key = api_key
        self.echo_auth = echo_auth
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.log: list[dict[str, Any]] = []
        self.usage = _usage()
        self.prefixes: set[str] = set()  # prompt prefixes seen (`prompt_cache`)
        # False (`--no-log`): requests are counted, not logged; a bench of a million
        # requests would otherwise hold every prompt in this process
        self.keep_log = True


class _Handler(BaseHTTPRequestHandler):
    server_version = "fake-openai/1"
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as HTTP servers in front of real endpoints set it (uvicorn, nginx's
    # `tcp_nodelay on`): the headers and the body go out as two writes, and with Nagle's
    # algorithm the body waited for the client's delayed ACK of the headers, about 40 ms
    # a reply (docs/performance.md "Concurrency: `--jobs N` against an LLM endpoint").
    disable_nagle_algorithm = True
    state: _State

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    # --- plumbing ----------------------------------------------------------------------

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _json(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(doc).encode(), headers)

    def _error(self, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._json(code, {"error": {"message": message, "type": "fake", "code": code}}, headers)

    def _reset(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            self.connection.close()
        self.close_connection = True

    # --- routes ------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self.path == "/_control/requests":
            with self.state.lock:
                self._json(200, {"requests": list(self.state.log)})
            return
        if self.path == "/_control/usage":
            with self.state.lock:
                self._json(200, dict(self.state.usage))
            return
        if self.path in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
            return
        self._error(404, "not found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path == "/_control/reset":
            with self.state.lock:
                self.state.counts.clear()
                self.state.log.clear()
                self.state.prefixes.clear()
                self.state.usage = _usage()
            self._json(200, {"ok": True})
            return
        if self.path not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, "not found")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "body is not JSON")
            return
        self._chat(body)

    def _chat(self, body: dict[str, Any]) -> None:
        state = self.state
        messages = body.get("messages") or []
        users = [m.get("content", "") for m in messages if m.get("role") == "user"]
        first = users[0] if users else ""
        key = hashlib.sha256(first.encode()).hexdigest()
        auth = self.headers.get("Authorization")
        with state.lock:
            n = state.counts.get(key, 0)
            state.counts[key] = n + 1
            state.usage["requests"] += 1
            if state.keep_log:
                state.log.append(
                    {
                        "path": self.path,
                        "model": body.get("model"),
                        "prompt": first,
                        "messages": len(messages),
                        "response_format": body.get("response_format"),
                        "temperature": body.get("temperature"),
                        "max_tokens": body.get("max_tokens"),
                        "seed": body.get("seed"),
                        "authorization": auth is not None,
                        "nth": n + 1,
                        "client_port": self.client_address[1],  # one per connection
                    }
                )
        if state.latency:
            time.sleep(state.latency)
        if state.api_key is not None and auth != f"Bearer {state.api_key}":
            note = f" (got {auth})" if state.echo_auth else ""
            self._error(401, f"invalid api key{note}")
            return
        faults = _FAULTS.search(first)
        kind = "ok"
        if faults:
            script = [f.strip() for f in faults.group("list").split(",") if f.strip()]
            if n < len(script):
                kind = script[n]
        if self._fault(kind) or self._echo_error(kind, auth):
            return
        if kind in ("slowloris", "huge"):
            self._hostile(kind)
            return
        # a server that ignores every response format answers as if none was asked
        asked = {**body, "response_format": None} if state.ignore_schema else body
        with state.lock:
            cached = prompt_cache(state.prefixes, body)
        doc = completion(asked, kind=kind, auth=auth, nth=n + 1, cached=cached)
        usage = doc["usage"]
        with state.lock:
            state.usage["answered"] += 1
            state.usage["prompt_tokens"] += usage["prompt_tokens"]
            state.usage["completion_tokens"] += usage["completion_tokens"]
            state.usage["cached_tokens"] += usage["prompt_tokens_details"]["cached_tokens"]
        self._json(200, doc)

    def _echo_error(self, kind: str, auth: str | None) -> bool:
        """A 400 whose message carries the request's credential (the echo kinds)."""
        secret = _credential(auth)
        if kind == "echo400":
            message = f"the key {secret} is not allowed to use this model"
        elif kind == "echocut":
            message = "." * (200 - len(secret) // 2) + secret + " was refused"
        elif kind == "echosplit":
            message = f"bad key {secret[:5]}\n{secret[5:]} given"
        elif kind == "echoauth":
            message = f"refused Authorization: {auth}"
        else:
            return False
        self._error(400, message)
        return True

    def _fault(self, kind: str) -> bool:
        """Answer with the fault `kind`; False when the request should be served normally."""
        code, _, after = kind.partition("@")
        headers = {"Retry-After": after} if after else None
        if code == "400schema":
            self._error(400, "response_format json_schema is not supported by this server")
            return True
        if code in ("429", "500", "502", "503", "400", "401", "403"):
            self._error(int(code), f"injected {code}", headers)
            return True
        if code == "timeout":
            time.sleep(self.state.hang)
            self._error(500, "answered too late")
            return True
        if code == "malformed":
            self._send(200, b'{"id": "x", "choices": [')
            return True
        if code == "nocontent":
            self._json(200, {"id": "x", "object": "chat.completion", "choices": []})
            return True
        if code == "reset":
            self._reset()
            return True
        return False

    def _hostile(self, kind: str) -> None:
        """A body that never ends in time (`slowloris`) or never ends small (`huge`)."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            if kind == "slowloris":
                until = time.monotonic() + self.state.hang
                self.wfile.write(b'{"id": "slow", "choices": [')
                while time.monotonic() < until:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.5)
            else:
                block = b" " * 65536
                for _ in range(1024):  # 64 MiB
                    self.wfile.write(block)
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: bench/bench_concurrency.py opens 32
    # connections at once, and a full backlog resets the ones beyond it.
    request_queue_size = 128


class FakeOpenAI:
    """The server in a background thread of this process (`url`, `stop()`)."""

    def __init__(
        self,
        *,
        port: int = 0,
        latency: float = 0.0,
        hang: float = 5.0,
        api_key: str | None = None,
        echo_auth: bool = False,
        ignore_schema: bool = False,
    ) -> None:
        state = _State(
            latency=latency,
            hang=hang,
            api_key=api_key,
            echo_auth=echo_auth,
            ignore_schema=ignore_schema,
        )
        handler = type("Handler", (_Handler,), {"state": state})
        self.state = state
        self.httpd = _Server(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread: threading.Thread | None = None

    def start(self) -> FakeOpenAI:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return list(self.state.log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--hang", type=float, default=5.0, help="seconds a `timeout` fault waits")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--api-key-env", default=None, help="…read from this variable")
    parser.add_argument("--echo-auth", action="store_true", help="echo the header in a 401")
    parser.add_argument(
        "--ignore-schema", action="store_true", help="answer as if no response_format was sent"
    )
    parser.add_argument(
        "--no-log", action="store_true", help="count requests without logging them (benches)"
    )
    args = parser.parse_args(argv)
    key = args.api_key or (os.environ.get(args.api_key_env) if args.api_key_env else None)
    server = FakeOpenAI(
        port=args.port,
        latency=args.latency,
        hang=args.hang,
        api_key=key,
        echo_auth=args.echo_auth,
        ignore_schema=args.ignore_schema,
    )
    server.state.keep_log = not args.no_log
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"listening {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
