"""A fake OpenAI Files + Batches server (and the chat endpoint of `fake_openai.py`), loopback.

Start it as a subprocess (stop it by pid), or in a thread with `FakeOpenAIBatch`:

    python tests/support/fake_openai_batch.py --port 0 [--tick 600] [--error-rate 0.03]
        [--expire-rate 0.02]

It prints `listening http://127.0.0.1:PORT/v1`, then serves until SIGTERM. Endpoints as
the published API reference describes them (the official `openai` client talks to it
unchanged; tests/integration/test_fake_openai_batch.py checks that):

- `POST /v1/files` (multipart: `purpose`, `file`), `GET /v1/files/{id}`,
  `GET /v1/files/{id}/content`: file objects (`id`, `object: "file"`, `bytes`,
  `created_at`, `filename`, `purpose`, `status`).
- `POST /v1/batches` (`input_file_id`, `endpoint`, `completion_window: "24h"`,
  `metadata`), `GET /v1/batches` (newest first, `limit` and `after`),
  `GET /v1/batches/{id}`, `POST /v1/batches/{id}/cancel`: batch objects
  with `status`, the `*_at` times, `request_counts` (`total`, `completed`, `failed`),
  `output_file_id`, `error_file_id` and `errors` (validation errors, with `line`).
- `POST /v1/chat/completions`: what `fake_openai.py` answers (online re-asks).

Time is the server's *test clock*, not the wall clock: it starts at 1,700,000,000 and moves
only when a test says so (`POST /_control/clock` with `{"advance": SECONDS}`) or by
`--tick` seconds at every `GET /v1/batches/{id}` (so a client that polls sees the batch
move on). A batch validates for `--validate` s, runs `--progress` s (its requests
complete one by one, evenly spread over that time, so `request_counts.completed`
grows), finalizes for `--finalize` s, then is `completed`. The input file is checked
while validating (JSON lines with a unique `custom_id`, `method` POST, `url` equal to
the batch's endpoint, one model, at most 50,000 lines and 200 MB): a bad file makes the
batch `failed` with `errors.data`. 24 h after it was created (its `expires_at`) a batch
that has not finished is `expired`: what completed is in its output file, every other
request is a line of its error file with `error.code` `batch_expired`. A cancelled batch
(`cancelling`, then `cancelled` at the next clock move) keeps the results of the requests
that completed before it.

Output file lines: `{"id", "custom_id", "response": {"status_code": 200, "request_id",
"body": <chat completion>}, "error": null}`. Error file lines: a request the model
endpoint refused, `{"id", "custom_id", "response": {"status_code": 500, "request_id",
"body": {"error": {...}}}, "error": null}`; a request never run, `{"id", "custom_id",
"response": null, "error": {"code": "batch_expired", "message": ...}}`.

Faults, injected deterministically: a request (the sha256 of its body) whose hash falls
in the first `--error-rate` of the hash space errors (HTTP 500 line), the next
`--expire-rate` never completes (so its batch expires), each only the *first* time that
request is in a batch; a later batch of the same request succeeds. A prompt line
`BATCH: error` or `BATCH: expire` does the same for one request.

Kill points: `POST /_control/hang` with `{"what": W, "after": N}` makes the request of
kind W (`upload`, `create`, `retrieve`, `content`) after the first N do its work and then
hang without an answer until `{"what": W}` (no `after`) lifts it; `GET /_control/hung`
says how many hang now. A test kills its client there.

`POST /_control/forget` drops every batch and file (what a client with another key sees).

Control endpoints: `GET /_control/batches` (every batch: id, status, its requests'
custom ids and body digests, and which were errored, expired, completed),
`GET /_control/billed` (how often each request body was completed, online or in a
batch: a body completed twice was paid twice), `POST /_control/clock`.
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import email.policy
import hashlib
import json
import os
import re
import signal
import sys
from typing import Any

if __package__ in (None, ""):  # run as a script: `fake_openai` is a sibling file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fake_openai as base  # type: ignore[import-not-found]
else:
    from . import fake_openai as base

MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
EPOCH = 1_700_000_000
WINDOW = 24 * 3600
_BATCH_FAULT = re.compile(r"^BATCH:\s*(?P<kind>error|expire)\s*$", re.MULTILINE)
_TERMINAL = ("completed", "failed", "expired", "cancelled")


def body_digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _first_prompt(body: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in body.get("messages") or [] if m.get("role") == "user"]
    return str(users[0]) if users else ""


class _BatchState(base._State):
    def __init__(
        self,
        *,
        tick: float,
        validate: float,
        progress: float,
        finalize: float,
        error_rate: float,
        expire_rate: float,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.offset = 0.0
        self.tick = tick
        self.validate = validate
        self.progress = progress
        self.finalize = finalize
        self.error_rate = error_rate
        self.expire_rate = expire_rate
        self.files: dict[str, dict[str, Any]] = {}  # id -> {"meta": ..., "data": bytes}
        self.batches: dict[str, dict[str, Any]] = {}
        self.seen: dict[str, int] = {}  # request body digest -> batches it was in
        self.billed: dict[str, int] = {}  # request body digest -> times completed
        self.serial = 0
        # hangs (the test's kill points): what -> the number of such requests served
        # before one hangs; `hanging` counts the requests hung now
        self.hang_after: dict[str, int] = {}
        self.seen_kind: dict[str, int] = {}
        self.hanging: dict[str, int] = {}

    def now(self) -> int:
        return int(EPOCH + self.offset)

    def next_id(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial:06d}"


def _file_meta(
    state: _BatchState, file_id: str, name: str, size: int, purpose: str
) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": state.now(),
        "filename": name,
        "purpose": purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


class _BatchHandler(base._Handler):
    server_version = "fake-openai-batch/1"
    state: _BatchState

    # --- routes ------------------------------------------------------------------------

    def _hang(self, what: str) -> bool:
        """A kill point: done, but never answered while the hang is set (True: hung).

        The request's effect stands (the file is stored, the batch created): the client
        dies not knowing it, as when it is killed between the server's work and its
        answer."""
        return base.hang_at(self, self.state, what)

    def _refused(self) -> bool:
        """The bearer key, when the server requires one (as the chat endpoint does)."""
        key = self.state.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._raw()
        self._error(401, "invalid api key")
        return True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        state = self.state
        if path.startswith(("/v1/files", "/v1/batches")) and self._refused():
            return
        if path == "/_control/batches":
            with state.lock:
                self._json(
                    200, {"batches": [_Life.control_view(b) for b in state.batches.values()]}
                )
            return
        if path == "/_control/hung":
            with state.lock:
                self._json(200, {"hanging": dict(state.hanging), "seen": dict(state.seen_kind)})
            return
        if path == "/_control/billed":
            with state.lock:
                self._json(200, {"billed": dict(state.billed), "now": state.now()})
            return
        parts = path.strip("/").split("/")
        if parts[:2] == ["v1", "files"] and len(parts) in (3, 4):
            with state.lock:
                file = state.files.get(parts[2])
            if file is None:
                self._error(404, f"No such File object: {parts[2]}")
            elif len(parts) == 3:
                self._json(200, file["meta"])
            elif parts[3] == "content":
                if not self._hang("content"):
                    self._send(200, file["data"], {"Content-Type": "application/octet-stream"})
            else:
                self._error(404, "not found")
            return
        if parts == ["v1", "batches"]:
            self._list_batches()
            return
        if parts[:2] == ["v1", "batches"] and len(parts) == 3:
            with state.lock:
                batch = state.batches.get(parts[2])
                if batch is not None:
                    state.offset += state.tick
                    _Life(state).advance_all()
                    view = dict(batch["object"])
            if batch is None:
                self._error(404, f"No batch found with id '{parts[2]}'.")
            elif not self._hang("retrieve"):
                self._json(200, view)
            return
        super().do_GET()

    def _list_batches(self) -> None:
        """`GET /v1/batches?limit=N&after=ID`: newest first, cursor paginated."""
        query = dict(
            part.split("=", 1) for part in self.path.partition("?")[2].split("&") if "=" in part
        )
        limit = max(1, min(100, int(query.get("limit", "20") or 20)))
        with self.state.lock:
            every = [dict(b["object"]) for b in reversed(list(self.state.batches.values()))]
        after = query.get("after")
        if after:
            ids = [b["id"] for b in every]
            every = every[ids.index(after) + 1 :] if after in ids else []
        page = every[:limit]
        self._json(
            200,
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(every) > limit,
            },
        )

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        state = self.state
        if path.startswith(("/v1/files", "/v1/batches")) and self._refused():
            return
        if path == "/_control/forget":  # as another key sees it: no batch, no file
            self._raw()
            with state.lock:
                state.batches.clear()
                state.files.clear()
            self._json(200, {"ok": True})
            return
        if path == "/_control/hang":
            doc = self._read_json() or {}
            with state.lock:  # {"what": "create", "after": 0}; no "after": no more hangs
                what = str(doc.get("what"))
                if "after" in doc:
                    state.hang_after[what] = int(doc["after"])
                    state.seen_kind[what] = 0
                else:
                    state.hang_after.pop(what, None)
                self._json(200, {"hang_after": dict(state.hang_after)})
            return
        if path == "/_control/clock":
            doc = self._read_json()
            with state.lock:
                state.offset += float((doc or {}).get("advance", 0))
                _Life(state).advance_all()
                self._json(200, {"now": state.now()})
            return
        if path == "/v1/files":
            self._upload()
            return
        if path == "/v1/batches":
            self._create_batch()
            return
        parts = path.strip("/").split("/")
        if parts[:2] == ["v1", "batches"] and len(parts) == 4 and parts[3] == "cancel":
            with state.lock:
                batch = state.batches.get(parts[2])
                if batch is not None and batch["object"]["status"] not in _TERMINAL:
                    _Life(state).advance(batch)
                    if batch["object"]["status"] not in _TERMINAL:
                        batch["object"]["status"] = "cancelling"
                        batch["object"]["cancelling_at"] = state.now()
                view = dict(batch["object"]) if batch is not None else None
            if view is None:
                self._error(404, f"No batch found with id '{parts[2]}'.")
            else:
                self._json(200, view)
            return
        super().do_POST()

    def _chat(self, body: dict[str, Any]) -> None:
        before = self.state.usage["answered"]
        super()._chat(body)
        with self.state.lock:
            if self.state.usage["answered"] > before:
                digest = body_digest(body)
                self.state.billed[digest] = self.state.billed.get(digest, 0) + 1

    # --- plumbing ------------------------------------------------------------------------

    def _raw(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_json(self) -> Any:
        raw = self._raw()
        with contextlib.suppress(ValueError):
            return json.loads(raw) if raw else {}
        return None

    def _upload(self) -> None:
        raw = self._raw()
        ctype = self.headers.get("Content-Type", "")
        if not ctype.startswith("multipart/form-data"):
            self._error(400, "expected multipart/form-data")
            return
        head = f"Content-Type: {ctype}\r\nMIME-Version: 1.0\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True) or b""
            fields[str(name)] = (part.get_filename(), payload)
        purpose = fields.get("purpose", (None, b""))[1].decode()
        if "file" not in fields or not purpose:
            self._error(400, "'file' and 'purpose' are required")
            return
        if purpose != "batch":
            self._error(400, f"this fake only takes purpose 'batch', not {purpose!r}")
            return
        filename, data = fields["file"]
        with self.state.lock:
            file_id = self.state.next_id("file")
            meta = _file_meta(self.state, file_id, filename or "upload.jsonl", len(data), "batch")
            self.state.files[file_id] = {"meta": meta, "data": data}
        if not self._hang("upload"):
            self._json(200, meta)

    def _create_batch(self) -> None:
        doc = self._read_json()
        if not isinstance(doc, dict):
            self._error(400, "body is not JSON")
            return
        state = self.state
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(doc.get(name), str):
                self._error(400, f"Missing required parameter: '{name}'.")
                return
        if doc["completion_window"] != "24h":
            self._error(400, "completion_window must be '24h'")
            return
        if doc["endpoint"] not in ("/v1/chat/completions", "/v1/responses", "/v1/embeddings"):
            self._error(400, f"unsupported endpoint {doc['endpoint']!r}")
            return
        with state.lock:
            file = state.files.get(doc["input_file_id"])
            if file is None:
                self._error(404, f"No such File object: {doc['input_file_id']}")
                return
            batch_id = state.next_id("batch")
            now = state.now()
            obj = {
                "id": batch_id,
                "object": "batch",
                "endpoint": doc["endpoint"],
                "errors": None,
                "input_file_id": doc["input_file_id"],
                "completion_window": "24h",
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": now,
                "in_progress_at": None,
                "expires_at": now + WINDOW,
                "finalizing_at": None,
                "completed_at": None,
                "failed_at": None,
                "expired_at": None,
                "cancelling_at": None,
                "cancelled_at": None,
                "request_counts": {"total": 0, "completed": 0, "failed": 0},
                "metadata": doc.get("metadata"),
            }
            state.batches[batch_id] = {"object": obj, "requests": None, "data": file["data"]}
            view = dict(obj)
        if not self._hang("create"):
            self._json(200, view)


class _Life:
    """A batch's life on the test clock, and the files it leaves (the state lock is held)."""

    def __init__(self, state: _BatchState) -> None:
        self.state = state

    def advance_all(self) -> None:
        for batch in self.state.batches.values():
            self.advance(batch)

    def advance(self, batch: dict[str, Any]) -> None:
        """Move `batch` to where the clock says it is (the state lock is held)."""
        state = self.state
        obj = batch["object"]
        now = state.now()
        # each step happens at its scheduled time, however far the clock jumped
        validated = obj["created_at"] + int(state.validate)
        if obj["status"] == "validating" and now >= validated:
            problems, requests = self._validate(batch["data"], obj["endpoint"])
            if problems:
                obj.update(
                    status="failed",
                    failed_at=validated,
                    errors={"object": "list", "data": problems},
                )
                return
            batch["requests"] = requests
            obj.update(status="in_progress", in_progress_at=validated)
            obj["request_counts"] = {"total": len(requests), "completed": 0, "failed": 0}
        if obj["status"] in ("in_progress", "cancelling"):
            self._run_due(batch, min(now, obj["expires_at"]))
            done = all(r["outcome"] is not None for r in batch["requests"])
            ran = obj["in_progress_at"] + int(state.progress)
            if obj["status"] == "cancelling":
                self._close(batch, "cancelled", "cancelled_at", now)
            elif done and ran < obj["expires_at"]:
                obj.update(status="finalizing", finalizing_at=ran)
            elif now >= obj["expires_at"]:
                self._close(batch, "expired", "expired_at", obj["expires_at"])
        final = (obj["finalizing_at"] or 0) + int(state.finalize)
        if obj["status"] == "finalizing" and now >= final:
            self._close(batch, "completed", "completed_at", final)

    def _validate(self, data: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[Any]]:
        problems: list[dict[str, Any]] = []
        requests: list[dict[str, Any]] = []
        ids: set[str] = set()
        models: set[str] = set()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if len(data) > MAX_BYTES:
            problems.append({"code": "too_large", "message": "over 200 MB", "line": None})
        if len(lines) > MAX_REQUESTS:
            problems.append(
                {"code": "too_many_requests", "message": "over 50,000 requests", "line": None}
            )
        for number, raw in enumerate(lines, 1):
            try:
                line = json.loads(raw)
            except ValueError:
                problems.append(
                    {"code": "invalid_json_line", "message": "not JSON", "line": number}
                )
                continue
            custom = line.get("custom_id") if isinstance(line, dict) else None
            body = line.get("body") if isinstance(line, dict) else None
            if not isinstance(custom, str) or not isinstance(body, dict):
                problems.append(
                    {
                        "code": "missing_required_parameter",
                        "message": "custom_id, body",
                        "line": number,
                    }
                )
                continue
            if custom in ids:
                problems.append({"code": "duplicate_custom_id", "message": custom, "line": number})
            if line.get("method") != "POST" or line.get("url") != endpoint:
                problems.append(
                    {"code": "invalid_url", "message": "method/url must match", "line": number}
                )
            ids.add(custom)
            models.add(str(body.get("model")))
            requests.append({"custom_id": custom, "body": body, "outcome": None, "line": number})
        if len(models) > 1:
            problems.append({"code": "mismatched_model", "message": "one model", "line": None})
        if problems:
            return problems, []
        state = self.state
        for req in requests:
            digest = req["digest"] = body_digest(req["body"])
            first = state.seen.get(digest, 0) == 0
            state.seen[digest] = state.seen.get(digest, 0) + 1
            req["fault"] = self._fault_of(req["body"], digest) if first else None
        return [], requests

    def _fault_of(self, body: dict[str, Any], digest: str) -> str | None:
        scripted = _BATCH_FAULT.search(_first_prompt(body))
        if scripted:
            return scripted.group("kind")
        where = int(digest[:8], 16) / 0x1_0000_0000
        if where < self.state.error_rate:
            return "error"
        if where < self.state.error_rate + self.state.expire_rate:
            return "expire"
        return None

    def _run_due(self, batch: dict[str, Any], now: int) -> None:
        """Requests whose turn came (spread evenly over `--progress` s) get their outcome."""
        state = self.state
        obj = batch["object"]
        requests = batch["requests"]
        elapsed = now - obj["in_progress_at"]
        total = len(requests)
        due = total if state.progress <= 0 else min(total, int(total * elapsed / state.progress))
        counts = obj["request_counts"]
        for req in requests[:due]:
            if req["outcome"] is not None or req["fault"] == "expire":
                continue
            if req["fault"] == "error":
                req["outcome"] = "errored"
                counts["failed"] += 1
                continue
            req["outcome"] = "completed"
            cached = base.prompt_cache(state.prefixes, req["body"])
            req["completion"] = base.completion(req["body"], cached=cached)
            counts["completed"] += 1
            state.billed[req["digest"]] = state.billed.get(req["digest"], 0) + 1
            usage = req["completion"]["usage"]
            state.usage["answered"] += 1
            state.usage["prompt_tokens"] += usage["prompt_tokens"]
            state.usage["completion_tokens"] += usage["completion_tokens"]
            state.usage["cached_tokens"] += usage["prompt_tokens_details"]["cached_tokens"]

    def _close(self, batch: dict[str, Any], status: str, stamp: str, now: int) -> None:
        """The batch's output and error files, then its final status."""
        state = self.state
        obj = batch["object"]
        out: list[bytes] = []
        err: list[bytes] = []
        for req in batch["requests"] or []:
            line_id = f"batch_req_{obj['id']}_{req['line']}"
            request_id = hashlib.sha256(line_id.encode()).hexdigest()[:32]
            if req["outcome"] == "completed":
                out.append(self._line(line_id, req, 200, request_id, req["completion"], None))
            elif req["outcome"] == "errored":
                body = {"error": {"message": "injected server error", "type": "server_error"}}
                err.append(self._line(line_id, req, 500, request_id, body, None))
            elif status == "expired":
                req["outcome"] = "expired"
                obj["request_counts"]["failed"] += 1
                error = {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion "
                    "window expired.",
                }
                err.append(self._line(line_id, req, None, None, None, error))
        for kind, lines in (("output_file_id", out), ("error_file_id", err)):
            if lines:
                file_id = state.next_id("file")
                data = b"".join(lines)
                name = f"{obj['id']}_{kind.split('_')[0]}.jsonl"
                meta = _file_meta(self.state, file_id, name, len(data), "batch_output")
                state.files[file_id] = {"meta": meta, "data": data}
                obj[kind] = file_id
        obj["status"] = status
        obj[stamp] = now

    @staticmethod
    def _line(
        line_id: str,
        req: dict[str, Any],
        code: int | None,
        request_id: str | None,
        body: Any,
        error: dict[str, Any] | None,
    ) -> bytes:
        response = (
            None if code is None else {"status_code": code, "request_id": request_id, "body": body}
        )
        doc = {"id": line_id, "custom_id": req["custom_id"], "response": response, "error": error}
        return json.dumps(doc).encode() + b"\n"

    @staticmethod
    def control_view(batch: dict[str, Any]) -> dict[str, Any]:
        obj = batch["object"]
        requests = batch["requests"] or []
        return {
            "id": obj["id"],
            "status": obj["status"],
            "metadata": obj["metadata"],
            "requests": [
                {"custom_id": r["custom_id"], "digest": r["digest"], "outcome": r["outcome"]}
                for r in requests
            ],
        }


