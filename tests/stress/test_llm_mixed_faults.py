"""10% mixed faults at many jobs: the run finishes and every retry is journaled by cause.

Issue 26 "What it must show": the adaptive window (domain/aimd.py) under 429s, 5xx,
resets and malformed bodies at once. Size: RJ_STRESS_LLM_CHUNKS chunks (default 160),
one document each, `--jobs 32`; each faulty chunk fails once, then succeeds.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from support.llm_servers import start_fake

CHUNKS = int(os.environ.get("RJ_STRESS_LLM_CHUNKS", "160"))
FAULTS = {"429@0.2": "rate_limited", "500": "server_error", "503": "server_error"}
FAULTS |= {"reset": "connection_error", "malformed": "malformed_response"}
PIPELINE = """
name = "mixed"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 80
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "{text}", max_tokens = 20 }
"""
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
read_timeout = 5
max_retries = 3
backoff_initial = 0.05
backoff_max = 0.1
"""


def test_mixed_faults_finish_and_every_retry_is_journaled(cli: Any, tmp_path: Path) -> None:
    rng = random.Random(26)
    expected: dict[str, int] = {}
    (tmp_path / "docs").mkdir()
    paragraphs = []
    for n in range(CHUNKS):
        text = f"Paragraph {n} about topic {n * 7}."
        if rng.random() < 0.10:
            fault = rng.choice(sorted(FAULTS))
            expected[FAULTS[fault]] = expected.get(FAULTS[fault], 0) + 1
            text = f"FAULTS: {fault}\n{text}"
        paragraphs.append(text)
    for d, text in enumerate(paragraphs):  # one chunk each: one script per request
        (tmp_path / "docs" / f"d{d:04d}.md").write_text(text + "\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    with start_fake() as fake:
        (tmp_path / "profiles.toml").write_text(PROFILE.format(url=fake.url))
        args = ["run", str(tmp_path / "pipeline.toml"), "--jobs", "32", "--profile", "fake"]
        args += ["--profiles-file", str(tmp_path / "profiles.toml")]
        args += ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
        proc, doc = cli.json(*args, timeout=600)
        received = len(fake.requests())
    assert proc.returncode == 0, proc.stderr
    llm = doc["llm"]
    assert llm["spent"]["calls"] == CHUNKS
    assert llm["spent"]["attempts"] == CHUNKS + sum(expected.values()) == received
    assert {k: v["attempts"] for k, v in llm["retries"].items()} == expected
    assert llm["retries"]["rate_limited"]["wait_s"] == round(0.2 * expected["rate_limited"], 3)
