"""Issue: a 3 MB module warning was echoed in full into `--json` (and everything else).

Warnings are bounded like error details (docs/internals.md "The runner"): at most
`WARNING_LIMIT` bytes wherever they are kept: `--json`, `report.json`, the journal, the
debug summary, the text summary.
"""

from __future__ import annotations

import json
from pathlib import Path

from runjournal.domain.runner.boundary import WARNING_LIMIT

HUGE = 3_000_000

PLUGIN = f"""\
from runjournal.domain.modules import Module, Normalized


class Loud(Module):
    name = "t.loud"
    fingerprint = "t.loud/1"
    artifact_kind = "loud"
    schema = "t.loud/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        return len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged, ["LOUD" * {HUGE // 4}])
"""

PIPELINE = """\
name = "loud"
inputs = ["a.md"]

[[steps]]
id = "loud"
module = "plugins/loud.py:Loud"
scope = "document"
"""


def test_a_3mb_warning_is_bounded_in_json_journal_report_and_summary(tmp_path: Path, invoke):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "loud.py").write_text(PLUGIN)
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    (tmp_path / "a.md").write_text("# a\n")
    journal = f"sqlite:///{tmp_path / 'journal.sqlite3'}"
    roots = ["--output-root", str(tmp_path / "out"), "--cache-root", str(tmp_path / "cache")]
    result = invoke(
        "run", str(tmp_path / "pipeline.toml"), *roots, "--journal", journal,
        "--debug", "summary", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[:2000]
    assert len(result.stdout) < 50_000
    doc = json.loads(result.stdout)
    (warning,) = doc["warnings"]
    assert warning["message"].startswith("LOUDLOUD") and warning["message"].endswith("…")
    assert len(warning["message"].encode("utf-8")) <= WARNING_LIMIT

    run_dir = Path(doc["run_dir"])
    report = (run_dir / "report.json").read_text()
    assert len(report) < 50_000 and "LOUD" * (WARNING_LIMIT // 4) not in report

    shown = invoke("journal", "show", doc["run_id"], "--journal", journal, "--json")
    assert shown.exit_code == 0, shown.output[:2000]
    assert len(shown.stdout) < 100_000
    events = json.loads(shown.stdout)["events"]
    generated = [e["data"] for e in events if e["type"] == "ArtifactGenerated"]
    assert [len(w.encode("utf-8")) <= WARNING_LIMIT for g in generated for w in g["warnings"]] == [
        True
    ]

    bundle_files = [p for p in Path(doc["debug_bundle"]).rglob("*") if p.is_file()]
    assert bundle_files
    for path in bundle_files:
        assert path.stat().st_size < 100_000, path

    text = invoke("run", str(tmp_path / "pipeline.toml"), *roots, "--journal", journal)
    assert text.exit_code == 0, text.output[:2000]
    assert len(text.output) < 20_000
