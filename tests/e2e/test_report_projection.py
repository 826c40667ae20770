"""`report.json` is a projection: `projections rebuild` gives the live file byte for byte.

Through the installed console script: a successful run writes `report.json` from the
journal's fold at terminalization; deleting it and rebuilding (or rebuilding over it)
gives the same bytes. A failed run has no `report.json` and a rebuild adds none, while
its `run --json` counts are the same fold of its events (docs/internals.md "Projections").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from runjournal.adapters.journal import open_journal
from runjournal.projections.base import fold
from runjournal.projections.report import ReportProjection
from support.console import CLI
from support.paths import EXAMPLE

FAILING_STEP = """
[[steps]]
id = "boom"
module = "plugins/boom.py:Boom"
"""

BOOM = """
from runjournal.domain.modules import Module, Normalized


class Boom(Module):
    name = "test.boom"
    fingerprint = "test.boom/1"
    artifact_kind = "boom"
    schema = "test.boom/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        if chunk.source.endswith("04-idempotence.md"):
            raise ValueError("boom on purpose")
        return len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged, ["a warning from boom"])
"""


def setup(tmp_path: Path, *, failing: bool) -> tuple[CLI, Path, list[str]]:
    example = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, example)
    if failing:
        (example / "plugins" / "boom.py").write_text(BOOM)
        with (example / "pipeline.toml").open("a") as fh:
            fh.write(FAILING_STEP)
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--cache-root", str(tmp_path / "cache")]
    return CLI(tmp_path / "home"), example / "pipeline.toml", roots


def folded(out: Path, run_id: str) -> dict:
    with open_journal(str(out / "journal.sqlite3")) as store:
        return fold(ReportProjection(), store.events(run_id)).view()


def test_a_rebuilt_report_equals_the_live_one_byte_for_byte(tmp_path: Path) -> None:
    cli, pipeline, roots = setup(tmp_path, failing=False)
    proc, doc = cli.json("run", str(pipeline), *roots, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    report = Path(doc["report"])
    live = report.read_bytes()
    written = json.loads(live)
    assert written["projection"] == {"name": "report", "version": ReportProjection.VERSION}
    # The file and the --json document carry the same fold.
    for key in ("decisions", "plans", "module_calls", "warnings", "hints", "outputs"):
        assert written[key] == doc[key], key
    assert doc["module_calls"] > 0 and doc["decisions"]

    rebuilt = cli("projections", "rebuild", "report", *roots[:2])  # over the live file
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert report.read_bytes() == live
    report.unlink()
    rebuilt = cli("projections", "rebuild", *roots[:2], "--json")  # every projection
    assert rebuilt.returncode == 0, rebuilt.stderr
    results = {r["name"]: r for r in json.loads(rebuilt.stdout)["projections"]}
    assert results["report"]["written"] == 1
    assert report.read_bytes() == live
    status = cli("projections", "status", *roots[:2], "--json")
    rows = {r["name"]: r for r in json.loads(status.stdout)["projections"]}
    assert rows["report"]["stale"] is False and rows["report"]["views"] == 1


def test_a_failed_run_has_no_report_and_its_counts_are_the_fold(tmp_path: Path) -> None:
    cli, pipeline, roots = setup(tmp_path, failing=True)
    proc, doc = cli.json("run", str(pipeline), *roots, "--no-progress")
    assert proc.returncode == 1, proc.stderr
    assert doc["status"] == "failed" and doc["report"] is None
    run_dir = Path(doc["run_dir"])
    assert not (run_dir / "report.json").exists()
    rebuilt = cli("projections", "rebuild", "report", *roots[:2], "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["projections"][0]["written"] == 0
    assert not (run_dir / "report.json").exists()  # a failed run gets none (Layout)
    view = folded(Path(roots[1]), doc["run_id"])
    for key in ("decisions", "plans", "module_calls", "warnings", "hints", "recompute", "roots"):
        assert view[key] == doc[key], key
    assert view["journal"] == doc["journal"] and view["status"] == "failed"
    assert doc["decisions"].get("stage_failed") == 1
    assert doc["module_calls"] > 0  # the calls that produced a result before the failure
