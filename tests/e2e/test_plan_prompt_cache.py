"""`plan` forecasts online and batch cost side by side, with the prompt-cache hits of
shared prefixes (docs/operations.md "`plan`", "Prompt caching").

Issue 30: a pipeline whose prompts share a 2,000-token prefix; `plan`'s forecast is
within 5% of the run's spend at list prices, checked against the fake server's own usage
(cached tokens included). The fakes count a word as a token and `plan` four characters
as one, so the shared system prompt is made of 2,000 three-letter words (four characters
with their space): both count it as 2,000 tokens.
"""

from __future__ import annotations

import pytest
from support.console import CLI
from support.llm_batch import BatchProject
from support.llm_servers import start_fake, start_fake_batch

SHARED = 2000  # tokens of the shared system prompt
PRICES = "input_per_million = 1.0, output_per_million = 2.0, cached_input_per_million = 0.25"
LIST = {"input": 1.0, "output": 2.0, "cached": 0.25}


def _system() -> str:
    return " ".join(f"{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}{i % 10}" for i in range(SHARED))


def cached_project(cli: CLI, tmp_path, *, docs: int = 2, chunks: int = 3) -> BatchProject:
    project = BatchProject(cli, tmp_path, docs=docs, chunks=chunks)
    pipeline = tmp_path / "pipeline.toml"
    old = 'params = { prompt = "{text}"'
    new = f'params = {{ system = "{_system()}", prompt = "{{text}}"'
    pipeline.write_text(pipeline.read_text().replace(old, new))
    return project


def _priced(project: BatchProject, name: str, url: str, *extra: str) -> list[str]:
    args = project.run_args(name, url, *extra)
    profiles = project.root / f"{name}.toml"
    old = "input_per_million = 1.0, output_per_million = 2.0"
    profiles.write_text(profiles.read_text().replace(old, PRICES))
    return args


def _list_cost(usage: dict) -> float:
    """What the server's usage costs at list prices (cached prompt tokens apart)."""
    fresh = usage["prompt_tokens"] - usage["cached_tokens"]
    total = (
        fresh * LIST["input"]
        + usage["cached_tokens"] * LIST["cached"]
        + usage["completion_tokens"] * LIST["output"]
    )
    return total / 1_000_000


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_plan_forecasts_cache_hits_and_cost_within_5_percent(cli: CLI, tmp_path, mode: str) -> None:
    project = cached_project(cli, tmp_path)
    server = start_fake() if mode == "online" else start_fake_batch()
    with server as fake:
        args = _priced(project, "run", fake.url, "--llm-mode", mode)
        plan_args = ["plan", *[a for a in args[1:] if a != "--no-progress"]]
        proc, plan = cli.json(*plan_args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        text = cli(*plan_args, env=project.env).stdout
        assert fake.usage()["requests"] == 0, "plan called the LLM"
        proc, run = cli.json(*args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        usage = fake.usage()
    llm = plan["estimate"]["llm"]
    # both modes side by side, whichever the run takes; `executed` is the run's
    online, batch = llm["online"]["executed"], llm["batch"]["executed"]
    assert batch["cost"] == pytest.approx(online["cost"] / 2)
    assert llm["executed"] == {**llm[mode]["executed"], "basis": llm["executed"]["basis"]}
    assert llm["executed"]["basis"]["prompt"] == project.requests
    # every request after the first finds the shared prefix in the cache: 1,920 tokens
    # (1,024 + 7 * 128), as the server's cache
    assert usage["cached_tokens"] == 1920 * (project.requests - 1)
    assert llm[mode]["executed"]["cached_tokens"] == usage["cached_tokens"]
    spent = run["llm"]["spent"]
    assert spent["cached_tokens"] == usage["cached_tokens"]
    discount = 0.5 if mode == "batch" else 1.0
    assert spent["cost"] == pytest.approx(_list_cost(usage) * discount, rel=1e-6)
    forecast = llm[mode]["executed"]["cost"]
    assert forecast == pytest.approx(spent["cost"], rel=0.05)
    assert online["cost"] == pytest.approx(_list_cost(usage), rel=0.05)
    # without the cache the forecast would be far off: the prefix is most of the cost
    uncached = online["prompt_tokens"] * LIST["input"] / 1_000_000
    assert uncached > 2 * _list_cost(usage)
    # the text output says the same
    assert f"(of which {online['cached_tokens']} cached), cost {online['cost']:.6f}" in text
    assert f"llm: batch  {batch['prompt_tokens']} prompt tokens" in text


CLAUDE = """
[profiles.claude]
provider = "anthropic"
model = "claude-fake"
base_url = "{url}"
api_key_env = "{key_env}"
read_timeout = 30
max_retries = 0
batch_poll_interval = 0.01
[profiles.claude.prices]
input_per_million = 3.0
output_per_million = 15.0
cached_input_per_million = 0.3
cache_write_input_per_million = 3.75
"""


def _claude_cost(spent: dict, written: int) -> float:
    fresh = spent["prompt_tokens"] - spent["cached_tokens"] - written
    total = (
        fresh * 3.0
        + spent["cached_tokens"] * 0.3
        + written * 3.75
        + spent["completion_tokens"] * 15
    )
    return total / 1_000_000


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_anthropic_marks_shared_user_prefixes_and_plan_forecasts_them(
    cli: CLI, tmp_path, mode: str
) -> None:
    """Issue 30: `cache_control` on shared prefixes, not only the system prompt. The
    prompts share a 2,000-token instruction before their text, in the user message: it is
    marked where the prompts stop sharing it (the line break before the text), written
    to the cache once and read by the other requests; `plan` forecasts it within 5%."""
    pytest.importorskip("anthropic")
    from support.llm_servers import FAKE_KEY_ENV, start_fake_anthropic

    project = BatchProject(cli, tmp_path, docs=2, chunks=3)
    pipeline = tmp_path / "pipeline.toml"
    old = 'params = { prompt = "{text}"'
    new = f'params = {{ prompt = "{_system()}\\n\\n{{text}}"'
    pipeline.write_text(pipeline.read_text().replace(old, new))
    with start_fake_anthropic() as fake:
        args = project.run_args("run", fake.url, "--llm-mode", mode)
        (tmp_path / "run.toml").write_text(CLAUDE.format(url=fake.url, key_env=FAKE_KEY_ENV))
        args[args.index("--profile") + 1] = "claude"
        plan_args = ["plan", *[a for a in args[1:] if a != "--no-progress"]]
        proc, plan = cli.json(*plan_args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        proc, run = cli.json(*args, env=project.env)
        assert proc.returncode == 0, proc.stderr
        received = fake.requests()
    n = project.requests
    marked = [r["user_marked"] for r in received]
    spent = run["llm"]["spent"]
    if mode == "online":
        # the first prompt has no earlier one to share with; the second writes the cache
        assert marked == [False] + [True] * (n - 1)
        assert spent["cached_tokens"] == SHARED * (n - 2)
    else:
        # a batch's prompts are marked against each other: the first answered writes
        assert marked == [True] * n
        assert spent["cached_tokens"] == SHARED * (n - 1)
    discount = 0.5 if mode == "batch" else 1.0
    assert spent["cost"] == pytest.approx(_claude_cost(spent, SHARED) * discount, rel=1e-6)
    forecast = plan["estimate"]["llm"][mode]["executed"]
    # four characters a token against the fake's words: 1,999 tokens a prefix, not 2,000
    assert forecast["cached_tokens"] == pytest.approx(spent["cached_tokens"], rel=0.01)
    assert forecast["cost"] == pytest.approx(spent["cost"], rel=0.05)
