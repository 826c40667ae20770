"""The native Anthropic provider (the `anthropic` extra) against the fake Messages server:
structured output through a forced tool with the step's JSON Schema, the system prompt
marked for the prompt cache, cache reads and writes priced apart (docs/configuration.md
"LLM profiles")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.console import CLI
from support.llm_batch import BatchProject
from support.llm_servers import FAKE_KEY_ENV, start_fake_anthropic

pytest.importorskip("anthropic")

SHARED = 1500  # words of the shared system prompt: cached from the second request on
PROFILE = """
[profiles.claude]
provider = "anthropic"
model = "claude-fake"
base_url = "{url}"
api_key_env = "{key_env}"
read_timeout = 30
max_retries = 0
[profiles.claude.prices]
input_per_million = 3.0
output_per_million = 15.0
cached_input_per_million = 0.3
cache_write_input_per_million = 3.75
"""


def test_a_step_asks_claude_through_a_forced_tool_and_the_cache_is_priced(
    cli: CLI, tmp_path: Path
) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    system = " ".join(f"rule{i}" for i in range(SHARED))
    pipeline = tmp_path / "pipeline.toml"
    old = 'params = { prompt = "{text}"'
    pipeline.write_text(
        pipeline.read_text().replace(old, f'params = {{ system = "{system}", prompt = "{{text}}"')
    )
    with start_fake_anthropic() as fake:
        args = project.run_args("run", fake.url)
        profiles = tmp_path / "run.toml"
        profiles.write_text(PROFILE.format(url=fake.url, key_env=FAKE_KEY_ENV))
        args[args.index("--profile") + 1] = "claude"
        proc, doc = cli.json(*args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        received = fake.requests()
    assert len(received) == project.requests
    assert all(r["cache_marked"] for r in received)
    assert all(r["tool_choice"] == {"type": "tool", "name": "reply"} for r in received)
    artifacts = project.artifacts("run")
    answers = [a["answer"] for data in artifacts.values() for a in json.loads(data)]
    assert len(answers) == project.requests
    assert all(set(a) == {"topic"} and isinstance(a["topic"], str) for a in answers)
    spent = doc["llm"]["spent"]
    assert spent["attempts"] == project.requests
    assert spent["cached_tokens"] == SHARED * (project.requests - 1)
    written = SHARED  # the first request wrote the system prompt to the cache
    fresh = spent["prompt_tokens"] - spent["cached_tokens"] - written
    expected = (
        fresh * 3.0
        + spent["cached_tokens"] * 0.3
        + written * 3.75
        + spent["completion_tokens"] * 15.0
    ) / 1_000_000
    assert spent["cost"] == pytest.approx(expected, rel=1e-6)


def test_an_adhoc_anthropic_profile_needs_its_key(cli: CLI, tmp_path: Path) -> None:
    project = BatchProject(cli, tmp_path, docs=1, chunks=1)
    args = project.run_args("run", "http://127.0.0.1:9")
    args[args.index("--profile") + 1] = "anthropic/claude-fake"
    env = {k: v for k, v in project.env.items() if k != "ANTHROPIC_API_KEY"}
    proc = cli(*args, env=env)
    assert proc.returncode == 1
    assert "ANTHROPIC_API_KEY is not set" in proc.stderr and "Traceback" not in proc.stderr


def test_check_online_asks_the_anthropic_models_route(cli: CLI, tmp_path: Path) -> None:
    project = BatchProject(cli, tmp_path, docs=1, chunks=1)
    with start_fake_anthropic() as fake:
        profiles = tmp_path / "claude.toml"
        profiles.write_text(PROFILE.format(url=fake.url, key_env=FAKE_KEY_ENV))
        where = ["--profiles-file", str(profiles), "--profile", "claude"]
        proc = cli("check", str(tmp_path / "pipeline.toml"), "--online", *where, env=project.env)
        assert proc.returncode == 0, proc.stderr
        other = profiles.read_text().replace('model = "claude-fake"', 'model = "claude-other"')
        profiles.write_text(other)
        proc = cli("check", str(tmp_path / "pipeline.toml"), "--online", *where, env=project.env)
        assert proc.returncode == 2
        assert "does not list model 'claude-other' (it lists: claude-fake)" in proc.stderr


def test_message_batches_answer_as_online_at_half_the_cost(cli: CLI, tmp_path: Path) -> None:
    """Batch mode with the Anthropic provider: its message batches, the same outputs as
    its online run, half the cost; an errored request alone in a follow-up batch."""
    project = BatchProject(cli, tmp_path, docs=2, chunks=3, faulty=(1,))
    with start_fake_anthropic() as fake:
        docs = {}
        for mode in ("online", "batch"):
            args = project.run_args(mode, fake.url, "--llm-mode", mode)
            (tmp_path / f"{mode}.toml").write_text(
                PROFILE.format(url=fake.url, key_env=FAKE_KEY_ENV)
            )
            args[args.index("--profile") + 1] = "claude"
            proc, docs[mode] = cli.json(*args, env=project.env)
            assert proc.returncode == 0, proc.stderr
        state = fake.control("/_control/batches")
    first, follow = state["batches"]
    assert len(first["requests"]) == project.requests and len(follow["requests"]) == 1
    assert {r["outcome"] for r in first["requests"]} == {"succeeded", "errored"}
    assert set(state["billed"].values()) == {2}  # each request: once online, once batched
    assert project.artifacts("batch") == project.artifacts("online")
    online, batch = docs["online"]["llm"]["spent"], docs["batch"]["llm"]["spent"]
    assert batch["cost"] == pytest.approx(online["cost"] / 2)
