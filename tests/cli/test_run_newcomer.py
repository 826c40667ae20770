"""What `run` tells a newcomer, through CliRunner (issue 19, points 1, 2, 4, 5, 7, 9, 12).

- the `resume` setting from each origin, and the hint of a plain run that could reuse;
- a module whose source changed under an unchanged fingerprint is a warning;
- warnings in the text summary, bounded;
- `--set` keys checked against the keys steps declare they read;
- `-v` shows a failing module's traceback, `--debug trace` keeps it;
- the summary names the main outputs; `<output root>/latest` follows successful runs;
- a predecessor failure names its reason once and says what to do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.cli.main import cli

PLUGIN = '''
import os
from runjournal.domain.modules import Module, Normalized


class Words(Module):
    name = "test.words"
    fingerprint = "test.words/1"
    artifact_kind = "words"
    schema = "test.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]
    override_keys = ("tone",)

    def extract(self, chunk, ctx):
        if ctx.overrides.get("explode") or os.environ.get("RJ_TEST_EXPLODE"):
            raise ValueError("boom token=" + "ghp_" + "a" * 36)
        words = sorted({w.strip(".,").lower() for w in chunk.text.split() if len(w) > 3})
        return [w + ctx.overrides.get("tone", "") for w in words]

    def merge(self, parts, ctx):
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        notes = range(ctx.params.get("notes", 0))
        return Normalized(merged, [f"{ctx.lane}: note {i}" for i in notes])


class Loose(Words):
    """Declares nothing: may read any --set key."""

    name = "test.loose"
    fingerprint = "test.loose/1"
    override_keys = None
'''

PIPELINE = """\
name = "p"
inputs = ["docs/*.md"]
{table}
[[steps]]
id = "words"
module = "plugins/words.py:{cls}"
params = {{ notes = {notes} }}

[[steps]]
id = "terms"
module = "builtin.terms"

