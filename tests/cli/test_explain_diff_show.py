"""`explain` summarises first and drills down; `runs diff`; `runs show` with provenance.

CliRunner matrices over a small pipeline of built-ins (issue 19 point 8, issue 16
"explain summarises large runs").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.cli.main import cli
from runjournal.domain.reasons import DESCRIPTIONS, ReasonCode

PIPELINE = """\
name = "p"
inputs = ["docs/*.md"]
references = [{refs}]

[chunking]
strategy = "paragraphs"
max_chars = {max_chars}

[[steps]]
id = "terms"
module = "builtin.terms"
params = {{ min_count = {min_count} }}

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
        for name in ("a.md", "b.md", "c.md"):
            (root / "docs" / name).write_text(DOC)
        (root / "style.md").write_text("Plain words.\n")
        self.write()

    def write(self, *, refs: str = "", max_chars: int = 40, min_count: int = 2) -> None:
        (self.root / "pipeline.toml").write_text(
            PIPELINE.format(refs=refs, max_chars=max_chars, min_count=min_count)
        )

    def invoke(self, *args: str):
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    def run(self, *extra: str) -> dict:
        result = self.invoke(
            "run",
            "pipeline.toml",
            "--output-root",
            "out",
            "--cache-root",
            "cache",
            "--json",
            *extra,
        )
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def q(self, *args: str):
        return self.invoke(*args, "--output-root", "out")

    def qj(self, *args: str) -> dict:
        result = self.q(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    monkeypatch.chdir(tmp_path)
    return Project(tmp_path)


@pytest.fixture
def edited(project: Project) -> tuple[Project, dict, dict]:
    """A cold run, then a resume after one document changed."""
    first = project.run()
    (project.root / "docs" / "b.md").write_text(
        DOC + "\nA new **paragraph** here.\n\nThe paragraph again.\n"
    )
    second = project.run("--resume")
    return project, first, second


# --- explain: the summary ---------------------------------------------------------------


def test_summary_is_one_line_per_step_and_reason_and_each_text_once(edited) -> None:
    project, _first, second = edited
    result = project.q("explain", second["run_id"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    view = project.qj("explain", second["run_id"])
    pairs = {
        (s["step"], d["code"])
        for s in view["steps"]
        for lane in s["lanes"]
        for d in lane["decisions"]
    }
    rows = [ln for ln in lines if ln.startswith("  ") and " x" in ln and "lane" in ln]
    assert len(rows) == len(pairs)
    for step, code in pairs:
        count = sum(
            1
            for s in view["steps"]
            if s["step"] == step
            for lane in s["lanes"]
            for d in lane["decisions"]
            if d["code"] == code
        )
        [row] = [r for r in rows if r.split()[:2] == [step, code]]
        assert f"x{count} " in row
    for code in {c for _s, c in pairs}:
        assert result.stdout.count(DESCRIPTIONS[ReasonCode(code)]) == 1
    assert "decisions:" not in lines  # no per-decision listing without a selection
    assert lines[-1].startswith("drill down: ")


def test_summary_names_what_differed(edited) -> None:
    project, _first, second = edited
    text = project.q("explain", second["run_id"]).stdout
    assert "dependency_invalidated" in text and "(differs: dependencies" in text


def test_summary_stays_small_for_many_lanes(project: Project) -> None:
    for i in range(40):
        (project.root / "docs" / f"n{i:02}.md").write_text(DOC)
    doc = project.run()
    lines = project.q("explain", doc["run_id"]).stdout.splitlines()
    assert sum(doc["decisions"].values()) > 200
    assert len(lines) < 10


def test_default_json_is_the_reasons_view(edited) -> None:
    from runjournal.adapters.journal import open_journal
    from runjournal.projections.base import fold
    from runjournal.projections.reasons_report import ReasonReportProjection

    project, _first, second = edited
    store = open_journal(str(project.root / "out" / "journal.sqlite3"))
    try:
        view = fold(ReasonReportProjection(), store.projected_events(second["run_id"])).view()
    finally:
        store.close()
    assert project.qj("explain", second["run_id"]) == json.loads(json.dumps(view))


# --- explain: drilling down --------------------------------------------------------------

SELECTIONS = {
    # name: (arguments, predicate over (step, lane, decision))
    "executed": (
        ["--executed"],
        lambda s, ln, d: d["code"] not in ("reused", "predecessor_reused"),
    ),
    "changed": (
        ["--changed"],
        lambda s, ln, d: d["category"] == "invalid",
    ),
    "lane": (["--lane", "docs/b.md"], lambda s, ln, d: ln == "docs/b.md"),
    "code": (["--code", "reused"], lambda s, ln, d: d["code"] == "reused"),
    "step": (["--step", "glossary"], lambda s, ln, d: s == "glossary"),
    "lane+code": (
        ["--lane", "docs/b.md", "--code", "input_changed"],
        lambda s, ln, d: ln == "docs/b.md" and d["code"] == "input_changed",
    ),
    "changed+step": (
        ["--changed", "--step", "terms"],
        lambda s, ln, d: s == "terms" and d["category"] == "invalid",
    ),
}


def _all(view: dict) -> list[tuple[str, str, dict]]:
    return [
        (s["step"], lane["lane"], d)
        for s in view["steps"]
        for lane in s["lanes"]
        for d in lane["decisions"]
    ]


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_selection_matrix(edited, name: str) -> None:
    project, _first, second = edited
    args, keep = SELECTIONS[name]
    full = _all(project.qj("explain", second["run_id"]))
    expected = [(s, ln, d) for s, ln, d in full if keep(s, ln, d)]
    assert expected, "each selection must select something here"
    assert len(expected) < len(full) or name == "executed"
    doc = project.qj("explain", second["run_id"], *args, "--limit", "1000")
    assert _all(doc) == expected
    assert doc["matched"] == len(expected) == sum(doc["totals"].values())
    assert sum(r["count"] for r in doc["summary"]) == len(expected)
    text = project.q("explain", second["run_id"], *args, "--limit", "1000").stdout
    assert f"{len(expected)} of " in text.splitlines()[0]
    listed = [ln for ln in text.splitlines() if ln.startswith("  ") and " · " in ln]
    assert len(listed) == len(expected)


@pytest.mark.parametrize("limit", [1, 3])
def test_limit_bounds_the_listing(edited, limit: int) -> None:
    project, _first, second = edited
    text = project.q("explain", second["run_id"], "--code", "reused", "--limit", str(limit))
    listed = [ln for ln in text.stdout.splitlines() if ln.startswith("  ") and " · " in ln]
    assert len(listed) == limit
    doc = project.qj("explain", second["run_id"], "--code", "reused", "--limit", str(limit))
    assert len(_all(doc)) == limit and doc["limit"] == limit
    more = [ln for ln in text.stdout.splitlines() if ln.startswith("  … and ")]
    assert more == [f"  … and {doc['matched'] - limit} more (--limit N shows more)"]


def test_executed_on_a_fully_reused_run_matches_nothing(project: Project) -> None:
    project.run()
    doc = project.run("--resume")
    result = project.q("explain", doc["run_id"], "--executed")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].endswith(
        "0 of " + str(sum(doc["decisions"].values())) + " decisions match: none"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--code", "reusd"], "--code 'reusd' is not a reason code; did you mean 'reused'?"),
        (["--lane", "docs/x.md"], "has no lane 'docs/x.md'; did you mean 'docs/"),
        (["--limit", "0"], "Invalid value for '--limit'"),
    ],
)
def test_bad_selections_are_usage_errors(project: Project, args, message) -> None:
    doc = project.run()
    result = project.q("explain", doc["run_id"], *args)
    assert result.exit_code == 2
    assert message in result.output


def test_completion_of_codes_and_lanes(project: Project) -> None:
    from click.shell_completion import ShellComplete

    def complete(args: list[str], incomplete: str) -> list[str]:
        comp = ShellComplete(cli, {}, "runjournal", "_RUNJOURNAL_COMPLETE")
        return [item.value for item in comp.get_completions(args, incomplete)]

    doc = project.run()
    where = ["explain", doc["run_id"], "--output-root", "out"]
    assert complete([*where, "--code"], "re") == ["reused", "references_changed"]
    assert complete([*where, "--lane"], "docs/") == ["docs/a.md", "docs/b.md", "docs/c.md"]
    assert complete([*where, "--lane"], "c") == ["corpus"]
    assert complete(["explain", "--lane"], "") == []


# --- runs diff ----------------------------------------------------------------------------

CHANGES = {
    # name: (how to change the project between two runs, what the diff must say)
    "input": (
        lambda p: (p.root / "docs" / "b.md").write_text("Other **words**.\n"),
        lambda d: d["inputs"]["changed"] == ["docs/b.md"] and d["inputs"]["unchanged"] == 2,
    ),
    "input-added": (
        lambda p: (p.root / "docs" / "d.md").write_text(DOC),
        lambda d: (
            d["inputs"]["added"] == ["docs/d.md"]
            and {s["step"]: s["lanes_added"] for s in d["steps"]}["terms"] == ["docs/d.md"]
        ),
    ),
    "input-removed": (
        lambda p: (p.root / "docs" / "c.md").unlink(),
        lambda d: (
            d["inputs"]["removed"] == ["docs/c.md"]
            and "artifacts/terms/docs__c.md-" in " ".join(d["outputs"]["removed"])
        ),
    ),
    "params": (
        lambda p: p.write(min_count=1),
        lambda d: {s["step"]: s["components"] for s in d["steps"]} == {"terms": ["config"]},
    ),
    "chunking": (
        lambda p: p.write(max_chars=400),
        lambda d: (
            {s["step"]: s["components"] for s in d["steps"]}
            == {"terms": ["config"], "glossary": ["config"]}
        ),
    ),
    "references": (
        lambda p: p.write(refs='"style.md"'),
        lambda d: (
            d["references"]["added"] == ["style.md"]
            and all(s["components"] == ["references"] for s in d["steps"])
        ),
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_diff_matrix(project: Project, change: str) -> None:
    alter, says = CHANGES[change]
    a = project.run()
    alter(project)
    b = project.run("--resume")
    diff = project.qj("runs", "diff", a["run_id"], b["run_id"])
    assert diff["a"]["run_id"] == a["run_id"] and diff["b"]["run_id"] == b["run_id"]
    assert says(diff), diff
    assert diff["decisions"], "a resume after a change decides differently"
    assert {d["step"] for d in diff["decisions"]} <= {"terms", "glossary"}
    text = project.q("runs", "diff", a["run_id"], b["run_id"])
    assert text.exit_code == 0
    assert text.stdout.startswith(f"runs {a['run_id']} (succeeded) -> {b['run_id']} (succeeded)")
    assert "decisions:" in text.stdout and "no differences" not in text.stdout


def test_diff_counts_decisions_per_step_and_code(edited) -> None:
    project, first, second = edited
    diff = project.qj("runs", "diff", first["run_id"], second["run_id"])
    for row in diff["decisions"]:
        assert row["a"] != row["b"]
    totals_b: dict[str, int] = {}
    for row in diff["decisions"]:
        totals_b[row["code"]] = totals_b.get(row["code"], 0) + row["b"]
    for code, n in second["decisions"].items():
        assert totals_b.get(code, 0) == n  # nothing of B was decided in A
    assert {"name": "resume", "a": False, "b": True} in diff["settings"]
    changed = diff["outputs"]["changed"]
    assert any(name.startswith("artifacts/terms/docs__b.md") for name in changed)


def test_diff_of_a_module_fingerprint(project: Project) -> None:
    plugin = project.root / "plugins" / "t.py"
    plugin.parent.mkdir()
    source = (
        "from runjournal.adapters.builtin_modules.terms import TermsModule\n"
        "class T(TermsModule):\n    fingerprint = 'test.t/1'\n    note = 'first'\n"
    )
    plugin.write_text(source)
    text = (project.root / "pipeline.toml").read_text()
    (project.root / "pipeline.toml").write_text(
        text.replace('module = "builtin.terms"', 'module = "plugins/t.py:T"')
    )
    a = project.run()
    # the class's own code changed with its fingerprint (a bump alone changes no code)
    plugin.write_text(source.replace("test.t/1", "test.t/2").replace("first", "second"))
    b = project.run("--resume")
    diff = project.qj("runs", "diff", a["run_id"], b["run_id"])
    [terms] = [s for s in diff["steps"] if s["step"] == "terms"]
    assert terms["components"] == ["module"]
    assert terms["fingerprint"] == {"a": "test.t/1", "b": "test.t/2"}
    assert terms["source_changed"] is True
    text_out = project.q("runs", "diff", a["run_id"], b["run_id"]).stdout
    assert "terms: module changed; fingerprint test.t/1 -> test.t/2; module source changed" in (
        text_out
    )


def test_diff_of_a_run_with_itself_has_no_differences(project: Project) -> None:
    a = project.run()
    result = project.q("runs", "diff", a["run_id"], "latest")
    assert result.stdout.splitlines()[-1] == "no differences"
    diff = project.qj("runs", "diff", a["run_id"], a["run_id"])
    assert diff["steps"] == diff["decisions"] == diff["settings"] == []


def test_diff_with_an_unknown_run(project: Project) -> None:
    a = project.run()
    result = project.q("runs", "diff", a["run_id"], "nope")
    assert result.exit_code == 1 and "nope" in result.output


# --- runs show: outputs with provenance -----------------------------------------------------


def test_show_lists_outputs_with_step_lane_and_decisions(edited) -> None:
    project, _first, second = edited
    text = project.q("runs", "show", second["run_id"]).stdout
    lines = text.splitlines()
    start = lines.index("  outputs (produced by: step · lane: its decisions):")
    listed = lines[start + 1 :]
    assert listed[0].lstrip().startswith("glossary.md")  # module outputs first
    assert "glossary · corpus: " in listed[0]
    [b_line] = [ln for ln in listed if "artifacts/terms/docs__b.md" in ln]
    assert "terms · docs/b.md: " in b_line and "input_changed" in b_line
    [a_line] = [ln for ln in listed if "artifacts/terms/docs__a.md" in ln]
    assert "reused" in a_line and "input_changed" not in a_line


def test_show_outputs_json(edited) -> None:
    project, _first, second = edited
    doc = project.qj("runs", "show", second["run_id"], "--outputs")
    by_name = {o["name"]: o for o in doc["outputs"]}
    assert set(by_name) == {o["name"] for o in second["outputs"]}
    glossary = by_name["glossary.md"]
    assert (glossary["step"], glossary["lane"]) == ("glossary", "corpus")
    assert glossary["executed"] > 0 and glossary["restored"] is False
    events = json.loads(project.q("journal", "show", second["run_id"], "--json").stdout)["events"]
    decided = [
        e["data"]["code"]
        for e in events
        if e["type"] == "StageDecided" and e["data"]["step"] == "glossary"
    ]
    assert sum(glossary["decisions"].values()) == len(decided)
    written = [e["data"] for e in events if e["type"] == "OutputWritten"]
    assert {(w["name"], w["step"], w["lane"]) for w in written} == {
        (o["name"], o["step"], o["lane"]) for o in doc["outputs"]
    }


def test_show_json_is_still_the_manifest(project: Project) -> None:
    doc = project.run()
    shown = project.qj("runs", "show", doc["run_id"])
    assert shown == json.loads(Path(doc["manifest"]).read_text())


def test_show_marks_restored_lanes_and_own_files(project: Project) -> None:
    project.run()
    doc = project.run("--recompute", "glossary", "--chunk-map")
    outputs = {
        o["name"]: o for o in project.qj("runs", "show", doc["run_id"], "--outputs")["outputs"]
    }
    assert outputs["chunk-map.json"]["step"] is None
    terms = [o for n, o in outputs.items() if n.startswith("artifacts/terms/")]
    assert terms and all(
        o["restored"] and o["decisions"] == {"predecessor_reused": 1} for o in terms
    )
    text = project.q("runs", "show", doc["run_id"], "--outputs").stdout
    assert "(restored)" in text and "runjournal" in text


def test_show_is_bounded_and_outputs_lists_all(project: Project) -> None:
    for i in range(30):
        (project.root / "docs" / f"n{i:02}.md").write_text(DOC)
    doc = project.run()
    text = project.q("runs", "show", doc["run_id"]).stdout.splitlines()
    assert text[-1] == f"    … and {len(doc['outputs']) - 20} more (--outputs lists them all)"
    everything = project.q("runs", "show", doc["run_id"], "--outputs").stdout.splitlines()
    assert len(everything) == 1 + len(doc["outputs"])
