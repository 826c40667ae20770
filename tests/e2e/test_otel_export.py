"""`runjournal journal otel`: a run sent as an OTLP/HTTP trace, decoded by a loopback
receiver with the official `opentelemetry-proto` messages (docs/operations.md "Traces
and lineage").

The run asks the fault-injecting fake OpenAI server (tests/support/fake_openai.py), one
chunk scripted to fail once with a 500, so the journal holds a retried call.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.llm_servers import ASK_PIPELINE, ASK_SCHEMA, ServerProcess, start_fake
from support.otlp_receiver import Receiver, spans_of

SCHEMA, PIPELINE = ASK_SCHEMA, ASK_PIPELINE
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 5
max_retries = 2
backoff_initial = 0.05
backoff_max = 0.1
prices = {{ input_per_million = 1.0, output_per_million = 2.0 }}
"""
DOCS = {
    "a.md": "Alpha paragraph one, about apples.\n\nAlpha paragraph two, about apricots.\n",
    "b.md": "FAULTS: 500, ok\nBeta has one paragraph.\n",
}
ENV = {"RJ_FAKE_KEY": "sk-" + "local-" + "x" * 24}


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def project(fake: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run against the fake server, made once for the module."""
    from support.console import CLI

    root = tmp_path_factory.mktemp("otel")
    (root / "docs").mkdir()
    for name, text in DOCS.items():
        (root / "docs" / name).write_text(text)
    (root / "pipeline.toml").write_text(PIPELINE.format(schema=SCHEMA))
    (root / "profiles.toml").write_text(PROFILE.format(url=fake.url))
    cli = CLI(root / "home")
    out = root / "out"
    proc, doc = cli.json(
        "run", str(root / "pipeline.toml"), "--output-root", str(out),
        "--cache-root", str(root / "cache"), "--profile", "fake",
        "--profiles-file", str(root / "profiles.toml"),
        env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    shown, events = cli.json("journal", "show", doc["run_id"], "--output-root", str(out))
    assert shown.returncode == 0, shown.stderr
    return {"cli": cli, "out": out, "run_id": doc["run_id"], "events": events["events"]}


def _attrs(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        if which == "array_value":
            values[kv.key] = [v.string_value for v in kv.value.array_value.values]
        else:
            values[kv.key] = getattr(kv.value, which)
    return values


def _send(project: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> Any:
    return project["cli"](
        "journal", "otel", project["run_id"], "--output-root", str(project["out"]), *args, env=env
    )


def test_trace_of_a_run_decodes_with_genai_attributes_and_nesting(
    project: dict[str, Any], receiver: Receiver
) -> None:
    proc = _send(project, "--endpoint", receiver.url)
    assert proc.returncode == 0, proc.stderr
    assert receiver.paths == ["/v1/traces"]
    [request] = receiver.requests()
    spans = spans_of(request)
    attempts = [e["data"] for e in project["events"] if e["type"] == "LLMCallAttempted"]
    assert len(attempts) >= 4 and {a["status"] for a in attempts} >= {"ok", "server_error"}
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == len(attempts)

    # one trace, ids derived from the run
    assert len({s.trace_id for s in spans}) == 1
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    [root] = [s for s in spans if not s.parent_span_id]
    assert root.name == "run ask" and _attrs(root)["runjournal.run_id"] == project["run_id"]

    for chat in chats:
        a = _attrs(chat)
        assert chat.name == "chat fake-model"
        assert chat.kind == chat.SPAN_KIND_CLIENT
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "fake-model"
        assert isinstance(a["gen_ai.usage.input_tokens"], int)
        assert isinstance(a["gen_ai.usage.output_tokens"], int)
        assert isinstance(a["runjournal.cost"], float)
        if a["runjournal.attempt_status"] == "ok":
            assert a["gen_ai.response.model"] == "fake-model"
            assert a["gen_ai.response.finish_reasons"] == ["stop"]
            assert a["gen_ai.usage.input_tokens"] > 0 and "error.type" not in a
        else:
            assert a["error.type"] == "server_error"
            assert chat.status.code == chat.status.STATUS_CODE_ERROR
        assert chat.start_time_unix_nano <= chat.end_time_unix_nano
        # run > step > lane > stage > attempt
        chain = []
        span = chat
        while span.parent_span_id:
            span = by_id[span.parent_span_id]
            chain.append(span.name.split()[0])
        assert chain == ["stage", "lane", "step", "run"]
        parent = by_id[chat.parent_span_id]
        assert _attrs(parent)["runjournal.outcome"] == "executed"
        assert _attrs(parent)["runjournal.reason_code"]
    spent = sum(_attrs(c)["runjournal.cost"] for c in chats)
    assert spent == pytest.approx(sum(a["cost"] for a in attempts))
    # no prompt or reply text leaves the journal
    assert b"apples" not in receiver.bodies[0] and b"Beta" not in receiver.bodies[0]


def test_two_exports_of_one_run_are_the_same_bytes(
    project: dict[str, Any], receiver: Receiver
) -> None:
    for _ in range(2):
        proc = _send(project, "--endpoint", receiver.url + "/v1/traces")
        assert proc.returncode == 0, proc.stderr
    first, second = receiver.bodies
    assert first == second


def test_endpoint_from_the_otlp_variable(project: dict[str, Any], receiver: Receiver) -> None:
    proc = _send(project, "--json", env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    assert proc.returncode == 0, proc.stderr
    assert receiver.paths == ["/v1/traces"]
    assert '"llm_attempts"' in proc.stdout


def test_no_endpoint_is_one_line_and_exit_2(project: dict[str, Any], tmp_path: Path) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}
    proc = _send(project, env=env)
    assert proc.returncode == 2
    assert "no OTLP endpoint" in proc.stderr and "Traceback" not in proc.stderr
    proc = _send(project, "--endpoint", "ftp://example.invalid/x")
    assert proc.returncode == 2 and "not an http(s) URL" in proc.stderr


def test_a_refusing_endpoint_is_exit_1(project: dict[str, Any]) -> None:
    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proc = _send(project, "--endpoint", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert proc.returncode == 1
    assert "did not accept" in proc.stderr and "Traceback" not in proc.stderr


def test_run_sends_its_trace_when_it_ends(
    fake: ServerProcess, receiver: Receiver, tmp_path: Path
) -> None:
    from support.console import CLI

    root = tmp_path / "p"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text(DOCS["a.md"])
    (root / "pipeline.toml").write_text(PIPELINE.format(schema=SCHEMA))
    (root / "profiles.toml").write_text(PROFILE.format(url=fake.url))
    cli = CLI(root / "home")
    out = root / "out"
    args = [
        "run", str(root / "pipeline.toml"), "--output-root", str(out),
        "--cache-root", str(root / "cache"), "--profile", "fake",
        "--profiles-file", str(root / "profiles.toml"),
    ]  # fmt: skip
    bad = cli(*args, "--otel-endpoint", "localhost:4318", env=ENV)
    assert bad.returncode == 2 and "not an http(s) URL" in bad.stderr
    assert not out.exists()  # refused before anything ran

    proc, doc = cli.json(*args, "--otel-endpoint", receiver.url, env=ENV)
    assert proc.returncode == 0, proc.stderr
    [sent] = receiver.bodies
    spans = spans_of(receiver.requests()[0])
    assert sum(s.name.startswith("chat ") for s in spans) == 2
    # what the run sent when it ended is what `journal otel` sends of it afterwards
    again = cli("journal", "otel", doc["run_id"], "--output-root", str(out), "--endpoint",
                receiver.url)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert receiver.bodies[1] == sent

    # an endpoint that is down: a warning, the run's exit code unchanged
    dead = Receiver()
    dead.stop()
    proc = cli(*args, "--otel-endpoint", dead.url, env={**ENV, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "runjournal: warning: trace of run" in proc.stderr and "Traceback" not in proc.stderr
    # nothing but our own lines: the SDK's log lines stay quiet
    assert all(line.startswith("runjournal: ") for line in proc.stderr.splitlines()), proc.stderr


def test_run_sends_its_trace_to_the_otlp_variable_unless_otel_is_off(
    fake: ServerProcess, receiver: Receiver, tmp_path: Path
) -> None:
    from support.console import CLI

    root = tmp_path / "p"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text(DOCS["a.md"])
    (root / "pipeline.toml").write_text(PIPELINE.format(schema=SCHEMA))
    (root / "profiles.toml").write_text(PROFILE.format(url=fake.url))
    cli = CLI(root / "home")
    args = [
        "run", str(root / "pipeline.toml"), "--output-root", str(root / "out"),
        "--cache-root", str(root / "cache"), "--profile", "fake",
        "--profiles-file", str(root / "profiles.toml"),
    ]  # fmt: skip
    env = {**ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    proc = cli(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert receiver.paths == ["/v1/traces"]
    for off in ({"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}):
        proc = cli(*args, env={**env, **off})
        assert proc.returncode == 0, proc.stderr
    assert len(receiver.paths) == 1  # nothing more was sent
    # a variable that is not an http(s) URL: a warning, the run unchanged
    proc = cli(*args, env={**ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"})
    assert proc.returncode == 0, proc.stderr
    assert (
        "runjournal: warning: trace of run" in proc.stderr and "not an http(s) URL" in proc.stderr
    )


def test_content_from_the_cassette_redacted(
    fake: ServerProcess, receiver: Receiver, tmp_path: Path
) -> None:
    from support.console import CLI

    token = "ghp_" + "Z9y8X7w6V5u4" * 3  # a credential shape, built at run time
    root = tmp_path / "p"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text(f"Apples are red.\n\nKey {token} here.\n")
    (root / "pipeline.toml").write_text(PIPELINE.format(schema=SCHEMA))
    (root / "profiles.toml").write_text(PROFILE.format(url=fake.url))
    cli = CLI(root / "home")
    out, cassette = root / "out", root / "cassette.json"
    args = [
        "run", str(root / "pipeline.toml"), "--output-root", str(out),
        "--cache-root", str(root / "cache"), "--profile", "fake",
        "--profiles-file", str(root / "profiles.toml"),
    ]  # fmt: skip
    refused = cli(*args, "--otel-endpoint", receiver.url, "--otel-content", env=ENV)
    assert refused.returncode == 2 and "--llm-record" in refused.stderr

    proc, doc = cli.json(
        *args, "--llm-record", str(cassette), "--otel-endpoint", receiver.url, "--otel-content",
        env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sent = receiver.bodies[-1]
    chats = [s for s in spans_of(receiver.requests()[-1]) if s.name.startswith("chat ")]
    assert len(chats) == 2
    asked = [json.loads(_attrs(c)["gen_ai.input.messages"]) for c in chats]
    texts = " ".join(p["content"] for a in asked for m in a for p in m["parts"])
    assert "Apples are red." in texts and "[REDACTED" in texts
    for chat in chats:
        answered = json.loads(_attrs(chat)["gen_ai.output.messages"])
        assert answered[0]["role"] == "assistant" and answered[0]["parts"][0]["content"]
    assert token.encode() not in sent

    # the same from the journal afterwards, and nothing of it without --content
    where = ["--output-root", str(out)]
    again = cli("journal", "otel", doc["run_id"], *where, "--endpoint", receiver.url,
                "--content", str(cassette))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert receiver.bodies[-1] == sent
    plain = cli("journal", "otel", doc["run_id"], *where, "--endpoint", receiver.url)
    assert plain.returncode == 0, plain.stderr
    assert b"gen_ai.input.messages" not in receiver.bodies[-1]
    missing = cli("journal", "otel", doc["run_id"], *where, "--endpoint", receiver.url,
                  "--content", str(root / "nope.json"))  # fmt: skip
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_run_streams_its_trace_while_it_goes(tmp_path: Path) -> None:
    """`run --otel-endpoint`: the LLM attempts and the stages that ran reach the receiver
    while the run is still going; all it sent is, span for span, what `journal otel` sends
    of the run afterwards."""
    import time

    from support.console import CLI

    docs = 6
    with start_fake(latency=0.3) as slow:
        receiver = Receiver()
        try:
            root = tmp_path / "p"
            (root / "docs").mkdir(parents=True)
            for i in range(docs):  # one lane each: lanes reach the journal one by one
                (root / "docs" / f"d{i}.md").write_text(f"Document {i} is about pears.\n")
            (root / "pipeline.toml").write_text(PIPELINE.format(schema=SCHEMA))
            (root / "profiles.toml").write_text(PROFILE.format(url=slow.url))
            cli = CLI(root / "home")
            out = root / "out"
            proc = cli.start(
                "run", str(root / "pipeline.toml"), "--output-root", str(out),
                "--cache-root", str(root / "cache"), "--profile", "fake",
                "--profiles-file", str(root / "profiles.toml"), "--jobs", "1", "--json",
                "--otel-endpoint", receiver.url,
                env={**ENV, "OTEL_BSP_SCHEDULE_DELAY": "100"},
            )  # fmt: skip
            streamed = False
            while proc.poll() is None:
                if any(
                    s.name.startswith("chat ") for r in receiver.requests() for s in spans_of(r)
                ):
                    streamed = True
                    break
                time.sleep(0.02)
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr
            assert streamed, "nothing was sent before the run ended"
            run_id = json.loads(stdout)["run_id"]
            sent = [s for r in receiver.requests() for s in spans_of(r)]
            assert sum(s.name.startswith("chat ") for s in sent) == docs
            during = len(receiver.bodies)
            again = cli("journal", "otel", run_id, "--output-root", str(out), "--endpoint",
                        receiver.url)  # fmt: skip
            assert again.returncode == 0, again.stderr
            whole = [s for r in receiver.requests()[during:] for s in spans_of(r)]
        finally:
            receiver.stop()
    assert len(sent) == len(whole)  # each span once
    key = lambda s: s.span_id  # noqa: E731
    assert [s.SerializeToString() for s in sorted(sent, key=key)] == [
        s.SerializeToString() for s in sorted(whole, key=key)
    ]
