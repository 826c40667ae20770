"""`run` checks its own manifest against its journal (issue #25, defect 2).

A document that repeats a chunk gives chunks with one id (domain/identity.py); a cold
run of it used to write a `manifest.json` counting fewer decisions than its journal held,
so `journal audit` of the untouched run failed. Now every such run audits clean, and a
manifest that still disagrees with the journal (a bug, here injected into the live fold)
is rewritten from the journal's fold, reported on one line and exits 70
(docs/operations.md "A manifest that disagrees with its journal").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from runjournal.adapters.journal import open_journal
from runjournal.cli.output import json_bytes
from runjournal.domain.events import StageDecided
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from support.console import CLI
from support.inprocess import InProcess
from support.paths import EXAMPLE

# About 1,100 characters: with `max_chars = 1200` each copy is a chunk of its own.
PARAGRAPH = ("The Write-Ahead Log keeps every Event Sourcing record. " * 20).strip()


def repeating_project(tmp_path: Path) -> Path:
    """The glossary example plus a document whose chunks repeat one paragraph."""
    project = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    text = "# Repeats\n\n" + (PARAGRAPH + "\n\n") * 4 + "End.\n"
    (project / "docs" / "07-repeats.md").write_text(text)
    return project / "pipeline.toml"


def journaled(out: Path, run_id: str) -> tuple[int, bytes]:
    """Every decision the journal holds, and the journal's fold as `manifest.json` bytes."""
    with open_journal(str(out / "journal.sqlite3")) as store:
        events = list(store.events(run_id))
    decided = sum(1 for e in events if isinstance(e, StageDecided))
    return decided, json_bytes(fold(ManifestProjection(), events).view())


def test_a_cold_run_of_repeated_chunks_audits_clean(tmp_path: Path) -> None:
    cli = CLI(tmp_path / "home")
    pipeline = repeating_project(tmp_path)
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--cache-root", str(tmp_path / "cache")]
    proc, doc = cli.json("run", str(pipeline), *roots, "--no-progress", "--jobs", "8")
    assert proc.returncode == 0, proc.stderr
    assert doc["internal_error"] is None
    manifest = Path(doc["manifest"])
    written = json.loads(manifest.read_bytes())
    decided, folded = journaled(out, doc["run_id"])
    assert sum(written["decisions"].values()) + sum(written["not_started"].values()) == decided
    assert manifest.read_bytes() == folded
    audit = cli("journal", "audit", doc["run_id"], *roots[:2])
    assert audit.returncode == 0, audit.stdout + audit.stderr


class _Lossy(ManifestProjection):
    """A live fold with a bug: it drops the run's first decision."""

    def __init__(self) -> None:
        super().__init__()
        self._dropped = False

    def decided(self, event: StageDecided) -> None:
        if not self._dropped:
            self._dropped = True
            return
        super().decided(event)


def test_a_manifest_that_disagrees_is_rewritten_and_exits_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runjournal.cli.compose.ManifestProjection", _Lossy)
    invoke = InProcess(tmp_path / "home")
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--cache-root", str(tmp_path / "cache")]
    result = invoke("run", str(repeating_project(tmp_path)), *roots, "--no-progress", "--json")
    assert result.exit_code == 70, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "succeeded" and doc["error"] is None
    line = doc["internal_error"]
    assert line.startswith("internal error: ") and "please report" in line
    assert "manifest.json was rewritten from the journal" in line
    lines = result.stderr.strip().splitlines()
    assert lines == [f"runjournal: error: {line}"]
    decided, folded = journaled(out, doc["run_id"])
    assert Path(doc["manifest"]).read_bytes() == folded  # the journal's fold, not the lossy one
    assert json.loads(folded)["decisions"] == {"not_resumed": decided}
    audit = invoke("journal", "audit", doc["run_id"], *roots[:2])
    assert audit.exit_code == 0, audit.output


def test_a_failed_run_keeps_its_exit_code_and_still_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runjournal.cli.compose.ManifestProjection", _Lossy)
    invoke = InProcess(tmp_path / "home")
    pipeline = repeating_project(tmp_path)
    boom = pipeline.parent / "boom.toml"
    boom.write_text(
        pipeline.read_text().split("[[steps]]")[0]
        + '[[steps]]\nid = "boom"\nmodule = "plugins/boom.py:Boom"\n'
    )
    (pipeline.parent / "plugins" / "boom.py").write_text(BOOM)
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--cache-root", str(tmp_path / "cache")]
    result = invoke("run", str(boom), *roots, "--no-progress", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "failed" and doc["internal_error"].startswith("internal error: ")
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"runjournal: error: {doc['internal_error']}"
    assert Path(doc["manifest"]).read_bytes() == journaled(out, doc["run_id"])[1]


BOOM = """
from runjournal.domain.modules import Module


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
        return merged
"""