[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms"]
"""
DOC = "A **checkpoint** is a saved result.\n\nEvery **checkpoint** records its facts.\n"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "docs").mkdir()
        for name in ("a.md", "b.md"):
            (root / "docs" / name).write_text(DOC)
        (root / "plugins").mkdir()
        (root / "plugins" / "words.py").write_text(PLUGIN)
        self.write()

    def write(self, *, table: str = "", cls: str = "Words", notes: int = 0) -> None:
        (self.root / "pipeline.toml").write_text(PIPELINE.format(table=table, cls=cls, notes=notes))

    def invoke(self, *args: str, env: dict[str, str] | None = None):
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

    def run(self, *extra: str, env: dict[str, str] | None = None):
        return self.invoke(
            "run", "pipeline.toml", "--output-root", "out", "--cache-root", "cache", *extra, env=env
        )

    def run_json(self, *extra: str, env: dict[str, str] | None = None) -> tuple[object, dict]:
        result = self.run(*extra, "--json", env=env)
        return result, json.loads(result.stdout)

    def events(self, run_id: str) -> list[dict]:
        result = self.invoke("journal", "show", run_id, "--output-root", "out", "--json")
        return json.loads(result.stdout)["events"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    monkeypatch.delenv("RJ_TEST_EXPLODE", raising=False)
    monkeypatch.chdir(tmp_path)
    return Project(tmp_path)


def _codes(doc: dict) -> set[str]:
    return set(doc["decisions"])


# --- 1: the resume setting, from every origin ----------------------------------------------


def _user_config(project: Project, text: str) -> dict[str, str]:
    path = project.root / "user.toml"
    path.write_text(text)
    return {"RUNJOURNAL_CONFIG": str(path)}


RESUME_ORIGINS = {
    "flag": lambda p: (["--resume"], None),
    "env": lambda p: ([], {"RUNJOURNAL_RESUME": "yes"}),
    "pipeline": lambda p: (p.write(table="[runjournal]\nresume = true\n"), ([], None))[1],
    "user-config": lambda p: ([], _user_config(p, "resume = true\n")),
}


@pytest.mark.parametrize("origin", sorted(RESUME_ORIGINS))
def test_resume_from_each_origin_makes_run_incremental(project: Project, origin: str) -> None:
    assert project.run().exit_code == 0
    args, env = RESUME_ORIGINS[origin](project)
    result, doc = project.run_json(*args, env=env)
    assert result.exit_code == 0, result.output
    assert _codes(doc) == {"reused"}
    assert doc["hints"] == []
    shown = project.invoke("config", "show", "pipeline.toml", *args, "--json", env=env)
    rows = {r["name"]: r for r in json.loads(shown.stdout)["settings"]}
    assert rows["resume"]["value"] is True and rows["resume"]["origin"] == origin


@pytest.mark.parametrize("origin", ["env", "pipeline", "user-config"])
def test_no_resume_flag_wins_over_a_lower_origin(project: Project, origin: str) -> None:
    assert project.run().exit_code == 0
    _args, env = RESUME_ORIGINS[origin](project)
    result, doc = project.run_json("--no-resume", env=env)
    assert result.exit_code == 0
    assert _codes(doc) == {"not_resumed"}


def test_default_is_a_plain_run(project: Project) -> None:
    assert project.run().exit_code == 0
    _result, doc = project.run_json()
    assert _codes(doc) == {"not_resumed"}


def test_a_bad_resume_value_is_a_settings_error(project: Project) -> None:
    result = project.run(env={"RUNJOURNAL_RESUME": "sometimes"})
    assert result.exit_code == 2
    assert result.stderr.startswith("runjournal: error: invalid resume 'sometimes' from env")
    assert not (project.root / "out").exists()


# --- 1: the hint of a plain run ------------------------------------------------------------


def test_plain_run_over_valid_checkpoints_says_how_to_reuse_them(project: Project) -> None:
    first = project.run()
    assert first.exit_code == 0
    assert "hint" not in first.stderr  # nothing recorded yet
    second = project.run()
    assert second.exit_code == 0
    hints = [ln for ln in second.stderr.splitlines() if ln.startswith("runjournal: hint: ")]
    assert len(hints) == 1
    assert "--resume" in hints[0] and "resume = true" in hints[0]
    assert "runjournal run pipeline.toml --resume" in hints[0]
    assert "hint" not in second.stdout


@pytest.mark.parametrize(
    ("extra", "hinted"),
    [
        ([], True),
        (["-q"], False),
        (["--resume"], False),
        (["--recompute", "glossary"], False),
        (["--no-checkpoints"], True),  # the checkpoints of earlier runs are still there
    ],
)
def test_hint_matrix(project: Project, extra: list[str], hinted: bool) -> None:
    assert project.run().exit_code == 0
    result = project.run(*extra)
    assert result.exit_code == 0, result.output
    assert ("runjournal: hint:" in result.stderr) is hinted


def test_the_hint_is_given_once_per_project(project: Project) -> None:
    """Issue 32: every plain run printed the hint; now once, remembered beside the journal."""
    assert project.run().exit_code == 0
    second, third = project.run(), project.run()
    assert "runjournal: hint:" in second.stderr
    assert "hint" not in third.stderr
    assert (project.root / "out" / ".runjournal" / "resume-hint-shown").is_file()


def test_no_hint_for_a_brand_new_project_whose_files_match_another(project: Project) -> None:
    """Issue 32: a project with no run of its own got the hint from another project's
    checkpoints in the shared cache root."""
    assert project.run().exit_code == 0
    first_of_other = project.invoke(
        "run", "pipeline.toml", "--output-root", "other", "--cache-root", "cache", "--json"
    )
    assert first_of_other.exit_code == 0, first_of_other.output
    assert json.loads(first_of_other.stdout)["hints"] == []
    assert "hint" not in first_of_other.stderr


def test_hint_in_json_and_not_on_stderr(project: Project) -> None:
    assert project.run().exit_code == 0
    result, doc = project.run_json()
    assert len(doc["hints"]) == 1 and "--resume" in doc["hints"][0]
    assert "hint" not in result.stderr


def test_no_hint_when_every_checkpoint_is_stale(project: Project) -> None:
    assert project.run().exit_code == 0
    for name in ("a.md", "b.md"):
        (project.root / "docs" / name).write_text("Completely different words here.\n")
    _result, doc = project.run_json()
    assert doc["hints"] == []


# --- 2: source changed, fingerprint did not -------------------------------------------------


def test_edited_plugin_with_same_fingerprint_warns_and_is_journaled(project: Project) -> None:
    _r, first = project.run_json()
    assert not [w for w in first["warnings"] if w["step"] == "words"]
    plugin = project.root / "plugins" / "words.py"
    plugin.write_text(plugin.read_text().replace("len(w) > 3", "len(w) > 4"))
    result = project.run("--resume")
    assert result.exit_code == 0
    assert "words: the source of module 'plugins/words.py:Words' changed since run" in result.stdout
    # Issue 32: said every time until the fingerprint changes (compared with the first run
    # of that fingerprint), not once then silent.
    _r, doc = project.run_json("--resume")
    [again] = [w for w in doc["warnings"] if w["step"] == "words"]
    assert f"changed since run {first['run_id']} " in again["message"]
    assert _codes(doc) == {"reused"}  # reuse still trusts the fingerprint

    plugin.write_text(plugin.read_text().replace("len(w) > 4", "len(w) > 5"))
    previous = first["run_id"]
    _r, doc = project.run_json("--resume")
    [warning] = [w for w in doc["warnings"] if w["step"] == "words"]
    assert f"changed since run {previous} " in warning["message"]
    assert warning["lane"] is None
    assert "fingerprint 'test.words/1' did not" in warning["message"]
    assert "bump `fingerprint`" in warning["message"]
    events = project.events(doc["run_id"])
    observed = [e["data"] for e in events if e["type"] == "ModuleObserved"]
    assert [(o["step"], o["fingerprint"]) for o in observed] == [
        ("words", "test.words/1"),
        ("terms", "builtin.terms/3"),
        ("glossary", "builtin.glossary/2"),
    ]
    assert observed[0]["source_sha256"] and observed[1]["source_sha256"] is None
    recorded = [e["data"] for e in events if e["type"] == "WarningRecorded"]
    assert recorded == [{"step": "words", "lane": "", "message": warning["message"]}]


def test_bumped_fingerprint_does_not_warn(project: Project) -> None:
    assert project.run().exit_code == 0
    plugin = project.root / "plugins" / "words.py"
    plugin.write_text(plugin.read_text().replace('"test.words/1"', '"test.words/2"'))
    _r, doc = project.run_json("--resume")
    assert not [w for w in doc["warnings"] if w["step"] == "words"]
    assert "module_changed" in doc["decisions"]


def test_an_unchanged_plugin_never_warns(project: Project) -> None:
    for _ in range(2):
        _r, doc = project.run_json("--resume")
        assert not [w for w in doc["warnings"] if w["step"] == "words"]


# --- 4: warnings in the text output --------------------------------------------------------


@pytest.mark.parametrize(("notes", "shown"), [(0, 0), (1, 2), (2, 4), (3, 5), (10, 5)])
def test_text_summary_shows_warnings_bounded(project: Project, notes: int, shown: int) -> None:
    project.write(notes=notes)
    result = project.run()
    assert result.exit_code == 0
    _r, doc = project.run_json()
    total = len(doc["warnings"])
    lines = result.stdout.splitlines()
    listed = [ln for ln in lines if ln.startswith("    words · ") or ln.startswith("    glossary")]
    if total == 0:
        assert not any(ln.startswith("  warnings:") for ln in lines)
        return
    assert f"  warnings:  {total}" in lines
    assert len(listed) == min(total, 5)
    assert len([ln for ln in listed if ": note " in ln]) == shown
    rest = [ln for ln in lines if ln.startswith("    … and ")]
    assert rest == (
        [f"    … and {total - 5} more (all of them: report.json, --json)"] if total > 5 else []
    )


def test_a_long_warning_is_one_bounded_line(project: Project) -> None:
    project.write(notes=1)
    plugin = project.root / "plugins" / "words.py"
    plugin.write_text(plugin.read_text().replace('f"{ctx.lane}: note {i}"', '"x\\n" * 500'))
    result = project.run()
    [line] = [ln for ln in result.stdout.splitlines() if ln.startswith("    words · docs/a.md")]
    assert len(line.encode()) < 300 and line.endswith("…")


# --- 5: --set checked against the keys steps read ------------------------------------------


SET_CASES = {
    # name: (plugin class, --set pairs, expected exit code, text in the error)
    "declared": ("Words", ["tone=!"], 0, None),
    "unknown": ("Words", ["anything=1"], 2, "--set 'anything' is read by no step"),
    "typo": ("Words", ["tonne=1"], 2, "did you mean 'tone'?"),
    "one-good-one-bad": ("Words", ["tone=!", "colour=red"], 2, "--set 'colour'"),
    "undeclared-reads-any": ("Loose", ["anything=1"], 0, None),
}


@pytest.mark.parametrize("case", sorted(SET_CASES))
def test_set_keys_matrix(project: Project, case: str) -> None:
    cls, pairs, code, text = SET_CASES[case]
    project.write(cls=cls)
    args = [a for pair in pairs for a in ("--set", pair)]
    result = project.run(*args)
    assert result.exit_code == code, result.output
    if code == 2:
        [line] = result.stderr.splitlines()
        assert line.startswith("runjournal: error: ") and text in line
        assert "words: tone; terms: none; glossary: none" in line
        assert not (project.root / "out").exists()  # nothing allocated
        assert not (project.root / "cache").exists()
        as_json = project.run(*args, "--json")
        assert as_json.exit_code == 2
        assert json.loads(as_json.stdout)["run_id"] is None


def test_the_builtin_example_refuses_any_set(project: Project, tmp_path: Path) -> None:
    from support.paths import EXAMPLE

    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(EXAMPLE / "pipeline.toml"),
            "--output-root",
            str(tmp_path / "x"),
            "--set",
            "anything=1",
        ],
    )
    assert result.exit_code == 2
    assert "terms: none; definitions: none; acronyms: none; headings: none; glossary: none" in (
        result.stderr
    )


def test_overrides_enter_only_the_identity_of_steps_that_read_them(project: Project) -> None:
    assert project.run("--set", "tone=!").exit_code == 0
    _r, doc = project.run_json("--resume", "--set", "tone=?")
    # the decisions as `explain` gives them (a fully reused lane is one reuse summary in
    # the journal: docs/internals.md "Reuse summaries")
    explained = json.loads(
        project.invoke("explain", doc["run_id"], "--output-root", "out", "--json").stdout
    )
    by_step: dict[str, set[str]] = {}
    for step in explained["steps"]:
        for lane in step["lanes"]:
            by_step.setdefault(step["step"], set()).update(d["code"] for d in lane["decisions"])
    assert by_step["words"] == {"overrides_changed"}
    assert by_step["terms"] == {"reused"} and by_step["glossary"] == {"reused"}
    for path in (Path(doc["run_dir"]) / "artifacts" / "words").iterdir():
        words = json.loads(path.read_text())
        assert words and all(w.endswith("?") for w in words)  # the module saw the new value


def test_a_module_that_cannot_load_is_reported_before_the_run(project: Project) -> None:
    (project.root / "plugins" / "words.py").write_text("raise ImportError('nope')\n")
    result = project.run("--set", "tone=1")
    assert result.exit_code == 2
    assert "cannot load module 'plugins/words.py:Words'" in result.stderr
    # Found before anything is allocated (issue 32): no journal, no run.
    assert not (project.root / "out").exists()


# --- 7: a failing module's traceback ------------------------------------------------------


def test_verbose_shows_the_module_traceback_redacted(project: Project) -> None:
    quiet = project.run(env={"RJ_TEST_EXPLODE": "1"})
    assert quiet.exit_code == 1
    assert "Traceback" not in quiet.stderr and len(quiet.stderr.splitlines()) == 1
    loud = project.run("-v", env={"RJ_TEST_EXPLODE": "1"})
    assert loud.exit_code == 1
    err = loud.stderr
    assert "runjournal: the module's traceback (redacted):" in err
    assert "Traceback (most recent call last):" in err
    assert 'words.py", line' in err and "in extract" in err
    assert "ValueError: boom token=" in err
    assert "ghp_" + "a" * 36 not in err
    assert err.splitlines()[-1].startswith("runjournal: error: run ")


def test_debug_trace_keeps_the_traceback(project: Project) -> None:
    result, doc = project.run_json("--debug", "trace", env={"RJ_TEST_EXPLODE": "1"})
    assert result.exit_code == 1
    trace = Path(doc["debug_bundle"]) / "trace" / "events.jsonl"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    [kept] = [r for r in records if r["kind"] == "module" and r["name"] == "traceback"]
    assert kept["data"]["step"] == "words" and kept["data"]["lane"] == "docs/a.md"
    assert "in extract" in kept["data"]["traceback"]
    assert "ghp_" + "a" * 36 not in trace.read_text()


def test_summary_debug_keeps_no_traceback(project: Project) -> None:
    result, doc = project.run_json("--debug", "summary", env={"RJ_TEST_EXPLODE": "1"})
    assert result.exit_code == 1
    assert not (Path(doc["debug_bundle"]) / "trace").exists()


# --- 9: main outputs and `latest` -----------------------------------------------------------


def test_summary_names_the_main_output_and_latest(project: Project) -> None:
    result = project.run()
    assert result.exit_code == 0
    _r, doc = project.run_json()
    glossary = Path(doc["run_dir"]) / "glossary.md"
    assert doc["main_outputs"] == [str(glossary)]
    lines = result.stdout.splitlines()
    [main] = [ln for ln in lines if ln.startswith("  main:")]
    assert main.endswith("/glossary.md")
    latest = project.root / "out" / "latest-ok"
    assert os.readlink(latest) == doc["run_id"]
    assert doc["latest"] == str(Path(doc["run_dir"]).parent / "latest-ok")
    assert (latest / "glossary.md").read_bytes() == glossary.read_bytes()


def test_a_pipeline_without_module_outputs_names_its_final_artifacts(project: Project) -> None:
    (project.root / "pipeline.toml").write_text(
        'name = "h"\ninputs = ["docs/*.md"]\n'
        '[[steps]]\nid = "headings"\nmodule = "builtin.headings"\n'
    )
    _r, doc = project.run_json()
    assert doc["main_outputs"] == [str(Path(doc["run_dir"]) / "artifacts" / "headings") + "/"]


def test_latest_follows_only_successful_runs(project: Project) -> None:
    _r, good = project.run_json()
    result, bad = project.run_json(env={"RJ_TEST_EXPLODE": "1"})
    assert result.exit_code == 1
    assert bad["latest"] is None
    assert os.readlink(project.root / "out" / "latest-ok") == good["run_id"]


def test_latest_means_the_last_run_in_every_command_and_latest_ok_the_link(
    project: Project,
) -> None:
    """Issue 32: `explain latest` showed the failed run while `runs/latest` followed the
    last good one. Now `latest` is the last run of any status everywhere, and the link is
    named for the `latest-ok` reference it agrees with."""
    _r, good = project.run_json()
    _r, bad = project.run_json(env={"RJ_TEST_EXPLODE": "1"})
    for command in ("explain", "runs show", "journal show"):
        refs = {}
        for ref in ("latest", "latest-ok", "latest-failed", "previous"):
            result = project.invoke(*command.split(), ref, "--output-root", "out", "--json")
            assert result.exit_code in (0, 1), (command, ref, result.output)
            refs[ref] = json.loads(result.stdout)["run_id"]
        assert refs == {
            "latest": bad["run_id"],
            "latest-ok": good["run_id"],
            "latest-failed": bad["run_id"],
            "previous": good["run_id"],
        }, command
    assert os.readlink(project.root / "out" / "latest-ok") == good["run_id"]
    assert not (project.root / "out" / "latest").exists()


def test_a_real_file_named_latest_is_kept_with_a_warning(project: Project) -> None:
    (project.root / "out").mkdir()
    (project.root / "out" / "latest-ok").write_text("mine\n")
    result, doc = project.run_json()
    assert result.exit_code == 0
    assert doc["latest"] is None
    assert (project.root / "out" / "latest-ok").read_text() == "mine\n"
    [problem] = [w for w in doc["warnings"] if w["step"] is None]
    assert "could not point latest-ok at the run" in problem["message"]


# --- 12: a predecessor failure names its reason once, with a remedy ----------------------


GLOSSARY_ONLY = """\
name = "g"
inputs = ["docs/*.md"]

[[steps]]
id = "terms"
module = "builtin.terms"

[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms"]
"""


def test_recompute_after_an_input_edit_names_the_reason_once(project: Project) -> None:
    (project.root / "pipeline.toml").write_text(GLOSSARY_ONLY)
    assert project.run().exit_code == 0
    (project.root / "docs" / "a.md").write_text(DOC + "\nA new **paragraph** here.\n")
    result = project.run("--recompute", "glossary")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.count("predecessor_identity_mismatch") == 1
    assert "step 'terms' lane 'docs/a.md' predecessor_identity_mismatch:" in line
    assert "changed since its checkpoint" in line
    assert "runjournal run pipeline.toml --resume" in line
    assert "--recompute terms" in line
    _r, doc = project.run_json("--recompute", "glossary")
    assert doc["error"]["reason_code"] == "predecessor_identity_mismatch"
    log = Path(doc["error_log"]).read_text()
    assert "--recompute terms" in log
    # either remedy works: resume then recompute, or recompute the producer too
    (project.root / "docs" / "b.md").write_text(DOC + "\nYet another **paragraph**.\n")
    assert project.run("--recompute", "glossary", "--recompute", "terms").exit_code == 0
    (project.root / "docs" / "b.md").write_text(DOC + "\nAnd one more **paragraph**.\n")
    assert project.run("--recompute", "glossary").exit_code == 1
    assert project.run("--resume").exit_code == 0
    assert project.run("--recompute", "glossary").exit_code == 0


@pytest.mark.parametrize(
    ("prepare", "code", "says"),
    [
        ("empty", "predecessor_missing", "has no checkpoint"),
        ("edit", "predecessor_identity_mismatch", "changed since its checkpoint"),
    ],
)
def test_each_predecessor_code_gets_its_remedy(project: Project, prepare, code, says) -> None:
    if prepare == "edit":
        assert project.run().exit_code == 0
        (project.root / "docs" / "a.md").write_text("Other **words** now.\n")
    result = project.run("--recompute", "glossary")
    [line] = result.stderr.splitlines()
    assert line.count(code) == 1 and says in line
