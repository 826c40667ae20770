"""`run` against a hostile server: each fault is one typed error line and a finished run.

Issue 26 defect 5: a slow-loris body, a 64 MiB body, `completion_tokens = 10**30` and a
permanent 400 each fail only their own chunk's stage, with a typed cause, bounded in
time and memory; the run is terminalized (`RunTerminated`) and the other documents'
replies are checkpointed (docs/operations.md "Hostile servers").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.llm_servers import ServerProcess, start_fake

SCHEMA = '{ type = "object", properties = { topic = { type = "string" } }, required = ["topic"] }'
PIPELINE = f"""
name = "hostile"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = {{ prompt = "{{text}}", schema = {SCHEMA}, max_tokens = 40 }}
"""
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
read_timeout = 2
attempt_timeout = 2
max_reply_bytes = 1048576
max_retries = 0
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(hang=60.0) as server:
        yield server


@pytest.mark.parametrize(
    ("fault", "cause", "words"),
    [
        ("slowloris", "timeout", "attempt_timeout 2 s"),
        ("huge", "reply_too_large", "max_reply_bytes 1048576"),
        ("tokens30", "reply_invalid", "completion_tokens"),
        ("400", "request_refused", "HTTP 400"),
        ("length", "reply_truncated", "max_tokens 40"),
    ],
)
def test_a_hostile_reply_is_one_typed_line_and_a_finished_run(
    cli: Any, fake: ServerProcess, tmp_path: Path, fault: str, cause: str, words: str
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Alpha is about apples.\n")
    (tmp_path / "docs" / "b.md").write_text(f"FAULTS: {fault}, {fault}\nBeta is hostile.\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    (tmp_path / "profiles.toml").write_text(PROFILE.format(url=fake.url))
    out = tmp_path / "out"
    args = ["run", str(tmp_path / "pipeline.toml"), "--output-root", str(out)]
    args += ["--cache-root", str(tmp_path / "c"), "--profile", "fake"]
    args += ["--profiles-file", str(tmp_path / "profiles.toml")]
    started = time.monotonic()
    proc, doc = cli.json(*args, timeout=120)
    assert time.monotonic() - started < 60
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"lane 'docs/b.md' stage_failed ({cause})" in lines[0] and words in lines[0]
    assert doc["run_id"] and doc["error"]["cause"] == cause
    proc, shown = cli.json("journal", "show", doc["run_id"], "--output-root", str(out))
    types = [e["type"] for e in shown["events"]]
    assert types[-1] == "RunTerminated"
    attempts = [e["data"] for e in shown["events"] if e["type"] == "LLMCallAttempted"]
    assert {a["status"] for a in attempts} == {"ok", cause if cause != "timeout" else "timeout"}
    written = [e["data"] for e in shown["events"] if e["type"] == "CheckpointWritten"]
    assert written, "docs/a.md's reply is kept"
