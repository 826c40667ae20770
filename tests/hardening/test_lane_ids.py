"""Issue: a file literally named like another lane's safe id must not share its lane directory.

`docs/a.md` has the safe lane `docs__a.md-5231f8a1`; a file with exactly that name used to
map to the same `artifacts/<step>/…json` and checkpoint directory, so every run failed with
a misleading "duplicate" output name (docs/operations.md "Names").
"""

from __future__ import annotations

import json
from pathlib import Path

from runjournal.domain.names import safe_lane_id
from support.cache_entries import checkpoints

PIPELINE = """\
name = "lanes"
inputs = ["docs/a.md", "docs__a.md-5231f8a1"]

[[steps]]
id = "headings"
module = "builtin.headings"
scope = "document"
"""


def test_a_file_named_like_an_escaped_lane_gets_its_own_lane(tmp_path: Path, invoke) -> None:
    assert safe_lane_id("docs/a.md") == "docs__a.md-5231f8a1"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# From docs/a.md\n\ntext\n")
    (tmp_path / "docs__a.md-5231f8a1").write_text("# From the look-alike\n\nother\n")
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    common = [
        "--output-root",
        str(tmp_path / "out"),
        "--cache-root",
        str(tmp_path / "cache"),
        "--journal",
        f"sqlite:///{tmp_path / 'journal.sqlite3'}",
        "--json",
    ]
    first = invoke("run", str(tmp_path / "pipeline.toml"), *common)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert doc["status"] == "succeeded"
    run_dir = Path(doc["run_dir"])
    artifacts = sorted(p.name for p in (run_dir / "artifacts" / "headings").iterdir())
    assert len(artifacts) == 2
    assert "docs__a.md-5231f8a1.json" in artifacts  # docs/a.md keeps its safe lane
    texts = {name: (run_dir / "artifacts" / "headings" / name).read_text() for name in artifacts}
    assert "From docs/a.md" in texts["docs__a.md-5231f8a1.json"]
    (other,) = (t for n, t in texts.items() if n != "docs__a.md-5231f8a1.json")
    assert "From the look-alike" in other
    lanes = {e.rel.split("/")[4] for e in checkpoints(tmp_path / "cache", "*/steps/headings/*")}
    assert len(lanes) == 2  # two checkpoint directories, one per lane

    again = invoke("run", str(tmp_path / "pipeline.toml"), "--resume", *common)
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["status"] == "succeeded"
    assert doc["module_calls"] == 0  # both lanes found their own checkpoints
    assert set(doc["decisions"]) == {"reused"}
