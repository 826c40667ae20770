"""`input_check` and `run --verify` end to end (docs/configuration.md `input_check`)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

PIPELINE = """name = "stats"
inputs = ["docs/*.md"]
[[steps]]
id = "terms"
module = "builtin.terms"
"""


def project(root: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    for i in range(3):
        (root / "docs" / f"d{i}.md").write_text(
            f"# Doc {i}\n\nThe **write-ahead log** keeps the journal. Doc {i} alpha beta.\n"
        )
    (root / "pipeline.toml").write_text(PIPELINE)
    return root / "pipeline.toml"


def run(cli, pipeline: Path, tmp: Path, *extra: str) -> dict:
    proc, doc = cli.json(
        "run",
        str(pipeline),
        "--output-root",
        str(tmp / "out"),
        "--cache-root",
        str(tmp / "cache"),
        "--no-progress",
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    return doc


def fingerprints(cli, tmp: Path, doc: dict) -> dict[str, str]:
    """The input digests the run journaled (`InputsFingerprinted`)."""
    proc, shown = cli.json("journal", "show", doc["run_id"], "--output-root", str(tmp / "out"))
    assert proc.returncode == 0, proc.stderr
    [event] = [e for e in shown["events"] if e["type"] == "InputsFingerprinted"]
    return {f["name"]: f["sha256"] for f in event["data"]["sources"]}


def not_reused(doc: dict) -> int:
    return sum(n for code, n in doc["decisions"].items() if code != "reused")


def test_the_default_keeps_no_stat_cache(cli, tmp_path: Path) -> None:
    pipeline = project(tmp_path / "p")
    run(cli, pipeline, tmp_path)
    run(cli, pipeline, tmp_path, "--resume")
    assert not (tmp_path / "cache" / "inputs.sqlite").exists()


def test_stat_mode_reuses_catches_an_edit_and_verify_reads_everything(cli, tmp_path: Path) -> None:
    pipeline = project(tmp_path / "p")
    cold = run(cli, pipeline, tmp_path, "--input-check", "stat")
    stats = tmp_path / "cache" / "inputs.sqlite"
    with sqlite3.connect(stats) as db:
        assert db.execute("SELECT COUNT(*) FROM inputs").fetchone()[0] == 3
        # as if recorded long after the files' last change (not racy): trusted from now on
        db.execute("UPDATE inputs SET recorded_ns = ?", (time.time_ns() + 10**11,))
    assert not_reused(run(cli, pipeline, tmp_path, "--resume", "--input-check", "stat")) == 0

    # an edit of the same size with its mtime restored: the ctime shows it
    path = tmp_path / "p" / "docs" / "d1.md"
    before = path.stat()
    path.write_text(path.read_text().replace("alpha", "ALPHA"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    edited = run(cli, pipeline, tmp_path, "--resume", "--input-check", "stat")
    assert 0 < not_reused(edited) < sum(cold["decisions"].values())

    # a stale digest whose stat facts all match is trusted by the fast path...
    with sqlite3.connect(stats) as db:
        db.execute(
            "UPDATE inputs SET sha256 = ?, recorded_ns = ? WHERE path LIKE '%d2.md'",
            ("0" * 64, time.time_ns() + 10**11),
        )
    stale = run(cli, pipeline, tmp_path, "--resume", "--input-check", "stat")
    assert fingerprints(cli, tmp_path, stale)["docs/d2.md"] == "0" * 64
    # ...and `--verify` reads every input: the true digest, every stage reused
    verified = run(cli, pipeline, tmp_path, "--resume", "--input-check", "stat", "--verify")
    true = hashlib.sha256((tmp_path / "p" / "docs" / "d2.md").read_bytes()).hexdigest()
    assert fingerprints(cli, tmp_path, verified)["docs/d2.md"] == true
    assert not_reused(verified) == 0
    with sqlite3.connect(stats) as db:
        assert "0" * 64 not in {r[0] for r in db.execute("SELECT sha256 FROM inputs")}


def test_the_setting_from_the_environment_and_config_show(cli, tmp_path: Path) -> None:
    pipeline = project(tmp_path / "p")
    proc, doc = cli.json("config", "show", str(pipeline), env={"RUNJOURNAL_INPUT_CHECK": "stat"})
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in doc["settings"]}
    assert rows["input_check"]["value"] == "stat" and rows["input_check"]["origin"] == "env"
    proc = cli("run", str(pipeline), "--input-check", "sometimes")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "input_check" in proc.stderr
