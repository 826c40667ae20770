"""`runjournal run` with the `openai` provider against the fault-injecting fake server.

Success, retries, a permanent failure (typed cause, one line, no traceback), resume
after success (zero requests) and after a partial failure (only what had not
succeeded), profile-source changes, budgets, record/replay and the offline example.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.llm_servers import ASK_PIPELINE, ASK_SCHEMA, REPO, ServerProcess, start_fake

SCHEMA, PIPELINE = ASK_SCHEMA, ASK_PIPELINE
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 2
max_retries = {retries}
backoff_initial = 0.05
backoff_max = 0.1
prices = {{ input_per_million = 1.0, output_per_million = 2.0 }}
"""
DOCS = {
    "a.md": "Alpha paragraph one, about apples.\n\nAlpha paragraph two, about apricots.\n",
    "b.md": "Beta has one paragraph about bananas.\n",
    "c.md": "Gamma first paragraph, about grapes.\n\nGamma second paragraph, about guavas.\n",
}


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


class Project:
    def __init__(self, root: Path, url: str, *, retries: int = 2) -> None:
        self.root = root
        (root / "docs").mkdir(parents=True, exist_ok=True)
        for name, text in DOCS.items():
            (root / "docs" / name).write_text(text)
        self.pipeline = root / "pipeline.toml"
        self.pipeline.write_text(PIPELINE.format(schema=SCHEMA))
        self.profiles = root / "profiles.toml"
        self.profiles.write_text(PROFILE.format(url=url, retries=retries))
        self.out = root / "out"
        self.cache = root / "cache"

    def args(self, *extra: str, profiles: bool = True) -> list[str]:
        base = ["run", str(self.pipeline), "--output-root", str(self.out)]
        base += ["--cache-root", str(self.cache), "--profile", "fake"]
        if profiles:
            base += ["--profiles-file", str(self.profiles)]
        return [*base, *extra]

    def events(self, run_id: str, cli: Any) -> list[dict[str, Any]]:
        proc, doc = cli.json("journal", "show", run_id, "--output-root", str(self.out))
        assert proc.returncode == 0, proc.stderr
        return doc["events"]


def _env() -> dict[str, str]:
    return {"RJ_FAKE_KEY": "sk-" + "local-" + "x" * 24}


def _attempts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "LLMCallAttempted"]


def _prompts(requests: list[dict[str, Any]]) -> list[str]:
    return sorted(r["prompt"].strip() for r in requests)


