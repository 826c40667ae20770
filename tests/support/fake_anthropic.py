"""A fake Anthropic Messages API server, on loopback only (the native provider's tests).

    python tests/support/fake_anthropic.py --port 0 [--api-key-env VAR]

It prints `listening http://127.0.0.1:PORT`, then serves until SIGTERM. `POST /v1/messages`
as the API reference describes it (the official `anthropic` client talks to it unchanged;
tests/integration/test_fake_anthropic.py checks that): the key (`x-api-key`, or a bearer
token as newer clients send it), the `anthropic-version` header, `model`, `max_tokens`
(required), `messages`, `system` (a string or text blocks, `cache_control` on a block),
`tools` and `tool_choice`. The answer is a `message`: with a forced tool, one `tool_use`
block whose `input` is the simplest instance of the tool's `input_schema` (words of the
prompt in its strings, as `fake_openai.py` answers a `json_schema`), `stop_reason`
`tool_use`; otherwise a `text` block (`{"echo": N}`, or the prompt's `REPLY:` line),
`end_turn`. A token is a word. `GET /v1/models` lists `claude-fake`.

Prompt caching as the reference describes it: a system block marked `cache_control`
of at least 1,024 tokens is written to the cache the first time
(`cache_creation_input_tokens`) and read from it afterwards (`cache_read_input_tokens`);
`input_tokens` counts the rest. `GET /_control/requests` lists what it received (model,
whether the system prompt was marked for the cache, the tool choice).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

if __package__ in (None, ""):  # run as a script: `fake_openai` is a sibling file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fake_openai as base  # type: ignore[import-not-found]
else:
    from . import fake_openai as base

CACHE_MIN = 1024


class _State:
    def __init__(self, api_key: str | None) -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self.cached: set[str] = set()
        self.log: list[dict[str, Any]] = []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


class _Handler(BaseHTTPRequestHandler):
    server_version = "fake-anthropic/1"
    protocol_version = "HTTP/1.1"
    state: _State

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _json(self, code: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("request-id", "req_fake")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, kind: str, message: str) -> None:
        self._json(code, {"type": "error", "error": {"type": kind, "message": message}})

    def do_GET(self) -> None:
        if self.path == "/_control/requests":
            with self.state.lock:
                self._json(200, {"requests": list(self.state.log)})
            return
        if self.path.split("?")[0] == "/v1/models":
            model = {
                "id": "claude-fake",
                "type": "model",
                "display_name": "Claude (fake)",
                "created_at": "2026-01-01T00:00:00Z",
            }
            page = {"data": [model], "has_more": False, "first_id": "claude-fake"}
            self._json(200, {**page, "last_id": "claude-fake"})
            return
        self._error(404, "not_found_error", "not found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path != "/v1/messages":
            self._error(404, "not_found_error", "not found")
            return
        state = self.state
        given = self.headers.get("x-api-key"), self.headers.get("Authorization")
        if state.api_key is not None and given not in (
            (state.api_key, None),
            (None, f"Bearer {state.api_key}"),
        ):
            self._error(401, "authentication_error", "invalid x-api-key")
            return
        if not self.headers.get("anthropic-version"):
            self._error(400, "invalid_request_error", "anthropic-version header is required")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "invalid_request_error", "body is not JSON")
            return
        problem = self._problem(body)
        if problem:
            self._error(400, "invalid_request_error", problem)
            return
        self._json(200, self._answer(body))

    @staticmethod
    def _problem(body: Any) -> str | None:
        if not isinstance(body, dict):
            return "body must be an object"
        for key in ("model", "max_tokens", "messages"):
            if key not in body:
                return f"{key}: Field required"
        allowed = {
            "model", "max_tokens", "messages", "system", "temperature", "top_p", "top_k",
            "stop_sequences", "metadata", "tools", "tool_choice", "stream",
        }  # fmt: skip
        extra = sorted(set(body) - allowed)
        if extra:
            return f"{extra[0]}: Extra inputs are not permitted"
        for message in body["messages"]:
            if message.get("role") not in ("user", "assistant"):
                return "messages: roles must be user or assistant"
        return None

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        state = self.state
        system = body.get("system")
        blocks = system if isinstance(system, list) else []
        marked = any(isinstance(b, dict) and b.get("cache_control") for b in blocks)
        system_text = _text(system)
        system_words = len(base._words(system_text))
        users = [m for m in body["messages"] if m.get("role") == "user"]
        first = _text(users[0].get("content")) if users else ""
        rest_words = sum(len(base._words(_text(m.get("content")))) for m in body["messages"])
        written = read = 0
        key = hashlib.sha256(system_text.encode()).hexdigest()
        with state.lock:
            if marked and system_words >= CACHE_MIN:
                if key in state.cached:
                    read = system_words
                else:
                    state.cached.add(key)
                    written = system_words
            fresh = rest_words + system_words - read - written
            choice = body.get("tool_choice") or {}
            state.log.append(
                {
                    "model": body.get("model"),
                    "cache_marked": marked,
                    "tool_choice": choice,
                    "tools": [t.get("name") for t in body.get("tools") or []],
                    "max_tokens": body.get("max_tokens"),
                }
            )
        words = base._words(first)
        tools = {t.get("name"): t for t in body.get("tools") or []}
        if choice.get("type") == "tool" and choice.get("name") in tools:
            schema = tools[choice["name"]].get("input_schema") or {}
            value = base.sample(schema, schema, words)
            content = [
                {"type": "tool_use", "id": "toolu_fake", "name": choice["name"], "input": value}
            ]
            stop, out = "tool_use", len(base._words(json.dumps(value))) + 1
        else:
            reply = base._REPLY.search(first)
            text = reply.group("text") if reply else json.dumps({"echo": len(words)})
            content = [{"type": "text", "text": text}]
            stop, out = "end_turn", len(base._words(text)) + 1
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": fresh,
                "output_tokens": out,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
            },
        }


class FakeAnthropic:
    """The server in a background thread of this process (`url`, `stop()`)."""

    def __init__(self, *, port: int = 0, api_key: str | None = None) -> None:
        self.state = _State(api_key)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = base._Server(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeAnthropic:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key-env", default=None, help="require the key in this var")
    args = parser.parse_args(argv)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    server = FakeAnthropic(port=args.port, api_key=key)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"listening {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
