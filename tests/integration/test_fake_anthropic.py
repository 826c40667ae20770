"""The fake Anthropic Messages server speaks the API the official `anthropic` client
expects (tool use, prompt caching, errors), and the native transport reads it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

anthropic = pytest.importorskip("anthropic")

from runjournal.adapters.llm.anthropic_transport import AnthropicTransport  # noqa: E402
from support.fake_anthropic import FakeAnthropic  # noqa: E402

KEY = "sk-ant-" + "fake-" + "k" * 20
SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}
LONG = " ".join(f"rule{i}" for i in range(1500))


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(api_key=KEY).start()
    try:
        yield fake
    finally:
        fake.stop()


def test_the_official_client_gets_a_forced_tool_call_and_cache_usage(server) -> None:
    client = anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    ask = {
        "model": "claude-fake",
        "max_tokens": 50,
        "system": system,
        "messages": [{"role": "user", "content": "Alpha beta gamma"}],
        "tools": [{"name": "reply", "input_schema": SCHEMA}],
        "tool_choice": {"type": "tool", "name": "reply"},
    }
    first = client.messages.create(**ask)
    assert first.stop_reason == "tool_use"
    [block] = first.content
    assert block.type == "tool_use" and block.input == {"topic": "beta gamma"}
    assert first.usage.cache_creation_input_tokens == 1500
    assert first.usage.cache_read_input_tokens == 0
    second = client.messages.create(**ask)
    assert second.usage.cache_read_input_tokens == 1500
    assert second.usage.input_tokens == 3  # the user's words only
    text = client.messages.create(
        model="claude-fake", max_tokens=10, messages=[{"role": "user", "content": "one two"}]
    )
    assert text.content[0].type == "text" and json.loads(text.content[0].text) == {"echo": 2}


def test_errors_are_the_clients_typed_errors(server) -> None:
    wrong = anthropic.Anthropic(api_key="nope", base_url=server.url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    client = anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"seed": 1},
        )


def test_the_native_transport_sends_tools_and_cache_control_and_reads_usage(server) -> None:
    transport = AnthropicTransport(
        base_url=server.url,
        api_key=KEY,
        connect_timeout=5,
        read_timeout=30,
        scrub=lambda text: text,
        shown_endpoint="fake-anthropic",
    )
    request = {
        "model": "claude-fake",
        "messages": [
            {"role": "system", "content": LONG},
            {"role": "user", "content": "Alpha beta gamma"},
        ],
        "temperature": 0,
        "seed": 7,  # an OpenAI-only key: not sent
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
    }
    try:
        first, status = transport.send(request)
        second, _ = transport.send(request)
        listed = transport.send(
            {
                **request,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "r",
                        "schema": {"type": "array", "items": {"type": "string"}},
                    },
                },
            }
        )[0]
    finally:
        transport.close()
    assert status == 200 and json.loads(first.content) == {"topic": "beta gamma"}
    assert (first.cache_write_tokens, first.cached_tokens) == (1500, 0)
    assert (second.cache_write_tokens, second.cached_tokens) == (0, 1500)
    assert second.prompt_tokens == 1503 and first.finish_reason == "stop"
    assert json.loads(listed.content) == ["gamma"]  # a non-object schema, unwrapped
    assert all(r["cache_marked"] and r["max_tokens"] == 1024 for r in server.state.log)


def test_message_batches_through_the_official_client(server) -> None:
    client = anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)

    def params(text: str) -> dict:
        return {
            "model": "claude-fake",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": text}],
        }

    batch = client.messages.batches.create(
        requests=[
            {"custom_id": "a", "params": params("one two")},
            {"custom_id": "b", "params": params("three\nBATCH: error")},
            {"custom_id": "c", "params": params("four\nBATCH: expire")},
        ]
    )
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    assert [b.id for b in client.messages.batches.list()] == [batch.id]
    for _ in range(30):  # each poll moves the test clock an hour
        batch = client.messages.batches.retrieve(batch.id)
        if batch.processing_status == "ended":
            break
    counts = batch.request_counts
    assert batch.processing_status == "ended" and batch.results_url
    assert (counts.succeeded, counts.errored, counts.expired) == (1, 1, 1)
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert results["a"].type == "succeeded" and results["a"].message.content[0].type == "text"
    assert results["b"].type == "errored" and results["c"].type == "expired"


def _batch(client, ids: list[str]) -> str:
    params = {"model": "claude-fake", "max_tokens": 5}
    requests = [
        {"custom_id": i, "params": {**params, "messages": [{"role": "user", "content": i}]}}
        for i in ids
    ]
    return client.messages.batches.create(requests=requests).id


def test_a_lost_message_batch_is_found_by_size_and_request_ids(server) -> None:
    """adapters/llm/batch_apis.py `AnthropicBatchAPI.find` (docs/operations.md "Batch
    runs"): among the batches created since, of the record's size and claimed by no
    record, an ended one is ours only if its results' ids are the record's keys; else
    the oldest still in progress is followed."""
    import time

    from runjournal.adapters.llm.batch_apis import AnthropicBatchAPI
    from runjournal.adapters.llm.batch_records import BatchRecord

    client = anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)
    api = AnthropicBatchAPI()
    keys = ["k1", "k2", "k3"]
    record = BatchRecord(
        local="x", profile_id="p", model="claude-fake", endpoint="e", keys=keys,
        state="submitting", submitting_at=time.time(),
    )  # fmt: skip
    assert api.find(client, record, set()) is None  # nothing created since
    foreign = _batch(client, ["f1", "f2", "f3"])
    client.messages.batches.retrieve(foreign)  # a poll moves the clock: it ends
    assert client.messages.batches.retrieve(foreign).processing_status == "ended"
    _batch(client, ["k1", "k2"])  # another size
    assert api.find(client, record, set()) is None  # the ended one holds other ids
    ours = _batch(client, keys)
    assert api.find(client, record, set()) == (ours, "in_progress")  # not readable yet
    assert api.find(client, record, {ours}) is None  # claimed by a record
    client.messages.batches.retrieve(ours)
    assert api.find(client, record, set()) == (ours, "ended")  # its ids are ours
    old = BatchRecord(local="y", profile_id="p", model="m", endpoint="e", keys=keys)
    assert api.find(client, old, set()) is None  # no creation time: not looked for
