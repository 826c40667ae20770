"""The maintenance use-cases from Python (docs/python-api.md "Maintenance"): `gc`,
`recover`, `export`, `import_`, `rebuild_projections` and `projection_status` have the
effects their commands have, return typed reports whose `document()` is the command's
`--json` document, and fail with typed exceptions."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runjournal
from support.python_api_project import cli_json, glossary_copy
from support.slow_plugin import slow_plugin

SLOW = slow_plugin(600)


@pytest.fixture
def glossary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return glossary_copy(tmp_path, monkeypatch)


def test_gc_removes_the_run_directories_beyond_the_retention(glossary: Path) -> None:
    project = runjournal.Project.open(glossary)
    first, second = project.run(resume=False), project.run(resume=False)
    assert first.run_dir and second.run_dir and Path(first.run_dir).is_dir()

    dry = project.gc(keep=1, dry_run=True)
    assert dry.dry_run and dry.runs == [first.run_id] and first.run_dir in dry.removed
    assert Path(first.run_dir).is_dir()  # a dry run removes nothing

    report = project.gc(keep=1)
    assert report.runs == [first.run_id] and first.run_dir in report.removed
    assert not Path(first.run_dir).exists() and Path(second.run_dir).is_dir()
    assert report.document()["runs"] == [first.run_id] and report.cache is None

    collected = project.gc(cache=True, dry_run=True)  # every run kept: the cache only
    assert collected.runs == [] and collected.cache is not None
    assert collected.cache["root"] == project._parse({}, with_llm=False).config.cache_root

    with pytest.raises(runjournal.UsageError, match="--older-than"):
        project.gc(older_than="soon")
    with pytest.raises(runjournal.UsageError, match="gc needs"):
        project.gc()


def test_export_then_import_into_another_journal(glossary: Path, tmp_path: Path) -> None:
    project = runjournal.Project.open(glossary)
    run = project.run()
    target = tmp_path / "moved.rjexport"
    exported = project.export("latest", target)
    assert exported.run_id == run.run_id and exported.file == str(target)
    assert exported.sha256 == hashlib.sha256(target.read_bytes()).hexdigest()
    assert exported.events > 0 and exported.bytes == target.stat().st_size
    with pytest.raises(runjournal.UsageError, match="use --force"):
        project.export(run.run_id, target)
    assert project.export(run.run_id, target, force=True).sha256 == exported.sha256

    other = runjournal.Project.open(glossary, journal=tmp_path / "other" / "journal.sqlite3")
    assert other.runs() == []
    imported = other.import_(target)
    assert (imported.run_id, imported.status) == (run.run_id, "imported")
    assert imported.events == exported.events
    assert [r["run_id"] for r in other.runs()] == [run.run_id]
    assert other.explain(run.run_id)["run_id"] == run.run_id
    assert other.import_(target).status == "already_imported"

    # the CLI's import of the same file finds it there too
    doc = cli_json(
        "journal", "import", str(target), "--journal", str(tmp_path / "other" / "journal.sqlite3")
    )
    assert doc["status"] == "already_imported" and doc["run_id"] == run.run_id

    not_an_export = tmp_path / "notes.txt"
    not_an_export.write_text("hello\n")
    with pytest.raises(runjournal.UsageError):
        other.import_(not_an_export)
    with pytest.raises(runjournal.UsageError, match="cannot read"):
        other.import_(tmp_path / "missing.rjexport")


def test_rebuild_projections_writes_every_view(glossary: Path) -> None:
    project = runjournal.Project.open(glossary)
    run = project.run()
    report = project.rebuild_projections()
    assert report.ok and report.failures == [] and report.run_id is None
    assert {r.name for r in report.projections} == {
        row.name for row in project.projection_status().projections
    }
    assert all(r.written + r.skipped == 1 for r in report.projections)  # one run
    assert not any(row.stale for row in project.projection_status().projections)

    manifest = Path(run.run_dir or "") / "manifest.json"
    recorded = manifest.read_bytes()
    manifest.unlink()
    one = project.rebuild_projections("manifest", run="latest")
    assert one.run_id == run.run_id and [r.name for r in one.projections] == ["manifest"]
    assert one.projections[0].written == 1 and manifest.read_bytes() == recorded
    with pytest.raises(runjournal.UsageError):
        project.rebuild_projections("no-such-view")


def test_recover_abandons_a_killed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    monkeypatch.chdir(tmp_path)
    roots = {"output_root": str(tmp_path / "out"), "cache_root": str(tmp_path / "cache")}
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("hello\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow.py").write_text(SLOW)
    (tmp_path / "pipeline.toml").write_text(
        'name = "slow"\ninputs = ["docs/*.md"]\n'
        '[[steps]]\nid = "s"\nmodule = "plugins/slow.py:Slow"\n'
    )
    project = runjournal.Project.open(tmp_path, **roots)
    assert project.runs() == []
    assert project.recover().abandoned == []  # no journal yet: nothing to abandon
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import runjournal; runjournal.Project.open({str(tmp_path)!r}, **{roots!r}).run()",
        ],
        env=os.environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not [r for r in project.runs() if r["status"] == "running"]:
            assert child.poll() is None, "the run ended before it was killed"
            time.sleep(0.2)
        live = project.recover(dry_run=True)
        assert live.abandoned == [] and [r["why"] for r in live.skipped] == ["still running"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=120)
    cache = Path(project._parse({}, with_llm=False).config.cache_root)
    (cache / ".rj-tmp-leftover").write_bytes(b"partial")

    dry = project.recover(dry_run=True)
    assert [r["run_id"] for r in dry.abandoned] == [project.runs()[0]["run_id"]]
    assert (cache / ".rj-tmp-leftover").exists()

    report = project.recover()
    assert len(report.abandoned) == 1 and report.temp_files["cache"] == [".rj-tmp-leftover"]
    assert not (cache / ".rj-tmp-leftover").exists()
    assert [r["status"] for r in project.runs()] == ["abandoned"]
    assert report.document()["temp_sweep"] == "done"
    assert project.recover().abandoned == []
