"""A no-op `run --resume` does only what a resume needs (issue 29, "Resume at the floor").

- The `openai` client is not imported by a resume that reuses every stage of an LLM step;
  a resume whose LLM stage executes does import it (docs/performance.md "Start-up").
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.llm_servers import ASK_PIPELINE, ASK_SCHEMA, ServerProcess, start_fake

PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 5
max_retries = 0
"""
KEY = {"RJ_FAKE_KEY": "sk-" + "local-" + "x" * 24}
# the CLI in this interpreter, then whether it imported the client (last line, JSON)
PROBE = """
import json, sys
from runjournal.cli.main import main
sys.argv = ["runjournal", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "openai": "openai" in sys.modules}))
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


def _project(root: Path, url: str) -> list[str]:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("Alpha one, about apples.\n\nAlpha two, apricots.\n")
    (root / "docs" / "b.md").write_text("Beta has one paragraph about bananas.\n")
    (root / "pipeline.toml").write_text(ASK_PIPELINE.format(schema=ASK_SCHEMA))
    (root / "profiles.toml").write_text(PROFILE.format(url=url))
    return [
        "run",
        str(root / "pipeline.toml"),
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--profile",
        "fake",
        "--profiles-file",
        str(root / "profiles.toml"),
        "--no-progress",
        "--json",
    ]


def _probe(cli, args: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**cli.env, **KEY},
    )
    assert proc.stdout, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["code"] in (0, None), proc.stderr
    return last


def test_a_no_op_resume_of_an_llm_step_never_imports_the_client(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    args = _project(tmp_path, fake.url)
    proc = cli(*args, env=KEY)
    assert proc.returncode == 0, proc.stderr
    assert _probe(cli, [*args, "--resume"])["openai"] is False


def test_a_resume_whose_llm_stage_executes_imports_the_client(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    args = _project(tmp_path, fake.url)
    proc = cli(*args, env=KEY)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "docs" / "b.md").write_text("Beta now has another paragraph, about berries.\n")
    assert _probe(cli, [*args, "--resume"])["openai"] is True
