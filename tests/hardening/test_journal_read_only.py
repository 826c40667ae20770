"""A journal on a read-only file system can be read by every read-only command.

The output root (journal and run directory) is bind-mounted read-only in a private mount
namespace (`unshare -rm`, no privileges needed where user namespaces are allowed); the
test is skipped where that is not possible.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from support.console import console_script as _console

READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'


def _read_only(
    directory: Path, *command: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", READ_ONLY_MOUNT, str(directory), *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def read_only_root(tmp_path: Path) -> Path:
    probe = tmp_path / "probe"
    probe.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a read-only file system")
    proc = _read_only(probe, "sh", "-c", "! touch probe/x", env={}, cwd=tmp_path)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount read-only here: {proc.stderr.strip()[:200]}")
    return tmp_path


def test_read_only_commands_read_a_journal_on_a_read_only_file_system(
    cli, example: Path, read_only_root: Path
) -> None:
    out = read_only_root / "out"
    where = ["--output-root", str(out)]
    proc, doc = cli.json("run", str(example), *where)
    assert proc.returncode == 0, proc.stderr
    run_id = doc["run_id"]
    journal = out / "journal.sqlite3"
    with sqlite3.connect(journal) as db:  # nothing left in a -wal (a clean state)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert (
        not (out / "journal.sqlite3-wal").exists()
        or not (out / "journal.sqlite3-wal").stat().st_size
    )
    expected = {
        ("runs", "list", "--json"): None,
        ("runs", "show", run_id, "--json"): None,
        ("journal", "show", run_id, "--json"): None,
        ("explain", run_id, "--json"): None,
    }
    for args in expected:
        expected[args] = cli(*args, *where).stdout
    for f in ("journal.sqlite3-wal", "journal.sqlite3-shm"):
        (out / f).unlink(missing_ok=True)
    before = sorted(p.name for p in out.iterdir())

    def read(*args: str) -> subprocess.CompletedProcess[str]:
        return _read_only(out, *_console(), *args, *where, env=cli.env, cwd=cli.cwd)

    assert read("runs", "list").returncode == 0, "sanity"
    for args, text in expected.items():
        proc = read(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert proc.stdout == text, args
    proc = read("journal", "audit", run_id)
    assert proc.returncode == 0, proc.stderr
    assert "hash chain verified" in proc.stdout and "run directory checked" in proc.stdout
    export = read_only_root / "run.rjx"  # written outside the read-only mount
    proc = read("journal", "export", run_id, "-o", str(export))
    assert proc.returncode == 0, proc.stderr
    assert export.read_bytes()[:8] == b"RJEXPORT"
    page = read_only_root / "report.html"
    proc = read("report", run_id, "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    assert page.read_bytes().startswith(b"<!DOCTYPE html>") or page.stat().st_size > 0
    proc = read("projections", "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["projections"]
    # A write still fails cleanly: the file system really is read-only.
    proc = read("recover")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == before
