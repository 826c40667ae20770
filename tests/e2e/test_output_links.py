"""Run outputs as read-only links to content-addressed objects (docs/internals.md "Run
outputs as links"): a no-op resume creates O(1) new files whatever the number of outputs,
run directories stay complete and independent, `journal audit` and `gc` still work, and a
file system that cannot link gets copies."""

from __future__ import annotations

import errno
import json
import os
import random
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from runjournal.adapters.fsroot import FsRoot, classify_os_error
from runjournal.cli.compose import Factories
from runjournal.cli.main import cli as cli_group

PIPELINE = """name = "links"
inputs = ["docs/*.md"]
[[steps]]
id = "terms"
module = "builtin.terms"
"""
WORDS = ["alpha", "beta", "gamma", "journal", "checkpoint", "lane"]
JOURNAL_FILES = ("journal.sqlite3", "journal.sqlite3-wal", "journal.sqlite3-shm")
OWN_FILES = {"manifest.json", "report.json"}


def make_project(root: Path, docs: int) -> Path:
    rng = random.Random(docs)
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        words = " ".join(rng.choice(WORDS) for _ in range(8))
        (root / "docs" / f"d{d:03}.md").write_text(f"# Doc {d}\n\n{words}.\n")
    (root / "pipeline.toml").write_text(PIPELINE)
    return root / "pipeline.toml"


