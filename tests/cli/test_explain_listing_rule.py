"""`explain` lists a small run's decisions and summarises a large one (CliRunner).

docs/operations.md "`explain`": without a selection, a run of at most `LIST_UP_TO`
decisions lists each of them after the summary; a larger one shows only the summary and
the drill-down line naming how many decisions it summarised. `--json` is the whole view
either way. Bad selections are one error line and exit 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.adapters.journal import open_journal
from runjournal.cli.explain import LIST_UP_TO
from runjournal.cli.main import cli
from support import synthetic as syn

PIPELINE = """\
name = "p"
inputs = ["docs/*.md"]

[[steps]]
id = "terms"
module = "builtin.terms"
"""


def _project(root: Path, docs: int) -> str:
    """A one-step pipeline of `docs` one-chunk documents: 3 decisions per document."""
    (root / "docs").mkdir(parents=True)
    for i in range(docs):
        (root / "docs" / f"d{i:02}.md").write_text(f"A **term{i}** is here.\n")
    (root / "pipeline.toml").write_text(PIPELINE)
    roots = ["--output-root", str(root / "out"), "--cache-root", str(root / "cache")]
    result = CliRunner().invoke(
        cli, ["run", str(root / "pipeline.toml"), *roots, "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run_id"])


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.chdir(tmp_path)


def _explain(root: Path, *args: str):
    return CliRunner().invoke(
        cli, ["explain", *args, "--output-root", str(root / "out")], catch_exceptions=False
    )


@pytest.mark.parametrize(
    ("docs", "listed"),
    [
        (LIST_UP_TO // 3, True),  # at most LIST_UP_TO decisions: each one listed
        (LIST_UP_TO // 3 + 1, False),  # more: the summary only
    ],
)
def test_small_runs_list_every_decision_large_ones_are_summarised(
    tmp_path: Path, docs: int, listed: bool
) -> None:
    run_id = _project(tmp_path, docs)
    decisions = 3 * docs
    assert (decisions <= LIST_UP_TO) is listed
    result = _explain(tmp_path, run_id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {run_id} (succeeded): not_resumed {decisions}"
    assert lines[1] == f"stages: {decisions} executed"
    rows = [ln for ln in lines if ln.startswith("  ") and " · " in ln]
    if listed:
        assert "decisions:" in lines and len(rows) == decisions
        assert not any(ln.startswith("drill down:") for ln in lines)
    else:
        assert "decisions:" not in lines and rows == []
        assert lines[-1].startswith("drill down: --step STEP, --lane LANE, --code CODE")
        assert lines[-1].endswith(f"({decisions} decisions: more than {LIST_UP_TO} are summarised)")
    # --json is the whole view whatever the size
    doc = json.loads(_explain(tmp_path, run_id, "--json").stdout)
    assert sum(len(lane["decisions"]) for s in doc["steps"] for lane in s["lanes"]) == decisions
    assert doc["outcomes"] == {"executed": decisions} and doc["not_started"] == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--code", "nope"], "--code 'nope' is not a reason code (see `reasons`)"),
        (["--code", "reusd"], "--code 'reusd' is not a reason code; did you mean 'reused'?"),
        (["--lane", "docs/zz.md"], "has no lane 'docs/zz.md'; did you mean 'docs/d0"),
        (["--step", "nothing"], "has no decisions for step 'nothing'"),
    ],
)
def test_bad_selections_are_one_error_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    run_id = _project(tmp_path, 2)
    result = _explain(tmp_path, run_id, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("runjournal: error: ") and message in line


def test_a_run_with_no_terminal_event_says_it_may_still_be_running(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = syn.synthetic_run(syn.run_id_for(9), lanes=1, chunks=2, output_root=str(out))
    out.mkdir()
    with open_journal(str(out / "journal.sqlite3")) as store:
        store.append_events(run.run_id, run.events[:-1])  # no RunTerminated
    result = _explain(tmp_path, run.run_id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"run {run.run_id} (running): ")
    assert lines[1].endswith(
        "(running: no terminal event: still running, or killed (`recover` marks it abandoned))"
    )