class FakeOpenAIBatch(base.FakeOpenAI):
    """The server in a background thread of this process (`url`, `stop()`, `advance`)."""

    def __init__(
        self,
        *,
        port: int = 0,
        tick: float = 0.0,
        validate: float = 60.0,
        progress: float = 600.0,
        finalize: float = 60.0,
        error_rate: float = 0.0,
        expire_rate: float = 0.0,
        api_key: str | None = None,
    ) -> None:
        state = _BatchState(
            tick=tick,
            validate=validate,
            progress=progress,
            finalize=finalize,
            error_rate=error_rate,
            expire_rate=expire_rate,
            latency=0.0,
            hang=5.0,
            api_key=api_key,
            echo_auth=False,
        )
        handler = type("Handler", (_BatchHandler,), {"state": state})
        self.state = state
        self.httpd = base._Server(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = None

    def advance(self, seconds: float) -> None:
        with self.state.lock:
            self.state.offset += seconds
            _Life(self.state).advance_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tick", type=float, default=0.0, help="clock seconds per batch poll")
    parser.add_argument("--validate", type=float, default=60.0)
    parser.add_argument("--progress", type=float, default=600.0)
    parser.add_argument("--finalize", type=float, default=60.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--expire-rate", type=float, default=0.0)
    parser.add_argument("--api-key-env", default=None, help="require the bearer key in this var")
    args = parser.parse_args(argv)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    server = FakeOpenAIBatch(
        port=args.port,
        tick=args.tick,
        validate=args.validate,
        progress=args.progress,
        finalize=args.finalize,
        error_rate=args.error_rate,
        expire_rate=args.expire_rate,
        api_key=key,
    )
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"listening {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
