"""The official client's per-request cost, counted rather than timed (issue 26, "Cheap
calls"; docs/performance.md "Concurrency: `--jobs N` against an LLM endpoint").

The client's connection pool walks every connection it holds twice a request, so one
client shared by 64 threads cost each request about 1,600 Python function calls more than
a client with one connection; the transport gives each calling thread (each group of
`THREADS_PER_CLIENT`) a client of its own. Counted here: clients built, connections per pool,
Python function calls per request (cProfile's count: the same on a loaded box), typed
reply models built (none: the body is read raw and decoded once), telemetry headers sent.
"""

from __future__ import annotations

import cProfile
import importlib
import pstats
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from runjournal.adapters.llm.transport import THREADS_PER_CLIENT, OpenAITransport
from support.llm_servers import ServerProcess, start_fake

KEY_ENV = "RJ_FAKE_KEY"
KEY = "sk-" + "test-" + "C5" * 20
THREADS = 64


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    # a little latency: the 64 threads' requests are in flight together, so a shared
    # pool would open one connection per thread
    with start_fake(latency=0.05, api_key_env=KEY_ENV, env={KEY_ENV: KEY}) as server:
        yield server


def transport(url: str) -> OpenAITransport:
    return OpenAITransport(
        base_url=url,
        api_key=KEY,
        connect_timeout=5,
        read_timeout=30,
        scrub=lambda text: text,
        shown_endpoint=url,
    )


def request(i: int) -> dict[str, Any]:
    return {
        "model": "fake-model",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": f"Document {i} paragraph about things."}],
    }


def calls_per_send(sender: OpenAITransport, first: int, n: int = 20) -> float:
    """Python function calls one `send` makes, on the calling thread (cProfile counts)."""
    profile = cProfile.Profile()
    profile.enable()
    for i in range(first, first + n):
        sender.send(request(i))
    profile.disable()
    return pstats.Stats(profile).total_calls / n  # type: ignore[attr-defined]


def pool_sizes(sender: OpenAITransport) -> list[int]:
    sizes = []
    for client in sender._clients:
        pool = getattr(getattr(client._client, "_transport", None), "_pool", None)
        connections = getattr(pool, "_connections", None)
        if connections is None:
            pytest.skip("the HTTP library's pool does not list its connections")
        sizes.append(len(connections))
    return sizes


def test_calling_threads_share_a_client_by_groups(fake: ServerProcess) -> None:
    sender = transport(fake.url)
    try:
        warm = threading.Barrier(THREADS)
        measured = threading.Barrier(THREADS)
        counts: dict[str, float] = {}
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                warm.wait(timeout=60)
                for i in range(3):
                    sender.send(request(k * 10 + i))
                measured.wait(timeout=60)
                if k == 0:  # its pool holds its group's connections (its own)
                    counts["shared"] = calls_per_send(sender, 10_000)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors
        assert sender.clients_built == THREADS // THREADS_PER_CLIENT
        assert max(pool_sizes(sender)) <= THREADS_PER_CLIENT
    finally:
        sender.close()

    alone = transport(fake.url)  # one thread, one connection: the client's own floor
    try:
        alone.send(request(0))
        floor = calls_per_send(alone, 20_000)
        assert alone.clients_built == 1
    finally:
        alone.close()
    # one pool of 64 connections made this about 1.6x (4,000 calls against 2,400)
    assert counts["shared"] <= 1.2 * floor, (counts["shared"], floor)


def test_one_thread_keeps_one_client(fake: ServerProcess) -> None:
    sender = transport(fake.url)
    try:
        for i in range(5):
            sender.send(request(i))
        assert sender.clients_built == 1
        assert pool_sizes(sender) == [1]
    finally:
        sender.close()


def test_no_typed_reply_model_and_no_telemetry_headers(
    fake: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openai

    base = importlib.import_module("openai._base_client")
    built: list[Any] = []
    for name in ("construct_type", "validate_type"):
        original = getattr(base, name)

        def counted(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            built.append(kwargs.get("type_"))
            return __original(*args, **kwargs)

        monkeypatch.setattr(base, name, counted)
    http_lib = importlib.import_module(
        openai.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0]
    )
    sent: list[dict[str, str]] = []
    urls: list[str] = []
    send = http_lib.Client.send

    def recorded(self: Any, req: Any, **kwargs: Any) -> Any:
        sent.append({k.lower(): v for k, v in req.headers.items()})
        urls.append(str(req.url))
        return send(self, req, **kwargs)

    monkeypatch.setattr(http_lib.Client, "send", recorded)
    sender = transport(fake.url)
    try:
        for i in range(5):
            reply, status = sender.send(request(i))
            assert status == 200 and reply.content
    finally:
        sender.close()
    assert built == []  # no pydantic ChatCompletion: the raw body is decoded once
    assert len(sent) == 5
    # the full URL the options carry is the one the client would join from its base URL
    assert urls == [fake.url.rstrip("/") + "/chat/completions"] * 5
    for headers in sent:
        assert headers["authorization"] == f"Bearer {KEY}"
        assert headers["content-type"] == "application/json"
        stainless = {k for k in headers if k.startswith("x-stainless-")}
        assert stainless == {"x-stainless-raw-response"}


def test_closed_transport_builds_again(fake: ServerProcess) -> None:
    sender = transport(fake.url)
    sender.send(request(0))
    sender.close()
    try:
        reply, _ = sender.send(request(1))
        assert reply.content
        assert sender.clients_built == 2
    finally:
        sender.close()


def test_without_a_tls_context_to_share_threads_share_one_client(
    fake: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another HTTP library layout: building a client per thread would load the CA bundle
    # each time (about 18 ms of CPU), so the threads keep one client
    from runjournal.adapters.llm import transport as transport_module

    monkeypatch.setattr(transport_module, "_tls_context", lambda client: None)
    sender = transport(fake.url)
    try:
        threads = [threading.Thread(target=sender.send, args=(request(k),)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sender.clients_built == 1
    finally:
        sender.close()


def test_a_request_costs_less_than_the_clients_own_post(fake: ServerProcess) -> None:
    # the client's `post` builds its request options anew (about 220 calls), joins the
    # path to its base URL (about 220) and sends the SDK's telemetry headers (about 350);
    # the transport copies options built once with the full URL and omits the headers:
    # about 1,950 calls against 2,880 (0.68x), both on one connection
    import openai

    http_lib = importlib.import_module(
        openai.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0]
    )
    client = openai.OpenAI(api_key=KEY, base_url=fake.url, max_retries=0)

    class Plain:
        def send(self, body: dict[str, Any]) -> None:
            response = client.post(
                "/chat/completions",
                body=body,
                cast_to=http_lib.Response,
                options={"headers": {"X-Stainless-Raw-Response": "stream"}},
            )
            try:
                b"".join(response.iter_bytes())
            finally:
                response.close()

    sender = transport(fake.url)
    try:
        Plain().send(request(0))
        sender.send(request(0))
        plain = calls_per_send(Plain(), 100)  # type: ignore[arg-type]
        ours = calls_per_send(sender, 200)
    finally:
        sender.close()
        client.close()
    assert ours <= 0.75 * plain, (ours, plain)
