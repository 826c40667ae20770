"""A cassette with two exchanges for one request is refused, naming both (issue #27 defect 6).

Replay could only pick one of them silently; whichever way the cassette is given
(`--llm-replay`, a profile's `replay`, `--llm-record` merging into it), the command
stops with one error line naming both exchanges and the request, exit 2 (a usage or
configuration error, docs/operations.md "Exit codes"), before any request is sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

PIPELINE = """
name = "dup"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "{text}", schema = { type = "object" } }
"""
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "http://127.0.0.1:9/v1"
{replay}
"""
DIGEST = "5e" * 32


def _exchange(key: str, content: str) -> dict[str, Any]:
    return {
        "key": key,
        "request": {"model": "fake-model", "provider": "openai"},
        "reply": {"content": content, "prompt_tokens": 1, "completion_tokens": 1},
    }


def _cassette(path: Path) -> Path:
    exchanges = [
        _exchange(DIGEST, '{"topic": "first"}'),
        _exchange("7a" * 32, '{"topic": "other"}'),
        _exchange(DIGEST, '{"topic": "second"}'),
    ]
    path.write_text(
        json.dumps({"format": "runjournal.llm-cassette", "version": 1, "exchanges": exchanges})
    )
    return path


@pytest.mark.parametrize("how", ["--llm-replay", "--llm-record", "profile"])
def test_two_exchanges_for_one_request_are_refused_naming_both(
    cli: Any, tmp_path: Path, how: str
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Alpha.\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    cassette = _cassette(tmp_path / "dup.json")
    before = cassette.read_bytes()
    replay = 'replay = "dup.json"' if how == "profile" else ""
    (tmp_path / "profiles.toml").write_text(PROFILE.format(replay=replay))
    args = ["run", str(tmp_path / "pipeline.toml"), "--output-root", str(tmp_path / "out")]
    args += ["--cache-root", str(tmp_path / "cache"), "--no-progress"]
    args += ["--profiles-file", str(tmp_path / "profiles.toml"), "--profile", "fake"]
    if how != "profile":
        args += [how, str(cassette)]
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "exchanges 1 and 3 both answer request " + DIGEST[:16] in lines[0]
    assert "dup.json" in lines[0]
    assert cassette.read_bytes() == before  # never rewritten