def test_success_then_resume_makes_zero_requests(cli, fake: ServerProcess, tmp_path: Path) -> None:
    project = Project(tmp_path, fake.url)
    before = len(fake.requests())
    proc, doc = cli.json(*project.args(), env=_env())
    assert proc.returncode == 0, proc.stderr
    first = fake.requests()[before:]
    assert len(first) == 5  # one request per chunk
    assert all(r["temperature"] == 0 and r["seed"] == 7 and r["max_tokens"] == 40 for r in first)
    assert all(r["response_format"]["type"] == "json_schema" for r in first)
    spent = doc["llm"]["spent"]
    assert spent["calls"] == 5 and spent["attempts"] == 5 and spent["tokens"] > 0
    assert spent["cost"] == pytest.approx(
        (spent["prompt_tokens"] * 1.0 + spent["completion_tokens"] * 2.0) / 1e6
    )
    artifact = next(o for o in doc["outputs"] if o["name"].startswith("artifacts/ask/docs__a.md"))
    answers = json.loads(Path(artifact["path"]).read_text())
    assert [set(a["answer"]) for a in answers] == [{"topic"}, {"topic"}]
    attempts = _attempts(project.events(doc["run_id"], cli))
    assert len(attempts) == 5 and {a["status"] for a in attempts} == {"ok"}
    assert all(len(a["request_sha256"]) == 64 and "prompt" not in a for a in attempts)

    before = len(fake.requests())
    proc, again = cli.json(*project.args("--resume"), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert len(fake.requests()) == before  # nothing asked again
    assert set(again["decisions"]) == {"reused"}
    assert again["llm"]["spent"]["attempts"] == 0
    assert again["llm"]["saved"] == spent
    proc = cli("runs", "show", again["run_id"], "--output-root", str(project.out))
    assert "reuse saved 5 call(s)" in proc.stdout
    proc, explained = cli.json("explain", again["run_id"], "--output-root", str(project.out))
    assert explained["llm"]["saved"]["calls"] == 5


def test_retried_then_success_is_journaled(cli, fake: ServerProcess, tmp_path: Path) -> None:
    project = Project(tmp_path, fake.url)
    (project.root / "docs" / "b.md").write_text("FAULTS: 429@0.2, 500\nBeta retried.\n")
    proc, doc = cli.json(*project.args(), env=_env())
    assert proc.returncode == 0, proc.stderr
    attempts = [
        a for a in _attempts(project.events(doc["run_id"], cli)) if a["lane"] == "docs/b.md"
    ]
    assert [(a["attempt"], a["status"], a["http_status"]) for a in attempts] == [
        (1, "rate_limited", 429),
        (2, "server_error", 500),
        (3, "ok", 200),
    ]
    assert attempts[0]["wait_ms"] == 200.0 and attempts[1]["wait_ms"] > 0
    assert doc["llm"]["spent"]["attempts"] == 7 and doc["llm"]["unsuccessful"] == 2
    retries = doc["llm"]["retries"]
    assert retries["rate_limited"] == {"attempts": 1, "wait_s": 0.2}
    assert retries["server_error"]["attempts"] == 1 and retries["server_error"]["wait_s"] > 0
    # text explain and the HTML report show the retries by cause and their waits
    out = ["--output-root", str(project.out)]
    text = cli("explain", doc["run_id"], *out).stdout
    assert "5 call(s) (7 attempt(s))" in text and "rate_limited 1 (waited 0.2 s)" in text
    proc = cli("report", doc["run_id"], *out, "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert "spent: 5 calls (7 attempts)" in page and "rate_limited 1 (waited 0.2 s)" in page


def test_permanent_failure_has_a_cause_and_no_traceback(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    project = Project(tmp_path, fake.url, retries=1)
    (project.root / "docs" / "b.md").write_text("FAULTS: 503, 503, 503\nBeta is down.\n")
    proc, doc = cli.json(*project.args("--debug", "summary"), env=_env())
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "step 'ask' lane 'docs/b.md' stage_failed (server_error):" in lines[0]
    assert "HTTP 503" in lines[0] and "after 2 attempt(s)" in lines[0]
    error = doc["error"]
    assert (error["step"], error["lane"], error["reason_code"], error["cause"]) == (
        "ask",
        "docs/b.md",
        "stage_failed",
        "server_error",
    )
    failure = json.loads(Path(doc["failure_report"]).read_text())
    assert failure["error"]["cause"] == "server_error"
    bundle = json.loads((Path(doc["debug_bundle"]) / "summary" / "failure.json").read_text())
    assert bundle["error"]["cause"] == "server_error"
    events = project.events(doc["run_id"], cli)
    decided = [e["data"] for e in events if e["type"] == "StageDecided" and e["data"]["failed"]]
    assert [d["cause"] for d in decided] == ["server_error"]
    failed = [e["data"] for e in events if e["type"] == "StageFailed"]
    assert [f["cause"] for f in failed] == ["server_error"]
    proc, explained = cli.json("explain", doc["run_id"], "--output-root", str(project.out))
    assert explained["failures"][0]["cause"] == "server_error"
    proc = cli("explain", doc["run_id"], "--output-root", str(project.out))
    assert "stage_failed (server_error)" in proc.stdout


def test_resume_after_partial_failure_asks_only_for_the_rest(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    project = Project(tmp_path, fake.url, retries=1)
    (project.root / "docs" / "b.md").write_text("FAULTS: 500, 500\nBeta fails twice.\n")
    before = len(fake.requests())
    proc, doc = cli.json(*project.args(), env=_env())
    assert proc.returncode == 1 and doc["error"]["cause"] == "server_error"
    first = fake.requests()[before:]
    asked_ok = {r["prompt"].strip() for r in first if "FAULTS" not in r["prompt"]}
    assert asked_ok == {  # c.md never ran
        "Alpha paragraph one, about apples.",
        "Alpha paragraph two, about apricots.",
    }

    before = len(fake.requests())
    proc, again = cli.json(*project.args("--resume"), env=_env())
    assert proc.returncode == 0, proc.stderr
    second = fake.requests()[before:]
    assert _prompts(second) == sorted(
        [
            "FAULTS: 500, 500\nBeta fails twice.",
            "Gamma first paragraph, about grapes.",
            "Gamma second paragraph, about guavas.",
        ]
    )
    assert again["decisions"]["reused"] == 4  # a.md's lane: two extracts, merge, normalize
    assert again["llm"]["saved"]["calls"] == 2 and again["llm"]["spent"]["calls"] == 3


def test_a_profile_source_change_is_a_cold_miss(cli, fake: ServerProcess, tmp_path: Path) -> None:
    project = Project(tmp_path, fake.url)
    proc, _ = cli.json(*project.args(), env=_env())
    assert proc.returncode == 0, proc.stderr
    # The same table, now in the user config file: same profile, another source.
    config = cli.home / ".config" / "runjournal"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(project.profiles.read_text())
    before = len(fake.requests())
    proc, again = cli.json(*project.args("--resume", profiles=False), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert again["decisions"] == {"profile_source_changed": 11}  # 5 extracts, 3 merges, 3 norm.
    assert len(fake.requests()) - before == 5  # asked again


def test_the_budget_stops_new_calls_and_resume_goes_on(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    project = Project(tmp_path, fake.url)
    # Each request reserves about 57 tokens (prompt estimate + max_tokens 40) and uses
    # about 10: the budget starts a request only while the rest can pay for it.
    proc, doc = cli.json(*project.args("--max-tokens", "60", "--jobs", "1"), env=_env())
    assert proc.returncode == 1
    assert doc["error"]["cause"] == "budget_exhausted"
    assert "--max-tokens 60" in doc["error"]["message"] and "Traceback" not in proc.stderr
    spent = doc["llm"]["spent"]
    assert 1 <= spent["calls"] < 5 and spent["tokens"] <= 60
    assert doc["llm"]["limits"]["max_tokens"] == 60
    written = [e for e in project.events(doc["run_id"], cli) if e["type"] == "CheckpointWritten"]
    assert len(written) == spent["calls"]  # the finished calls are checkpointed
    before = len(fake.requests())
    proc, again = cli.json(*project.args("--resume"), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert len(fake.requests()) - before == 5 - spent["calls"]
    assert again["llm"]["saved"]["calls"] == spent["calls"]


def test_the_budget_never_starts_a_call_it_cannot_pay_for(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    """Issue 26 defect 7: `--max-cost 0.05` stopped at 0.0511 with calls in flight."""
    project = Project(tmp_path, fake.url)
    prices = "prices = { input_per_million = 1000.0, output_per_million = 1000.0 }"
    text = project.profiles.read_text()
    project.profiles.write_text(text.replace(text.splitlines()[-1], prices))
    # a request costs about 0.009 and may cost 0.057 (its prompt and max_tokens 40)
    proc, doc = cli.json(*project.args("--max-cost", "0.03", "--jobs", "8"), env=_env())
    assert proc.returncode == 1 and doc["error"]["cause"] == "budget_exhausted", proc.stderr
    assert "may cost" in doc["error"]["message"]
    assert doc["llm"]["spent"]["cost"] <= 0.03  # five at once would spend 0.045


def test_record_and_replay(cli, fake: ServerProcess, tmp_path: Path) -> None:
    project = Project(tmp_path, fake.url)
    cassette = tmp_path / "cassette.json"
    proc, doc = cli.json(*project.args("--llm-record", str(cassette)), env=_env())
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(cassette.read_text())
    assert recorded["format"] == "runjournal.llm-cassette" and len(recorded["exchanges"]) == 5
    outputs = {o["name"]: o["sha256"] for o in doc["outputs"]}

    project.profiles.write_text(PROFILE.format(url="http://127.0.0.1:9/v1", retries=0))
    before = len(fake.requests())
    proc, replayed = cli.json(*project.args("--llm-replay", str(cassette)), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert len(fake.requests()) == before
    assert {o["name"]: o["sha256"] for o in replayed["outputs"]} == outputs
    attempts = _attempts(project.events(replayed["run_id"], cli))
    assert len(attempts) == 5 and all(a["replayed"] for a in attempts)

    (project.root / "docs" / "c.md").write_text("Gamma changed, about grapefruit.\n")
    proc, missed = cli.json(*project.args("--llm-replay", str(cassette)), env=_env())
    assert proc.returncode == 1
    assert missed["error"]["cause"] == "replay_miss" and missed["error"]["lane"] == "docs/c.md"
    assert "step 'ask' lane 'docs/c.md' extract chunk" in missed["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-cost", "cheap"], "invalid --max-cost 'cheap'"),
        (["--max-tokens", "0"], "invalid --max-tokens '0'"),
        (["--llm-record", "a.json", "--llm-replay", "b.json"], "cannot be used together"),
        (["--llm-replay", "missing.json"], "no such file"),
    ],
)
def test_bad_llm_options_are_usage_errors(
    cli, fake: ServerProcess, tmp_path: Path, extra: list[str], message: str
) -> None:
    project = Project(tmp_path, fake.url)
    proc = cli(*project.args(*extra), env=_env())
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not project.out.exists()  # nothing allocated


def test_the_example_runs_offline_from_its_cassette(cli, tmp_path: Path) -> None:
    example = tmp_path / "llm-extract"
    shutil.copytree(
        REPO / "examples" / "llm-extract", example, ignore=shutil.ignore_patterns("runs")
    )
    roots = ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
    proc, doc = cli.json("run", str(example / "pipeline.toml"), *roots)
    assert proc.returncode == 0, proc.stderr
    board = next(o for o in doc["outputs"] if o["name"] == "action-items.md")
    text = Path(board["path"]).read_text()
    assert "15 items from the meeting notes" in text and "## Priya" in text
    assert doc["llm"]["spent"]["calls"] == 15 and doc["llm"]["spent"]["cost"] > 0
    with sqlite3.connect(tmp_path / "o" / "journal.sqlite3") as db:
        (count,) = db.execute(
            "SELECT count(*) FROM stored_events WHERE topic LIKE '%LLMCallAttempted'"
        ).fetchone()
    assert count == 15


def test_a_profile_cassette_that_cannot_be_read_is_a_configuration_error(
    cli, tmp_path: Path
) -> None:
    project = Project(tmp_path, "http://127.0.0.1:9/v1")
    project.profiles.write_text(
        '[profiles.fake]\nprovider = "openai"\nmodel = "m"\nreplay = "nowhere.json"\n'
    )
    proc, doc = cli.json(*project.args())
    assert proc.returncode == 2 and doc["exit_code"] == 2
    assert "steps[0].profile: profile 'fake': cassette" in proc.stderr
    assert "nowhere.json: no such file" in proc.stderr


def test_openai_is_imported_only_by_runs_that_call() -> None:
    import subprocess

    code = "import sys, runjournal.cli.main; print('openai' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
