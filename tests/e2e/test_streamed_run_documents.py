"""`manifest.json`, `report.json` and `run --json` are written one output at a time and are
byte for byte what encoding each document whole gave (issue 29: peak RSS).

Their outputs used to be made as one list of dicts and each document encoded whole (the
run's end then held every output several times over); now each is written through the
streaming writer (app/documents.py `json_bytes_streamed`, cli/output.py
`emit_json_streamed`). A cold run and a no-op resume of the glossary example, each
document compared with the journal's fold of the run encoded whole (`json_bytes`) and,
for `run --json`, with the whole document as `emit_json` printed it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
from runjournal.adapters.journal import open_journal
from runjournal.app.documents import json_bytes
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from support.console import CLI
from support.paths import EXAMPLE

_sorted = msgspec.json.Encoder(order="sorted")


def _whole(doc: object) -> str:
    """What `emit_json` printed for `doc`: encoded and formatted whole."""
    return msgspec.json.format(_sorted.encode(doc), indent=2).decode("utf-8") + "\n"


def test_the_run_documents_are_the_bytes_they_were(tmp_path: Path) -> None:
    project = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    cli = CLI(tmp_path / "home")
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--cache-root", str(tmp_path / "cache")]
    for extra in ((), ("--resume",)):
        proc = cli("run", str(project / "pipeline.toml"), *roots, "--no-progress", "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert len(doc["outputs"]) > 1
        assert proc.stdout == _whole(doc)
        with open_journal(str(out / "journal.sqlite3")) as store:
            events = list(store.projected_events(doc["run_id"]))
        manifest = Path(doc["manifest"]).read_bytes()
        assert manifest == json_bytes(fold(ManifestProjection(), events).view())
        assert len(json.loads(manifest)["outputs"]) == len(doc["outputs"])
        report = Path(doc["report"]).read_bytes()
        assert report == json_bytes(json.loads(report))
        assert json.loads(report)["outputs"] == doc["outputs"]
