"""Editing LLM spend is caught (issue 27, defect 8): a rechained, re-sealed edit of an
attempt's cost or tokens passed `journal audit`, because the run-directory check did
not compare LLM spend. Now `manifest.json`'s `llm` must equal the journal's fold."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from runjournal.adapters.journal.application import open_journal
from runjournal.domain.events import LLMCallAttempted, RunEvent, SealReason
from runjournal.domain.seal import seal_aggregate_id
from support.journal_forgery import rechain
from support.llm_servers import ServerProcess, start_fake

PIPELINE = """
name = "ask"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "{text}", schema = { type = "object" }, temperature = 0, max_tokens = 40 }
"""
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
max_retries = 0
prices = {{ input_per_million = 1.0, output_per_million = 2.0 }}
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


def _cheaper(events: list[RunEvent]) -> list[RunEvent]:
    done = False
    out = []
    for event in events:
        if isinstance(event, LLMCallAttempted) and not done:
            event = msgspec.structs.replace(event, cost=0.0, completion_tokens=0)
            done = True
        out.append(event)
    assert done
    return out


def test_rechained_and_resealed_llm_spend_is_caught(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Apples are red.\n\nBananas are yellow.\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    (tmp_path / "profiles.toml").write_text(PROFILE.format(url=fake.url))
    out = tmp_path / "out"
    env = {"RJ_FAKE_KEY": "sk-local-" + "y" * 24}
    proc, doc = cli.json(
        "run", str(tmp_path / "pipeline.toml"), "--output-root", str(out),
        "--cache-root", str(tmp_path / "cache"), "--profile", "fake",
        "--profiles-file", str(tmp_path / "profiles.toml"), env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert doc["llm"]["spent"]["cost"] > 0
    run_id, journal = doc["run_id"], out / "journal.sqlite3"
    audit = ("journal", "audit", run_id, "--output-root", str(out))
    assert cli(*audit).returncode == 0
    # the forger lowers one attempt's cost, recomputes the chain and seals again (no key
    # was made, so the seal is unsigned and nothing else can tell)
    rechain(journal, run_id, _cheaper)
    with sqlite3.connect(journal) as db:
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ?", (seal_aggregate_id(run_id).hex,)
        )
    store = open_journal(str(journal))
    store.seal(run_id, SealReason.TERMINATED)
    store.close()
    proc = cli(*audit)
    assert proc.returncode == 1, proc.stdout
    assert "hash chain verified" in proc.stdout  # a consistent forgery ...
    lines = [ln for ln in proc.stdout.splitlines() if "run directory: LLMCallAttempted:" in ln]
    assert lines and "manifest.json records LLM spend" in lines[0], proc.stdout  # ... caught
