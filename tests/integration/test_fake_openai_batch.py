"""The fake Files + Batches server speaks the API the official `openai` client expects.

Every call here goes through `openai.OpenAI` (files.create, files.content, batches.create,
batches.retrieve, batches.cancel), so a fake that drifts from the client's models fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from support.fake_openai import completion
from support.fake_openai_batch import FakeOpenAIBatch, body_digest

KEY = "sk-" + "batch-fake-" + "k" * 20


@pytest.fixture
def server() -> Iterator[FakeOpenAIBatch]:
    fake = FakeOpenAIBatch(api_key=KEY).start()
    try:
        yield fake
    finally:
        fake.stop()


def _client(fake: FakeOpenAIBatch) -> openai.OpenAI:
    return openai.OpenAI(api_key=KEY, base_url=fake.url, max_retries=0, timeout=30)


def _body(i: int, extra: str = "") -> dict:
    prompt = f"Paragraph number {i} about topic {i}.{extra}"
    return {
        "model": "fake-model",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 20,
        "temperature": 0,
    }


def _jsonl(bodies: list[dict]) -> bytes:
    lines = [
        json.dumps(
            {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}
        )
        for i, b in enumerate(bodies)
    ]
    return ("\n".join(lines) + "\n").encode()


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    text = client.files.content(file_id).content.decode()
    return [json.loads(line) for line in text.splitlines() if line]


def test_a_batch_goes_through_every_state_and_answers_as_online(server: FakeOpenAIBatch) -> None:
    client = _client(server)
    bodies = [_body(i) for i in range(10)]
    upload = client.files.create(file=("in.jsonl", _jsonl(bodies)), purpose="batch")
    assert upload.purpose == "batch" and upload.bytes == len(_jsonl(bodies))
    assert client.files.content(upload.id).content == _jsonl(bodies)
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "r1"},
    )
    assert batch.status == "validating" and batch.expires_at == batch.created_at + 24 * 3600
    assert batch.metadata == {"run": "r1"}
    server.advance(60)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "in_progress" and batch.request_counts.total == 10
    server.advance(300)  # half of --progress: half the requests done
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "in_progress" and batch.request_counts.completed == 5
    server.advance(300)
    assert client.batches.retrieve(batch.id).status == "finalizing"
    server.advance(60)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.completed_at is not None
    assert batch.request_counts.completed == 10 and batch.request_counts.failed == 0
    assert batch.error_file_id is None
    out = _lines(client, batch.output_file_id)
    assert sorted(line["custom_id"] for line in out) == sorted(f"r{i}" for i in range(10))
    for line in out:
        i = int(line["custom_id"][1:])
        assert line["error"] is None and line["response"]["status_code"] == 200
        assert line["response"]["body"] == completion(bodies[i])  # as the online endpoint
        assert line["id"].startswith("batch_req_") and line["response"]["request_id"]


def test_errors_and_expiry_leave_partial_results_and_an_error_file(
    server: FakeOpenAIBatch,
) -> None:
    client = _client(server)
    bodies = [_body(i) for i in range(6)]
    bodies[1] = _body(1, "\nBATCH: error")
    bodies[4] = _body(4, "\nBATCH: expire")
    upload = client.files.create(file=("in.jsonl", _jsonl(bodies)), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    server.advance(24 * 3600)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "expired" and batch.expired_at is not None
    assert batch.request_counts.completed == 4 and batch.request_counts.failed == 2
    assert {line["custom_id"] for line in _lines(client, batch.output_file_id)} == {
        "r0",
        "r2",
        "r3",
        "r5",
    }
    errors = {line["custom_id"]: line for line in _lines(client, batch.error_file_id)}
    assert errors["r1"]["response"]["status_code"] == 500 and errors["r1"]["error"] is None
    assert errors["r4"]["response"] is None
    assert errors["r4"]["error"]["code"] == "batch_expired"
    # the same requests in a follow-up batch succeed: faults hit a request's first batch
    again = client.files.create(
        file=("again.jsonl", _jsonl([bodies[1], bodies[4]])), purpose="batch"
    )
    follow = client.batches.create(
        input_file_id=again.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    server.advance(60)
    server.advance(600)
    server.advance(60)
    follow = client.batches.retrieve(follow.id)
    assert follow.status == "completed" and follow.request_counts.completed == 2
    billed = server.state.billed
    assert all(billed[body_digest(b)] == 1 for b in bodies)


def test_a_cancelled_batch_keeps_what_completed(server: FakeOpenAIBatch) -> None:
    client = _client(server)
    upload = client.files.create(
        file=("in.jsonl", _jsonl([_body(i) for i in range(4)])), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    server.advance(60 + 300)
    batch = client.batches.cancel(batch.id)
    assert batch.status == "cancelling" and batch.cancelling_at is not None
    server.advance(1)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "cancelled" and batch.request_counts.completed == 2
    assert len(_lines(client, batch.output_file_id)) == 2


def test_a_bad_input_file_fails_validation_with_line_errors(server: FakeOpenAIBatch) -> None:
    client = _client(server)
    data = _jsonl([_body(0), _body(1)]).replace(b'"r1"', b'"r0"') + b"not json\n"
    upload = client.files.create(file=("bad.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    server.advance(60)
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "failed" and batch.failed_at is not None
    codes = {(e.code, e.line) for e in batch.errors.data}
    assert ("duplicate_custom_id", 2) in codes and ("invalid_json_line", 3) in codes


def test_unknown_ids_and_a_wrong_key_are_api_errors(server: FakeOpenAIBatch) -> None:
    client = _client(server)
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch-nope")
    with pytest.raises(openai.NotFoundError):
        client.files.content("file-nope")
    wrong = openai.OpenAI(api_key="sk-wrong", base_url=server.url, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.files.create(file=("in.jsonl", b"{}\n"), purpose="batch")


def test_rates_pick_requests_by_digest_only_in_their_first_batch() -> None:
    fake = FakeOpenAIBatch(error_rate=0.03, expire_rate=0.02, tick=0).start()
    try:
        client = openai.OpenAI(api_key="unused", base_url=fake.url, max_retries=0)
        bodies = [_body(i) for i in range(400)]
        upload = client.files.create(file=("in.jsonl", _jsonl(bodies)), purpose="batch")
        batch = client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        fake.advance(24 * 3600)
        batch = client.batches.retrieve(batch.id)
        counts = batch.request_counts
        assert batch.status == "expired" and counts.failed > 0 and counts.completed > 360
        errored = _lines(client, batch.error_file_id)
        kinds = {"error" if e["error"] is None else e["error"]["code"] for e in errored}
        assert kinds == {"error", "batch_expired"}
    finally:
        fake.stop()


def test_batches_are_listed_newest_first_with_a_cursor(server: FakeOpenAIBatch) -> None:
    client = _client(server)
    upload = client.files.create(file=("in.jsonl", _jsonl([_body(0)])), purpose="batch")
    made = [
        client.batches.create(
            input_file_id=upload.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"n": str(i)},
        ).id
        for i in range(3)
    ]
    listed = [b.id for b in client.batches.list(limit=2)]  # the client follows the cursor
    assert listed == list(reversed(made))