def run(cli, pipeline: Path, out: Path, cache: Path, *extra: str) -> dict[str, Any]:
    proc = cli(
        "run",
        str(pipeline),
        "--output-root",
        str(out),
        "--cache-root",
        str(cache),
        "--json",
        "-q",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def inodes(root: Path) -> dict[int, tuple[str, int]]:
    """Every regular file's inode under `root` (the journal's own files aside)."""
    found = {}
    for path in root.rglob("*"):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and path.name not in JOURNAL_FILES:
            found[info.st_ino] = (str(path.relative_to(root)), info.st_size)
    return found


def new_files_of_a_no_op_resume(cli, tmp_path: Path, docs: int) -> tuple[list[str], int, int]:
    pipeline = make_project(tmp_path / f"p{docs}", docs)
    out, cache = tmp_path / f"out{docs}", tmp_path / f"cache{docs}"
    run(cli, pipeline, out, cache)
    before, cache_before = inodes(out), inodes(cache)
    doc = run(cli, pipeline, out, cache, "--resume")
    assert set(doc["decisions"]) == {"reused"}, doc["decisions"]
    assert inodes(cache) == cache_before  # no checkpoint or plan rewritten
    created = {ino: entry for ino, entry in inodes(out).items() if ino not in before}
    names = sorted(Path(name).name for name, _ in created.values())
    run_dir = Path(doc["run_dir"])
    for output in doc["outputs"]:
        info = (run_dir / output["name"]).stat()
        assert info.st_nlink >= 2 and stat.S_IMODE(info.st_mode) == 0o400, output["name"]
    return names, sum(size for _, size in created.values()), len(doc["outputs"])


def test_a_no_op_resume_creates_the_same_few_files_for_10_and_100_documents(cli, tmp_path):
    small, small_bytes, small_outputs = new_files_of_a_no_op_resume(cli, tmp_path, 10)
    large, large_bytes, large_outputs = new_files_of_a_no_op_resume(cli, tmp_path, 100)
    assert large_outputs >= 10 * small_outputs - 10  # ten times the outputs...
    assert small == large == sorted(OWN_FILES)  # ...and the same two new files
    # The only new bytes are the run's two projection documents (they list the outputs).
    print(f"new files 10 docs: {small} {small_bytes} B; 100 docs: {large} {large_bytes} B")


def shared(a: Path, b: Path) -> bool:
    return a.stat().st_ino == b.stat().st_ino


def test_runs_share_outputs_yet_audit_edit_and_gc_keep_them_independent(cli, tmp_path):
    pipeline = make_project(tmp_path / "p", 4)
    out, cache = tmp_path / "out", tmp_path / "cache"
    first = run(cli, pipeline, out, cache)
    second = run(cli, pipeline, out, cache, "--resume")
    a, b = Path(first["run_dir"]), Path(second["run_dir"])
    names = [o["name"] for o in first["outputs"]]
    assert names == [o["name"] for o in second["outputs"]]
    assert all(shared(a / n, b / n) for n in names)
    for run_id in (first["run_id"], second["run_id"]):
        audit = cli("journal", "audit", run_id, "--output-root", str(out))
        assert audit.returncode == 0, audit.stdout + audit.stderr

    # An editor that writes a new file and renames it breaks the link: b is unchanged.
    target = names[0]
    original = (b / target).read_bytes()
    scratch = a / (target + ".swp")
    scratch.write_bytes(b"edited by an editor\n")
    os.replace(scratch, a / target)
    assert (b / target).read_bytes() == original

    # An in-place edit (root ignores the 0400 mode) reaches b too: not silently, the
    # audit of b reports it, and the next run's placement writes a fresh object.
    other = names[1]
    with open(b / other, "r+b") as handle:
        handle.write(b"X")
    audit = cli("journal", "audit", second["run_id"], "--output-root", str(out))
    assert audit.returncode == 1 and other in audit.stdout + audit.stderr
    third = run(cli, pipeline, out, cache, "--resume")
    c = Path(third["run_dir"])
    assert (c / other).read_bytes() != (b / other).read_bytes()
    assert not shared(b / other, c / other)
    audit = cli("journal", "audit", third["run_id"], "--output-root", str(out))
    assert audit.returncode == 0, audit.stdout + audit.stderr

    # gc removes run directories and then the objects nothing links any more.
    objects = out / ".runjournal" / "objects"
    proc = cli("gc", "--keep", "1", "--output-root", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert not a.exists() and not b.exists() and c.is_dir()
    audit = cli("journal", "audit", third["run_id"], "--output-root", str(out))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    links = {p.name[:8]: p.stat().st_nlink for p in objects.rglob("*") if p.is_file()}
    assert min(links.values()) >= 2, links  # every object is still linked by the kept run
    proc = cli("gc", "--keep", "0", "--output-root", str(out), "--json")
    assert json.loads(proc.stdout)["objects_removed"] == len(links)
    assert [p for p in objects.rglob("*") if p.is_file()] == []


class _NoLinks(FsRoot):
    """A file system that cannot make hard links (as across mounts)."""

    def link(self, name: str, *args: Any, **kw: Any) -> None:
        raise classify_os_error(OSError(errno.EXDEV, "Invalid cross-device link"), name)


@pytest.mark.parametrize("how", ["cold", "resume"])
def test_a_failed_link_falls_back_to_a_copy(tmp_path, how):
    pipeline = make_project(tmp_path / "p", 3)
    args = [
        "run",
        str(pipeline),
        "--output-root",
        str(tmp_path / "out"),
        "--cache-root",
        str(tmp_path / "cache"),
        "--json",
        "-q",
    ]
    runner = CliRunner()
    if how == "resume":  # objects exist already, from a run that could link
        assert runner.invoke(cli_group, args, catch_exceptions=False).exit_code == 0
        args.append("--resume")
    result = runner.invoke(
        cli_group, args, obj=Factories(open_root=_NoLinks.open), catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    run_dir = Path(doc["run_dir"])
    for output in doc["outputs"]:
        info = (run_dir / output["name"]).stat()
        assert info.st_nlink == 1 and stat.S_IMODE(info.st_mode) == 0o400
    audit = runner.invoke(
        cli_group,
        ["journal", "audit", doc["run_id"], "--output-root", str(tmp_path / "out")],
        catch_exceptions=False,
    )
    assert audit.exit_code == 0, audit.output
