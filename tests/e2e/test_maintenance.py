"""`recover`, `gc` and `init` end to end."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from support.slow_plugin import slow_plugin

SLOW = slow_plugin(60)


def _slow_pipeline(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("hello\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow.py").write_text(SLOW)
    path = tmp_path / "pipeline.toml"
    path.write_text(
        'name = "slow"\ninputs = ["docs/*.md"]\n'
        '[[steps]]\nid = "s"\nmodule = "plugins/slow.py:Slow"\n'
    )
    return path


def test_recover_abandons_a_killed_run_and_sweeps_temp_files(cli, tmp_path):
    pipeline = _slow_pipeline(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "runjournal"),
            "run",
            str(pipeline),
            "--output-root",
            str(out),
            "--cache-root",
            str(cache),
        ],
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed, doc = cli.json("runs", "list", "--output-root", str(out))
            if listed.returncode == 0 and doc.get("runs"):
                break
            time.sleep(0.2)
        assert doc["runs"][0]["status"] == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (cache / ".rj-tmp-leftover").write_bytes(b"partial")
    dry = cli("recover", "--dry-run", "--output-root", str(out), "--cache-root", str(cache))
    assert dry.returncode == 0 and "would abandon" in dry.stdout
    assert (cache / ".rj-tmp-leftover").exists()
    proc2, doc = cli.json("recover", "--output-root", str(out), "--cache-root", str(cache))
    assert proc2.returncode == 0, proc2.stderr
    assert len(doc["abandoned"]) == 1
    assert doc["temp_files"]["cache"] == [".rj-tmp-leftover"]
    assert not (cache / ".rj-tmp-leftover").exists()
    _shown, view = cli.json("runs", "show", "latest", "--output-root", str(out))
    assert view["status"] == "abandoned" and view["phase"] == "recovery"
    _again, doc = cli.json("recover", "--output-root", str(out), "--cache-root", str(cache))
    assert doc["abandoned"] == []
    assert not [p for p in out.iterdir() if p.is_dir()], "a killed run has no run directory"


def test_recover_leaves_a_live_run_alone(cli, tmp_path):
    pipeline = _slow_pipeline(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "runjournal"),
            "run",
            str(pipeline),
            "--output-root",
            str(out),
            "--cache-root",
            str(tmp_path / "c"),
        ],
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        doc = {}
        while time.monotonic() < deadline:
            _listed, doc = cli.json("runs", "list", "--output-root", str(out))
            if doc.get("runs"):
                break
            time.sleep(0.2)
        inflight = tmp_path / "c" / ".rj-tmp-inflight"
        inflight.parent.mkdir(exist_ok=True)
        inflight.write_bytes(b"a live writer's temp file")
        rec, result = cli.json(
            "recover", "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert rec.returncode == 0
        assert result["abandoned"] == [] and result["skipped"][0]["why"] == "still running"
        assert result["temp_files"] == {} and inflight.exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 130
    _listed, doc = cli.json("runs", "list", "--output-root", str(out))
    assert doc["runs"][0]["status"] == "interrupted"


def test_gc_keeps_the_newest_and_removes_only_recorded_run_dirs(cli, example, tmp_path):
    out = tmp_path / "out"
    run_dirs = []
    for _ in range(3):
        proc, doc = cli.json(
            "run", str(example), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 0, proc.stderr
        run_dirs.append(Path(doc["run_dir"]))
    stranger = out / "not-a-run"
    stranger.mkdir()
    dry, doc = cli.json("gc", "--keep", "1", "--dry-run", "--output-root", str(out))
    assert dry.returncode == 0 and len(doc["removed"]) == 2
    assert all(p.exists() for p in run_dirs)
    proc, doc = cli.json("gc", "--keep", "1", "--output-root", str(out))
    assert proc.returncode == 0, proc.stderr
    assert [p.exists() for p in run_dirs] == [False, False, True]
    assert stranger.exists() and (out / "journal.sqlite3").exists()
    none, doc = cli.json("gc", "--older-than", "30d", "--output-root", str(out))
    assert none.returncode == 0 and doc["removed"] == []
    bad = cli("gc", "--older-than", "soon", "--output-root", str(out))
    assert bad.returncode == 2 and "older-than" in bad.stderr


def test_init_writes_a_runnable_pipeline_and_never_overwrites(cli, tmp_path):
    target = tmp_path / "starter"
    proc = cli("init", str(target))
    assert proc.returncode == 0, proc.stderr
    run, doc = cli.json(
        "run",
        str(target / "pipeline.toml"),
        "--output-root",
        str(tmp_path / "o"),
        "--cache-root",
        str(tmp_path / "c"),
    )
    assert run.returncode == 0, run.stderr
    assert any(o["name"] == "glossary.md" for o in doc["outputs"])
    again = cli("init", str(target))
    assert again.returncode == 2 and "already exists" in again.stderr
