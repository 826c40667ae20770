"""Commands without a PIPELINE find the journal and run directories of the project they
are started in (docs/configuration.md "Finding the project", docs/operations.md "Where a
run lives"): no flag repeated, nothing written into the current directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PIPELINE = """\
name = "proj"
inputs = ["docs/*.md"]

[runjournal]
output_root = "out"

[[steps]]
id = "terms"
module = "builtin.terms"
scope = "document"
"""

DOC = "# Notes\n\nA **journal** is a log. The **journal** keeps every decision.\n"


def _tree(top: Path, *, skip: str | None = None) -> dict[str, bytes | None]:
    """Every path below `top` with its bytes (None for a directory), `skip` left out."""
    found: dict[str, bytes | None] = {}
    for path in sorted(top.rglob("*")):
        rel = path.relative_to(top).as_posix()
        if skip is not None and (rel == skip or rel.startswith(skip + "/")):
            continue
        found[rel] = None if path.is_dir() else path.read_bytes()
    return found


@pytest.fixture
def project(cli, tmp_path: Path) -> Path:
    """A pipeline whose `[runjournal]` table says `output_root = "out"`, run three times
    from its own directory."""
    proj = tmp_path / "proj"
    (proj / "docs" / "deep").mkdir(parents=True)
    (proj / "docs" / "a.md").write_text(DOC)
    (proj / "pipeline.toml").write_text(PIPELINE)
    for _ in range(3):
        proc = cli("run", "pipeline.toml", "-q", cwd=proj)
        assert proc.returncode == 0, proc.stderr
    return proj


def _run_ids(cli, cwd: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    proc, doc = cli.json("runs", "list", *args, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return sorted(r["run_id"] for r in doc["runs"])


@pytest.mark.parametrize("where", [".", "docs/deep"])
def test_every_command_finds_the_pipelines_runs_without_flags(cli, project, where) -> None:
    cwd = project / where
    out = project / "out"
    runs = sorted(p.name for p in out.iterdir() if p.name[:1].isdigit())
    assert len(runs) == 3
    before = _tree(cwd, skip="out" if where == "." else None)

    assert _run_ids(cli, cwd) == runs

    proc = cli("explain", "latest", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert runs[-1] in proc.stdout or any(r in proc.stdout for r in runs)

    proc, doc = cli.json("journal", "audit", "latest", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert doc["run_directory"]["status"] == "checked"
    assert doc["run_directory"]["path"].startswith(str(out.resolve()) + os.sep)

    newest = os.readlink(out / "latest-ok")  # the last run (it succeeded)
    proc = cli("runs", "show", "latest", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert f"  run directory {out.resolve() / newest}\n" in proc.stdout

    proc, doc = cli.json("report", "latest", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert doc["file"] == str(out.resolve() / newest / "report.html")

    proc, doc = cli.json("recover", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert doc["journal_found"] is True and doc["abandoned"] == []

    # A deleted manifest.json comes back where the journal says the run lives.
    victim = out / runs[0] / "manifest.json"
    original = victim.read_bytes()
    victim.unlink()
    proc, doc = cli.json("projections", "rebuild", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    manifest = next(p for p in doc["projections"] if p["name"] == "manifest")
    assert manifest["written"] == 3 and manifest["skipped"] == 0
    assert victim.read_bytes() == original
    assert (out / ".runjournal" / "projections.json").is_file()  # beside the journal

    proc, doc = cli.json("gc", "--keep", "1", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert sorted(doc["removed"]) == sorted(str(out.resolve() / r) for r in runs if r != newest)
    assert sorted(p.name for p in out.iterdir() if p.name[:1].isdigit()) == [newest]
    assert _run_ids(cli, cwd) == runs  # the journal keeps every run

    # Nothing appeared in (or vanished from) the current directory, no ./runs anywhere.
    assert _tree(cwd, skip="out" if where == "." else None) == before
    assert not (cwd / "runs").exists() and not (project / "runs").exists()


def test_a_journal_named_elsewhere_is_followed_to_its_run_directories(
    cli, project, tmp_path: Path
) -> None:
    """The issue's case: `--journal out/journal.sqlite3` from another directory, without
    `--output-root`: the rebuild restores the manifest, gc removes the recorded run
    directories, the views stay beside the journal, the current directory stays empty."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    journal = ["--journal", str(project / "out" / "journal.sqlite3")]
    out = project / "out"
    runs = sorted(p.name for p in out.iterdir() if p.name[:1].isdigit())
    (out / runs[1] / "manifest.json").unlink()

    proc, doc = cli.json("projections", "rebuild", *journal, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    manifest = next(p for p in doc["projections"] if p["name"] == "manifest")
    assert (manifest["written"], manifest["skipped"]) == (3, 0)
    assert (out / runs[1] / "manifest.json").is_file()

    proc, doc = cli.json("journal", "audit", runs[1], *journal, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert doc["run_directory"]["status"] == "checked"

    proc, doc = cli.json("gc", "--keep", "1", *journal, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert len(doc["removed"]) == 2
    assert len([p for p in out.iterdir() if p.name[:1].isdigit()]) == 1
    assert list(elsewhere.iterdir()) == []


def test_the_journal_flag_and_the_environment_win(cli, project, tmp_path: Path) -> None:
    other = tmp_path / "other"
    proc = cli("run", "pipeline.toml", "-q", "--output-root", str(other), cwd=project)
    assert proc.returncode == 0, proc.stderr
    [other_run] = [p.name for p in other.iterdir() if p.name[:1].isdigit()]
    ours = _run_ids(cli, project)
    assert len(ours) == 3 and other_run not in ours
    other_journal = str(other / "journal.sqlite3")
    assert _run_ids(cli, project, "--journal", other_journal) == [other_run]
    assert _run_ids(cli, project, env={"RUNJOURNAL_JOURNAL": other_journal}) == [other_run]
    # The table sets output_root; a flag for it wins, and the journal follows it.
    assert _run_ids(cli, project / "docs", "--output-root", str(other)) == [other_run]
    assert _run_ids(cli, project, env={"RUNJOURNAL_OUTPUT_ROOT": str(other)}) == [other_run]


def test_pipelines_that_disagree_are_one_error_line(cli, project) -> None:
    (project / "second.toml").write_text(PIPELINE.replace('"out"', '"out2"'))
    proc = cli("runs", "list", cwd=project / "docs")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("runjournal: error: pipelines in ")
    assert "pipeline.toml (" in line and "second.toml (" in line and "--output-root" in line
    assert proc.stdout == ""
    # A flag settles it; pipelines that agree are one project.
    assert len(_run_ids(cli, project, "--output-root", "out")) == 3
    (project / "second.toml").write_text(PIPELINE.replace('"proj"', '"other"'))
    assert len(_run_ids(cli, project / "docs")) == 3


def test_a_nearer_pipeline_without_roots_ends_the_walk(cli, project) -> None:
    """Its runs used `run`'s current directory: the defaults apply there, not the parent's."""
    sub = project / "docs" / "deep"
    (sub / "local.toml").write_text(PIPELINE.replace('[runjournal]\noutput_root = "out"\n', ""))
    proc = cli("runs", "list", cwd=sub)
    assert proc.returncode == 2
    assert "no journal at " + str(sub.resolve() / "runs" / "journal.sqlite3") in proc.stderr
