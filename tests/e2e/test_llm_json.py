"""`llm.json` end to end on the offline profile, and a provider without a runtime."""

from __future__ import annotations

import json
from pathlib import Path

PIPELINE = """
name = "ask"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
profile = "{profile}"
params = {{ prompt = "Summarise {{source}} as JSON: {{text}}" }}
"""


def _project(tmp_path: Path, profile: str) -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "a.md").write_text("First paragraph.\n\nSecond paragraph.\n")
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.format(profile=profile))
    return path


def test_offline_profile_runs_and_resumes(cli, tmp_path):
    pipeline = _project(tmp_path, "offline")
    roots = ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
    proc, doc = cli.json("run", str(pipeline), *roots)
    assert proc.returncode == 0, proc.stderr
    artifact = next(o for o in doc["outputs"] if o["name"].startswith("artifacts/ask/"))
    answers = json.loads(Path(artifact["path"]).read_text())
    assert answers and all(a["answer"]["model"] == "echo-1" for a in answers)
    proc, again = cli.json("run", str(pipeline), "--resume", *roots)
    assert proc.returncode == 0 and set(again["decisions"]) == {"reused"}


def test_a_provider_without_runtime_fails_the_stage_clearly(cli, tmp_path):
    pipeline = _project(tmp_path, "remote")
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        '[profiles.remote]\nprovider = "cohere"\nmodel = "c"\napi_key_env = "RJ_TEST_KEY"\n'
    )
    secret = "sk-" + "proj-" + "Z" * 40
    proc, doc = cli.json(
        "run",
        str(pipeline),
        "--profiles-file",
        str(profiles),
        "--output-root",
        str(tmp_path / "o"),
        "--cache-root",
        str(tmp_path / "c"),
        env={"RJ_TEST_KEY": secret},
    )
    assert proc.returncode == 1
    assert doc["error"]["reason_code"] == "stage_failed" and doc["error"]["step"] == "ask"
    assert "has no runtime" in doc["error"]["message"]
    assert secret not in proc.stdout + proc.stderr
