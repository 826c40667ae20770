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

Message batches: `POST /v1/messages/batches` (`requests`: `custom_id` and `params`, the
Messages request), `GET /v1/messages/batches[/{id}]`, `GET …/{id}/results` (JSONL:
`succeeded` with the message, `errored`, `expired`), on a test clock that moves `--tick`
seconds at every poll (`POST /_control/clock` moves it too): the requests are answered
evenly over 600 s, the batch `ended` once all are, or 24 h after it was created with the
rest `expired`. A prompt line `BATCH: error` or `BATCH: expire` makes that request error
or never run in its first batch. Kill points as `fake_openai_batch.py`'s: `POST
/_control/hang` `{"what": "create", "after": N}` creates the batch after the first N but
never answers until `{"what": "create"}` lifts it (`GET /_control/hung`). The test clock
starts at the wall clock. `GET /_control/batches` lists the batches and how often
each request was answered (online or in a batch).

Prompt caching as the reference describes it: each block marked `cache_control` (a
system block or a block of a message's content) ends a cacheable prefix (everything
before it and itself, in the order system, messages). Of a request's marked prefixes of
at least 1,024 tokens, the longest one already cached is read
(`cache_read_input_tokens`), the longest one beyond it is written
(`cache_creation_input_tokens`), and all are cached from then on; `input_tokens` counts
the rest. `GET /_control/requests` lists what it received (model, whether the system
prompt and whether a user block were marked for the cache, the tool choice), and
`GET /_control/batches` the order of each batch's requests.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

if __package__ in (None, ""):  # run as a script: `fake_openai` is a sibling file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fake_openai as base  # type: ignore[import-not-found]
else:
    from . import fake_openai as base

CACHE_MIN = 1024


WINDOW = 24 * 3600
_BATCH_FAULT = re.compile(r"^BATCH:\s*(?P<kind>error|expire)\s*$", re.MULTILINE)


class _State:
    def __init__(self, api_key: str | None, tick: float = 3600.0, progress: float = 600.0):
        self.api_key = api_key
        self.lock = threading.RLock()
        self.cached: set[str] = set()
        self.log: list[dict[str, Any]] = []
        # message batches, on the test clock (`tick` seconds a batch poll)
        self.tick = tick
        self.progress = progress
        self.epoch = time.time()  # the test clock starts at the wall clock's now
        self.offset = 0.0
        # kill points: what -> how many such requests are answered before one hangs
        self.hang_after: dict[str, int] = {}
        self.seen_kind: dict[str, int] = {}
        self.hanging: dict[str, int] = {}
        self.serial = 0
        self.batches: dict[str, dict[str, Any]] = {}
        self.seen: dict[str, int] = {}  # request digest -> batches it was in
        self.billed: dict[str, int] = {}  # request digest -> times answered

    def now(self) -> float:
        return self.epoch + self.offset


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


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


def _segments(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt's text blocks in cache order (system, then messages), each with
    whether it is marked `cache_control`."""
    out: list[tuple[str, bool]] = []
    for part in (body.get("system"), *(m.get("content") for m in body.get("messages") or [])):
        if isinstance(part, str):
            out.append((part, False))
        elif isinstance(part, list):
            for b in part:
                if isinstance(b, dict) and b.get("type") == "text":
                    out.append((str(b.get("text", "")), bool(b.get("cache_control"))))
    return out


def _marked_prefixes(body: dict[str, Any]) -> tuple[list[tuple[str, int]], int]:
    """(key, tokens) of each prefix that ends at a marked block, and the prompt's tokens."""
    words = 0
    digest = hashlib.sha256()  # a prefix is cached as it is: its exact text
    out = []
    for text, marked in _segments(body):
        words += len(base._words(text))
        digest.update(text.encode() + b"\x00")
        if marked:
            out.append((digest.copy().hexdigest(), words))
    return out, words


def _unmarked(body: dict[str, Any]) -> dict[str, Any]:
    """The request without its cache marks: every content as one text (its text blocks
    joined as they were cut)."""

    def joined(content: Any) -> Any:
        if not isinstance(content, list):
            return content
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))

    messages = [{**m, "content": joined(m.get("content"))} for m in body.get("messages") or []]
    out = {**body, "messages": messages}
    if "system" in body:
        out["system"] = joined(body["system"])
    return out


class _Handler(BaseHTTPRequestHandler):
    server_version = "fake-anthropic/1"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as tests/support/fake_openai.py (no delayed-ACK stall)
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
        path = self.path.split("?")[0]
        if self.path == "/_control/requests":
            with self.state.lock:
                self._json(200, {"requests": list(self.state.log)})
            return
        if self.path == "/_control/hung":
            with self.state.lock:
                doc = {"hanging": dict(self.state.hanging), "seen": dict(self.state.seen_kind)}
            self._json(200, doc)
            return
        if path == "/_control/batches":
            with self.state.lock:
                view = [
                    {"id": b["object"]["id"], "status": b["object"]["processing_status"],
                     "requests": [{"custom_id": r["custom_id"], "outcome": r["outcome"]}
                                  for r in b["requests"]]}
                    for b in self.state.batches.values()
                ]  # fmt: skip
                self._json(200, {"batches": view, "billed": dict(self.state.billed)})
            return
        parts = path.strip("/").split("/")
        if parts[:3] == ["v1", "messages", "batches"]:
            self._batch_get(parts[3:])
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
        if self.path == "/_control/clock":
            with self.state.lock:
                self.state.offset += float(json.loads(raw or b"{}").get("advance", 0))
            self._json(200, {"now": self.state.now()})
            return
        if self.path == "/_control/hang":
            doc = json.loads(raw or b"{}")
            with self.state.lock:
                if doc.get("after") is None:
                    self.state.hang_after.pop(doc.get("what"), None)
                else:
                    self.state.hang_after[doc["what"]] = int(doc["after"])
            self._json(200, {"ok": True})
            return
        if self.path == "/v1/messages/batches":
            if self._refused():
                return
            self._batch_create(raw)
            return
        if self.path != "/v1/messages":
            self._error(404, "not_found_error", "not found")
            return
        if self._refused():
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

    def _hang(self, what: str) -> bool:
        """A kill point: done, but never answered while the hang is set (True: hung):
        the batch stands, and the client dies not knowing it."""
        return base.hang_at(self, self.state, what)

    def _refused(self) -> bool:
        """The key (`x-api-key`, or a bearer token) and `anthropic-version`, or an error."""
        state = self.state
        given = self.headers.get("x-api-key"), self.headers.get("Authorization")
        if state.api_key is not None and given not in (
            (state.api_key, None),
            (None, f"Bearer {state.api_key}"),
        ):
            self._error(401, "authentication_error", "invalid x-api-key")
            return True
        if not self.headers.get("anthropic-version"):
            self._error(400, "invalid_request_error", "anthropic-version header is required")
            return True
        return False

    # --- message batches -------------------------------------------------------------

    def _batch_create(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "invalid_request_error", "body is not JSON")
            return
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests or len(requests) > 100_000:
            self._error(400, "invalid_request_error", "requests: 1 to 100,000 items")
            return
        ids = [r.get("custom_id") for r in requests if isinstance(r, dict)]
        if len(ids) != len(requests) or len(set(ids)) != len(ids):
            self._error(400, "invalid_request_error", "custom_id must be unique")
            return
        for r in requests:
            problem = self._problem(r.get("params"))
            if problem:
                self._error(400, "invalid_request_error", f"{r['custom_id']}: {problem}")
                return
        state = self.state
        with state.lock:
            state.serial += 1
            batch_id = f"msgbatch_{state.serial:06d}"
            now = state.now()
            items = []
            for r in requests:
                digest = hashlib.sha256(
                    json.dumps(_unmarked(r["params"]), sort_keys=True).encode()
                ).hexdigest()
                first = state.seen.get(digest, 0) == 0
                state.seen[digest] = state.seen.get(digest, 0) + 1
                fault = _BATCH_FAULT.search(
                    _text((r["params"]["messages"] or [{}])[0].get("content"))
                )
                items.append({
                    "custom_id": r["custom_id"], "params": r["params"], "digest": digest,
                    "fault": fault.group("kind") if fault and first else None,
                    "outcome": None, "result": None,
                })  # fmt: skip
            obj = {
                "id": batch_id, "type": "message_batch", "processing_status": "in_progress",
                "request_counts": {"processing": len(items), "succeeded": 0, "errored": 0,
                                   "canceled": 0, "expired": 0},
                "ended_at": None, "created_at": _iso(now), "expires_at": _iso(now + WINDOW),
                "archived_at": None, "cancel_initiated_at": None, "results_url": None,
            }  # fmt: skip
            state.batches[batch_id] = {"object": obj, "requests": items, "created": now}
            view = dict(obj)
        if not self._hang("create"):
            self._json(200, view)

    def _batch_get(self, rest: list[str]) -> None:
        if self._refused():
            return
        state = self.state
        if not rest:  # the list, newest first
            with state.lock:
                data = [dict(b["object"]) for b in reversed(list(state.batches.values()))]
            first = data[0]["id"] if data else None
            last = data[-1]["id"] if data else None
            self._json(200, {"data": data, "has_more": False, "first_id": first, "last_id": last})
            return
        with state.lock:
            batch = state.batches.get(rest[0])
            if batch is not None and len(rest) == 1:
                state.offset += state.tick
                self._advance(batch)
            view = dict(batch["object"]) if batch is not None else None
            lines = None
            if batch is not None and rest[1:] == ["results"]:
                if batch["object"]["processing_status"] != "ended":
                    self._error(400, "invalid_request_error", "the batch has not ended")
                    return
                lines = [
                    json.dumps({"custom_id": r["custom_id"], "result": r["result"]})
                    for r in batch["requests"]
                ]
        if view is None:
            self._error(404, "not_found_error", f"no batch {rest[0]}")
        elif lines is not None:
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/binary")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(200, view)

    def _advance(self, batch: dict[str, Any]) -> None:
        """Answer the requests whose turn came; end the batch when all did, or at expiry."""
        state = self.state
        obj = batch["object"]
        if obj["processing_status"] == "ended":
            return
        now = min(state.now(), batch["created"] + WINDOW)
        items = batch["requests"]
        due = (
            len(items)
            if state.progress <= 0
            else int(len(items) * (now - batch["created"]) / state.progress)
        )
        counts = obj["request_counts"]
        for item in items[: min(len(items), due)]:
            if item["outcome"] is not None or item["fault"] == "expire":
                continue
            counts["processing"] -= 1
            if item["fault"] == "error":
                item["outcome"] = "errored"
                counts["errored"] += 1
                item["result"] = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "api_error", "message": "injected server error"}}}  # fmt: skip
                continue
            item["outcome"] = "succeeded"
            counts["succeeded"] += 1
            state.billed[item["digest"]] = state.billed.get(item["digest"], 0) + 1
            item["result"] = {
                "type": "succeeded",
                "message": self._answer(item["params"], log=False),
            }
        done = all(i["outcome"] is not None for i in items)
        if done or state.now() >= batch["created"] + WINDOW:
            for item in items:
                if item["outcome"] is None:
                    item["outcome"] = "expired"
                    item["result"] = {"type": "expired"}
                    counts["processing"] -= 1
                    counts["expired"] += 1
            host = self.headers.get("Host", "127.0.0.1")
            obj.update(
                processing_status="ended",
                ended_at=_iso(now),
                results_url=f"http://{host}/v1/messages/batches/{obj['id']}/results",
            )

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

    def _answer(self, body: dict[str, Any], *, log: bool = True) -> dict[str, Any]:
        state = self.state
        system = body.get("system")
        blocks = system if isinstance(system, list) else []
        marked = any(isinstance(b, dict) and b.get("cache_control") for b in blocks)
        users = [m for m in body["messages"] if m.get("role") == "user"]
        first = _text(users[0].get("content")) if users else ""
        user_marked = any(
            isinstance(b, dict) and b.get("cache_control")
            for m in users
            if isinstance(m.get("content"), list)
            for b in m["content"]
        )
        prefixes, total = _marked_prefixes(body)
        with state.lock:
            eligible = [(k, n) for k, n in prefixes if n >= CACHE_MIN]
            read = max((n for k, n in eligible if k in state.cached), default=0)
            written = max((n for _, n in eligible), default=0) - read
            written = max(0, written)
            state.cached.update(k for k, _ in eligible)
            fresh = total - read - written
            choice = body.get("tool_choice") or {}
            if log:
                # a request is the same whatever its cache marks
                digest = hashlib.sha256(
                    json.dumps(_unmarked(body), sort_keys=True).encode()
                ).hexdigest()
                state.billed[digest] = state.billed.get(digest, 0) + 1
            state.log.append(
                {
                    "model": body.get("model"),
                    "cache_marked": marked,
                    "user_marked": user_marked,
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

    def __init__(self, *, port: int = 0, api_key: str | None = None, tick: float = 3600.0) -> None:
        self.state = _State(api_key, tick=tick)
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
    parser.add_argument("--tick", type=float, default=3600.0, help="clock seconds a poll")
    args = parser.parse_args(argv)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    server = FakeAnthropic(port=args.port, api_key=key, tick=args.tick)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"listening {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
