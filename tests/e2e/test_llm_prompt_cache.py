"""Cached prompt tokens are priced apart (docs/configuration.md "LLM profiles" `prices`).

The fake server caches prompt prefixes as OpenAI does (from 1,024 tokens, in steps of
128; a token is a word there) and reports `prompt_tokens_details.cached_tokens`; a
pipeline whose prompts share a 2,000-word system prompt shows the cached tokens and the
lower cost in `run --json` and `explain`, online and in batch mode.
"""

from __future__ import annotations

import pytest
from support.console import CLI
from support.llm_batch import BatchProject
from support.llm_servers import start_fake, start_fake_batch

SHARED = 2000  # words of the shared system prompt
CACHED = 1920  # what the server caches of it: 1,024 + k * 128, at most SHARED
PRICES = "input_per_million = 1.0, output_per_million = 2.0, cached_input_per_million = 0.25"


def _project(cli: CLI, tmp_path) -> BatchProject:
    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    system = " ".join(f"rule{i}" for i in range(SHARED))
    pipeline = tmp_path / "pipeline.toml"
    old = 'params = { prompt = "{text}"'
    new = f'params = {{ system = "{system}", prompt = "{{text}}"'
    pipeline.write_text(pipeline.read_text().replace(old, new))
    return project


def _expected_cost(spent: dict) -> float:
    uncached = spent["prompt_tokens"] - spent["cached_tokens"]
    total = uncached * 1.0 + spent["cached_tokens"] * 0.25 + spent["completion_tokens"] * 2.0
    return total / 1_000_000


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_shared_prefixes_are_cached_and_priced_apart(cli: CLI, tmp_path, mode: str) -> None:
    project = _project(cli, tmp_path)
    server = start_fake() if mode == "online" else start_fake_batch()
    with server as fake:
        args = project.run_args("run", fake.url, "--llm-mode", mode)
        profiles = tmp_path / "run.toml"
        old = "input_per_million = 1.0, output_per_million = 2.0"
        profiles.write_text(profiles.read_text().replace(old, PRICES))
        proc, doc = cli.json(*args, env=project.env)
    assert proc.returncode == 0, proc.stderr
    spent = doc["llm"]["spent"]
    # every request after the first finds the shared prefix in the cache
    assert spent["cached_tokens"] == CACHED * (project.requests - 1)
    discount = 0.5 if mode == "batch" else 1.0
    assert spent["cost"] == pytest.approx(_expected_cost(spent) * discount, rel=1e-6)
    out = str(tmp_path / "run" / "out")
    proc = cli("explain", doc["run_id"], "--output-root", out)
    assert f"of which {spent['cached_tokens']} cached" in proc.stdout
    # the HTML report shows the cached tokens, and the batches the requests went through
    page = tmp_path / "page.html"
    proc = cli("report", doc["run_id"], "--output-root", out, "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert f"(of which {spent['cached_tokens']:,} cached)" in html
    batch_line = f" completed: {project.requests} request(s) ({project.requests} of ask)"
    assert (batch_line in html) == (mode == "batch")
