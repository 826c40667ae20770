"""`gc` racing itself or killed mid-way, and `recover` without a journal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.console import console_script as _console


def _runs(cli, example: Path, out: Path, count: int) -> list[Path]:
    dirs = []
    for _ in range(count):
        proc, doc = cli.json("run", str(example), "--output-root", str(out))
        assert proc.returncode == 0, proc.stderr
        dirs.append(Path(doc["run_dir"]))
    return dirs


def _fill(run_dir: Path, files: int) -> None:
    """Make a run directory slow to delete (many files in nested directories)."""
    for i in range(files):
        sub = run_dir / "artifacts" / f"bulk{i // 1000:03d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{i:06d}.json").write_bytes(b"{}")


def _count(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def test_two_concurrent_gc_keep_0_both_succeed(cli, example: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    dirs = _runs(cli, example, out, 3)
    for run_dir in dirs:
        _fill(run_dir, 4000)
    command = [*_console(), "gc", "--keep", "0", "--json", "--output-root", str(out)]
    procs = [
        subprocess.Popen(
            command,
            env=cli.env,
            cwd=cli.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (_stdout, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr
        assert "not found" not in stderr and "Traceback" not in stderr
    removed = set().union(*(json.loads(stdout)["removed"] for stdout, _ in results))
    assert removed == {str(d) for d in dirs}
    assert not any(d.exists() for d in dirs)
    assert [p.name for p in out.iterdir() if p.name.startswith(".rj-gc-")] == []


def test_a_gc_killed_mid_way_leaves_a_state_the_next_gc_finishes(
    cli, example: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (run_dir,) = _runs(cli, example, out, 1)
    run_id = run_dir.name
    _fill(run_dir, 60000)
    total = _count(run_dir)
    proc = subprocess.Popen(
        [*_console(), "gc", "--keep", "0", "--output-root", str(out)],
        env=cli.env,
        cwd=cli.cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    try:
        below = 0  # readings in a row with files gone (one can miss a dir being renamed)
        while time.monotonic() < deadline and proc.poll() is None:
            below = below + 1 if sum(_count(p) for p in out.iterdir() if p.is_dir()) < total else 0
            if below == 2:
                break  # the gc is deleting files
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    left = sum(_count(p) for p in out.iterdir() if p.is_dir())
    if not 0 < left < total:
        pytest.fail(f"could not kill gc mid-way ({left} of {total} files left); make it slower")
    # The run directory is whole or gone, never half deleted with its manifest missing.
    if run_dir.exists():
        assert (run_dir / "manifest.json").exists() and _count(run_dir) == total
    shown, view = cli.json("runs", "show", run_id, "--output-root", str(out))
    assert shown.returncode == 0 and view["status"] == "succeeded"
    again, doc = cli.json("gc", "--keep", "0", "--output-root", str(out))
    assert again.returncode == 0, again.stderr
    assert doc["removed"] == [str(run_dir)]
    assert not run_dir.exists()
    kept = {"debug", ".runjournal"}  # the output objects' directory (emptied by gc)
    assert [p.name for p in out.iterdir() if p.is_dir() and p.name not in kept] == []
    assert [p for p in (out / ".runjournal" / "objects").rglob("*") if p.is_file()] == []
    assert cli.json("gc", "--keep", "0", "--output-root", str(out))[1]["removed"] == []


def test_recover_without_a_journal_still_sweeps_temp_files(cli, tmp_path: Path) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    (cache / "chunkplans" / "ab").mkdir(parents=True)
    leftover = cache / "chunkplans" / "ab" / ".rj-tmp-0123456789abcdef"
    leftover.write_bytes(b"half a plan")
    where = ["--output-root", str(out), "--cache-root", str(cache)]
    proc = cli("recover", "--dry-run", *where)
    assert proc.returncode == 0, proc.stderr
    assert "no journal at" in proc.stdout and leftover.exists()
    proc, doc = cli.json("recover", *where)
    assert proc.returncode == 0, proc.stderr
    assert doc["journal_found"] is False and doc["abandoned"] == []
    assert doc["temp_files"]["cache"] == ["chunkplans/ab/.rj-tmp-0123456789abcdef"]
    assert not leftover.exists()
    assert not out.exists(), "recover creates no journal"
