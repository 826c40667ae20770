"""`runjournal check PIPELINE` and the same checks at the start of `run` and `plan` (issue 32).

Each problem a newcomer met only once the run was under way (an LLM step with no
profile, `min_count = "two"`, a misspelled built-in param, `base_url = "not a url at
all"`, an unknown module) is one line, exit 2, before anything is allocated: no output
root, no journal, no cache. `--online` asks each profile's endpoint for its models (a
fake OpenAI-compatible server on loopback, and a port nothing listens on).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.fake_openai import FakeOpenAI

DOC = "# A\n\nA **checkpoint** is a saved result. Every **checkpoint** counts.\n"

STEP_TERMS = '[[steps]]\nid = "terms"\nmodule = "builtin.terms"\nparams = {params}\n'
STEP_LLM = '[[steps]]\nid = "ask"\nmodule = "llm.json"\n'

CASES = {
    "llm step without a profile": ("", STEP_LLM, "", ["has no profile", "--profile"]),
    "min_count is not a number": (
        "",
        STEP_TERMS.format(params='{ min_count = "two" }'),
        "",
        ["params.min_count must be an integer", "'two'"],
    ),
    "misspelled built-in param": (
        "",
        STEP_TERMS.format(params="{ min_cout = 2 }"),
        "",
        ["unknown params 'min_cout' (did you mean 'min_count'?)"],
    ),
    "base_url is not a url": (
        '[runjournal]\nprofiles_file = "profiles.toml"\nprofile = "bad"\n',
        STEP_LLM,
        '[profiles.bad]\nprovider = "openai"\nmodel = "m"\nbase_url = "not a url at all"\n',
        ["'base_url' in profiles.bad is not an http(s) URL"],
    ),
    "unknown module": (
        "",
        '[[steps]]\nid = "x"\nmodule = "nope.module"\n',
        "",
        ["steps[0].module: cannot load module 'nope.module'"],
    ),
}


def project(root: Path, table: str, steps: str, profiles: str) -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text(DOC)
    if profiles:
        (root / "profiles.toml").write_text(profiles)
    pipeline = root / "pipeline.toml"
    pipeline.write_text(f'name = "p"\ninputs = ["docs/*.md"]\n{table}\n{steps}')
    return pipeline


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    env.update(HOME=str(cwd / "home"), XDG_CACHE_HOME=str(cwd / "home" / "cache"))
    env["XDG_CONFIG_HOME"] = str(cwd / "home" / "config")
    return subprocess.run(
        [sys.executable, "-c", "from runjournal.cli.entry import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["check", "run", "plan"])
def test_a_problem_is_one_line_exit_2_and_nothing_is_allocated(
    tmp_path: Path, case: str, command: str
) -> None:
    table, steps, profiles, needles = CASES[case]
    pipeline = project(tmp_path, table, steps, profiles)
    result = cli(command, str(pipeline), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("runjournal: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()  # no journal, no run directory
    assert not (tmp_path / "home" / "cache").exists()


def test_every_problem_is_its_own_line(tmp_path: Path) -> None:
    steps = STEP_TERMS.format(params='{ min_count = "two", max_term = 3 }') + STEP_LLM
    pipeline = project(tmp_path, "", steps, "")
    result = cli("check", str(pipeline), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert "max_term" in lines[0] and "'two'" in lines[1] and "no profile" in lines[2]


def test_a_good_pipeline_checks_ok_and_writes_nothing(tmp_path: Path) -> None:
    pipeline = project(tmp_path, "", STEP_TERMS.format(params="{ min_count = 1 }"), "")
    result = cli("check", str(pipeline), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ok (1 step(s) checked)" in result.stdout
    doc = json.loads(cli("check", str(pipeline), "--json", cwd=tmp_path).stdout)
    assert doc == {
        "pipeline": "p",
        "steps": [{"id": "terms", "module": "builtin.terms", "profile": None}],
        "probed": [],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs", "pipeline.toml"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _online_project(root: Path, url: str, model: str) -> Path:
    profiles = f'[profiles.p]\nprovider = "openai"\nmodel = "{model}"\nbase_url = "{url}"\n'
    table = '[runjournal]\nprofiles_file = "profiles.toml"\nprofile = "p"\n'
    return project(root, table, STEP_LLM, profiles)


def test_online_asks_the_models_route(tmp_path: Path) -> None:
    server = FakeOpenAI().start()
    try:
        pipeline = _online_project(tmp_path / "a", server.url, "fake-model")
        offline = cli("check", str(pipeline), cwd=tmp_path)
        assert offline.returncode == 0 and server.requests == []  # no request without --online
        result = cli("check", str(pipeline), "--online", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["probed"] == [
            {"profile": "p", "ok": True, "json_schema": "honoured"}
        ]
        wrong = _online_project(tmp_path / "b", server.url, "other-model")
        result = cli("check", str(wrong), "--online", cwd=tmp_path)
        assert result.returncode == 2
        assert "does not list model 'other-model' (it lists: fake-model)" in result.stderr
    finally:
        server.stop()


def test_online_names_an_endpoint_that_does_not_answer(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    pipeline = _online_project(tmp_path, url, "m")
    result = cli("check", str(pipeline), "--online", cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "profile 'p'" in line and "no answer from the models route" in line


def _json_schema_probes(server: FakeOpenAI) -> list[dict]:
    return [r for r in server.requests if r["path"].endswith("/chat/completions")]


def test_online_declares_an_endpoint_that_honours_json_schema(tmp_path: Path) -> None:
    server = FakeOpenAI().start()
    try:
        pipeline = _online_project(tmp_path, server.url, "fake-model")
        result = cli("check", str(pipeline), "--online", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        [probed] = json.loads(result.stdout)["probed"]
        assert probed == {"profile": "p", "ok": True, "json_schema": "honoured"}
        [probe] = _json_schema_probes(server)  # one small request, with a json_schema format
        assert probe["response_format"]["type"] == "json_schema"
        assert probe["max_tokens"] == 32
        plain = cli("check", str(pipeline), "--online", cwd=tmp_path)
        assert "1 endpoint(s) answered, 1 honour json_schema" in plain.stdout
    finally:
        server.stop()


def test_online_names_a_server_that_ignores_json_schema_before_any_run(tmp_path: Path) -> None:
    server = FakeOpenAI(ignore_schema=True).start()
    try:
        pipeline = _online_project(tmp_path, server.url, "fake-model")
        result = cli("check", str(pipeline), "--online", "--json", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert "profile 'p'" in line
        assert "ignores the json_schema response format" in line
        assert "Traceback" not in result.stderr
        plain = cli("check", str(pipeline), "--online", cwd=tmp_path)
        assert plain.returncode == 2 and "ignores the json_schema" in plain.stderr
        assert len(_json_schema_probes(server)) == 2  # one probe per check, nothing else
        assert sorted(p.name for p in (tmp_path).iterdir() if p.name != "home") == [
            "docs",
            "pipeline.toml",
            "profiles.toml",
        ]
    finally:
        server.stop()


def test_online_sends_no_schema_probe_to_a_json_object_profile(tmp_path: Path) -> None:
    server = FakeOpenAI(ignore_schema=True).start()
    try:
        pipeline = _online_project(tmp_path, server.url, "fake-model")
        profiles = tmp_path / "profiles.toml"
        profiles.write_text(profiles.read_text() + 'structured_output = "json_object"\n')
        result = cli("check", str(pipeline), "--online", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["probed"] == [
            {"profile": "p", "ok": True, "json_schema": "not_used"}
        ]
        assert _json_schema_probes(server) == []
    finally:
        server.stop()
