"""`report.html` opened in a real headless Chromium (the `chromium` fixture, tests/e2e/conftest.py).

The example pipeline runs with the installed console script; its page is loaded from
`file://`. Asserted in the browser: one matrix cell per step and lane, one SVG node per
step, no console or log error, no exception, no dialog, and no network request other
than the page itself. A second scenario plants markup in a document name, a `--set`
value (step ids are `[A-Za-z0-9_-]`: the pipeline refuses markup there, and the command
line is shown where the params are), a module warning and a module error, and shows that
no script runs and the markup arrives as text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

COUNT_CELLS = "document.querySelectorAll('.matrix .cell').length"
CELL_PAIRS = (
    "[...document.querySelectorAll('.matrix .cell')].map(c => [c.dataset.step, c.dataset.lane])"
)
NODE_STEPS = "[...document.querySelectorAll('svg.step-graph g.node')].map(n => n.dataset.step)"
ACTIVE_CONTENT = (
    "document.querySelectorAll('script, img, iframe, object, embed, link[rel=stylesheet]').length"
)
EVENT_HANDLERS = (
    "[...document.querySelectorAll('*')]"
    ".flatMap(e => [...e.attributes].filter(a => a.name.startsWith('on')).map(a => a.name))"
)


def journal(cli: Any, out: Path, run_id: str) -> list[dict[str, Any]]:
    proc, doc = cli.json("journal", "show", run_id, "--output-root", str(out))
    assert proc.returncode == 0, proc.stderr
    return doc["events"]


def lanes_of(events: list[dict[str, Any]]) -> list[list[str]]:
    return [[e["data"]["step"], e["data"]["lane"]] for e in events if e["type"] == "LaneResolved"]


def explained_lanes(cli: Any, out: Path, run_id: str) -> list[list[str]]:
    """The run's lanes as `explain` reads them: with the lanes its block summaries stand
    for (`journal show` shows the events as stored, a summary as one event)."""
    proc, doc = cli.json("explain", run_id, "--output-root", str(out))
    assert proc.returncode == 0, proc.stderr
    return [[s["step"], lane["lane"]] for s in doc["steps"] for lane in s["lanes"]]


def assert_clean(page: Any, url: str) -> None:
    assert page.errors == []
    assert page.dialogs == []
    assert page.requests == [url]  # the page itself, nothing else


def test_the_example_report_in_chromium(
    cli: Any, example: Path, tmp_path: Path, chromium: Any
) -> None:
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--no-progress"]
    assert cli("run", str(example), *roots).returncode == 0
    doc = example.parent / "docs" / "02-journal.md"
    doc.write_text(doc.read_text() + "\nA **journal** is appended to, never rewritten.\n")
    proc, result = cli.json(
        "run", str(example), *roots, "--resume", "--report", "--debug", "summary"
    )
    assert proc.returncode == 0, proc.stderr
    events = journal(cli, out, result["run_id"])
    url = Path(result["report_html"]).as_uri()

    page = chromium.new_page()
    page.open(url)
    assert page.evaluate("document.title").startswith(f"glossary · {result['run_id']}")
    lanes = explained_lanes(cli, out, result["run_id"])
    assert page.evaluate(COUNT_CELLS) == len(lanes) == 25
    assert sorted(page.evaluate(CELL_PAIRS)) == sorted(lanes)  # rows are lanes
    # the lanes it journaled itself: the changed document's; the others are in a summary
    assert len(lanes_of(events)) < 25
    steps = ["terms", "definitions", "acronyms", "headings", "glossary"]
    assert page.evaluate(NODE_STEPS) == steps
    assert page.evaluate("document.querySelectorAll('svg.step-graph path.edge').length") == 3
    # every cell is drawn, has a size, and carries its decisions on hover
    sizes = page.evaluate(
        "[...document.querySelectorAll('.matrix .cell')]"
        ".map(c => { const r = c.getBoundingClientRect(); return [r.width, r.height] })"
    )
    assert all(w > 40 and h > 20 for w, h in sizes)
    changed = page.evaluate(
        'document.querySelector(\'.cell[data-step="terms"][data-lane="docs/02-journal.md"]\').title'
    )
    assert "extract:" in changed and "input_changed" in changed
    assert page.evaluate("document.querySelectorAll('.timeline rect.exec').length") > 0
    bundle = page.evaluate(
        "[...document.querySelectorAll('a')].map(a => a.href).filter(h => h.includes('/debug/'))"
    )
    assert set(bundle) == {Path(result["debug_bundle"]).as_uri()}  # header and Run section
    assert page.evaluate(ACTIVE_CONTENT) == 0
    assert_clean(page, url)


PAYLOAD_DOC = "\"><img src=x onerror=alert('doc')>"  # a file name: no '/'
PAYLOAD = "<script>alert('x')</script>\"><img src=x onerror=\"alert('y')\">"

PLANTED_PLUGIN = """
from runjournal.domain.modules import Module, Normalized

PAYLOAD = {payload!r}


class Planted(Module):
    name = "test.planted"
    fingerprint = "test.planted/1"
    artifact_kind = "planted"
    schema = "test.planted/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        if ctx.overrides.get("explode"):
            raise ValueError("module error " + PAYLOAD)
        return len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged, warnings=["module warning " + PAYLOAD])
"""

PLANTED_PIPELINE = """
name = "planted"
inputs = ["docs/*.md"]

[[steps]]
id = "planted"
module = "plugins/planted.py:Planted"
"""


@pytest.mark.parametrize("failing", [False, True], ids=["warning", "module-error"])
def test_planted_markup_never_runs(cli: Any, tmp_path: Path, chromium: Any, failing: bool) -> None:
    pipe = tmp_path / "pipe"
    (pipe / "docs").mkdir(parents=True)
    (pipe / "plugins").mkdir()
    (pipe / "plugins" / "planted.py").write_text(PLANTED_PLUGIN.format(payload=PAYLOAD))
    (pipe / "pipeline.toml").write_text(PLANTED_PIPELINE)
    (pipe / "docs" / f"{PAYLOAD_DOC}.md").write_text("Some text about journals.\n")
    out = tmp_path / "out"
    args = ["run", str(pipe / "pipeline.toml"), "--output-root", str(out), "--no-progress"]
    args += ["--report", "--set", f"note={PAYLOAD}"]
    if failing:
        args += ["--set", "explode=1"]
    proc, result = cli.json(*args)
    assert proc.returncode == (1 if failing else 0), proc.stderr
    report = Path(result["report_html"])
    raw = report.read_text()
    for planted in (PAYLOAD, PAYLOAD_DOC, "<script>", "<img"):
        assert planted not in raw

    page = chromium.new_page()
    page.open(report.as_uri())
    assert page.evaluate("document.title") == (
        f"planted · {result['run_id']} · {'failed' if failing else 'succeeded'}"
    )
    assert page.evaluate(ACTIVE_CONTENT) == 0
    assert page.evaluate(EVENT_HANDLERS) == []
    text = page.evaluate("document.body.textContent")
    lane = f"docs/{PAYLOAD_DOC}.md"
    assert lane in text
    assert page.evaluate(CELL_PAIRS) == [["planted", lane]]
    assert "note=" + PAYLOAD in page.evaluate(
        "[...document.querySelectorAll('code')].map(c => c.textContent).join('\\n')"
    ).replace("'\"'\"'", "'")  # the shell quoting of the command line, undone
    if failing:
        assert f"ValueError: module error {PAYLOAD}" in text
    else:
        assert f"module warning {PAYLOAD}" in text
    assert_clean(page, report.as_uri())  # a blocked inline script would log a CSP error
    # the journal still has the markup as it was: escaping is the page's job alone
    events = json.dumps(journal(cli, out, result["run_id"]))
    assert json.dumps(PAYLOAD)[1:-1] in events
