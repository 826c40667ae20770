"""Dask workers read and write checkpoints in the bucket themselves (issue 31:
"no coordinator round-trip for payloads; the coordinator journals"), against a real S3
server (SeaweedFS on loopback); docs/internals.md "Object-storage cache".

The coordinator runs in this process (CliRunner), so its `S3PackedStore.put` can be
counted; the Dask workers are other processes, each with its own local directory, and
write through their own store.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.console import CLI, isolated_env
from support.paths import EXAMPLE

pytest.importorskip("obstore")
pytest.importorskip("distributed")
pytest.importorskip("boto3")  # the fixture inspects the bucket through it


def _project(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / "projects" / name
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest / "pipeline.toml"


def _outputs(doc: dict[str, Any]) -> dict[str, str]:
    return {
        o["name"]: hashlib.sha256(Path(o["path"]).read_bytes()).hexdigest() for o in doc["outputs"]
    }


def _ckpt_entries(server: Any, bucket: str) -> dict[str, str]:
    """The bucket's checkpoints: name -> "ref" (a worker's write) or the pack holding it
    (the coordinator's, group-committed)."""
    return {n: at for n, at in server.entries(bucket, "team/").items() if n.endswith(".ckpt")}


def test_dask_workers_write_checkpoints_to_the_bucket_not_through_the_coordinator(
    tmp_path: Path, seaweedfs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runjournal.adapters.executors.offloading import OffloadingExecutor
    from runjournal.adapters.s3_store import S3PackedStore
    from runjournal.cli.main import cli

    local = CLI(tmp_path / "homes" / "local")
    base_pipeline = _project(tmp_path, "local")
    proc = local(
        "run",
        str(base_pipeline),
        "--output-root",
        str(base_pipeline.parent / "runs"),
        "--cache-root",
        str(tmp_path / "cache"),
        "--json",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    base = json.loads(proc.stdout)

    # What the coordinator process puts in the bucket, by name.
    puts: list[str] = []
    real_put = S3PackedStore.put

    def counting_put(self: S3PackedStore, name: str, data: bytes) -> None:
        puts.append(name)
        real_put(self, name, data)

    monkeypatch.setattr(S3PackedStore, "put", counting_put)
    executors: list[OffloadingExecutor] = []
    real_share = OffloadingExecutor.share_cache

    def share(self: OffloadingExecutor, store: Any, pipeline: str) -> None:
        executors.append(self)
        real_share(self, store, pipeline)

    monkeypatch.setattr(OffloadingExecutor, "share_cache", share)

    bucket = seaweedfs.bucket()
    pipeline = _project(tmp_path, "dask")
    out = pipeline.parent / "runs"
    env = {**isolated_env(tmp_path / "homes" / "dask"), **seaweedfs.env()}
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(pipeline),
            "--output-root",
            str(out),
            "--cache-root",
            f"s3://{bucket}/team",
            "--executor",
            "dask",
            "--jobs",
            "2",
            "--json",
        ],
        env=env,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert _outputs(doc) == _outputs(base)
    assert doc["decisions"] == base["decisions"]

    shown = local("journal", "show", doc["run_id"], "--output-root", str(out), "--json")
    events = json.loads(shown.stdout)["events"]
    written = Counter(
        (e["data"]["step"], e["data"]["lane"], e["data"]["stage"], e["data"].get("chunk"))
        for e in events
        if e["type"] == "CheckpointWritten"
    )
    assert written and set(written.values()) == {1}  # each checkpoint journaled once
    by_stage = Counter(stage for _step, _lane, stage, _chunk in written)
    assert by_stage["extract"] and by_stage["merge"]
    # Extract and merge payloads never pass through the coordinator: it put only the
    # normalize checkpoints (its validators and provenance are its own) ...
    coordinator = [name for name in puts if name.endswith(".ckpt")]
    assert len(coordinator) == by_stage["normalize"]
    assert all(name.endswith("/normalize.ckpt") for name in coordinator)
    # ... the workers wrote the rest themselves, each once, and the bucket holds them all.
    [executor] = executors
    assert executor.written_by_workers == by_stage["extract"] + by_stage["merge"]
    stored = _ckpt_entries(seaweedfs, bucket)
    assert len(stored) == len(written)
    # the workers' writes are refs (checked by the coordinator), its own are pack records
    assert {n for n, at in stored.items() if at != "ref"} == set(coordinator)

    # One document edited, resumed on the workers: a merge now takes extract results
    # the coordinator read (reused, shipped as bytes) and ones a worker left in the
    # bucket (read there); the same outputs as the local cache root after the same edit.
    edit = "\n\nA **Ledger** is a record. The **Ledger** is appended to, never rewritten.\n"
    for project in (base_pipeline.parent, pipeline.parent):
        doc_file = project / "docs" / "02-journal.md"
        doc_file.write_text(doc_file.read_text() + edit)
    proc = local(
        "run",
        str(base_pipeline),
        "--output-root",
        str(base_pipeline.parent / "runs"),
        "--cache-root",
        str(tmp_path / "cache"),
        "--resume",
        "--json",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    edited_base = json.loads(proc.stdout)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(pipeline),
            "--output-root",
            str(out),
            "--cache-root",
            f"s3://{bucket}/team",
            "--executor",
            "dask",
            "--jobs",
            "2",
            "--resume",
            "--json",
        ],
        env=env,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    edited = json.loads(result.stdout)
    assert _outputs(edited) == _outputs(edited_base)
    assert edited["decisions"] == edited_base["decisions"]
    assert edited["decisions"].get("reused") and len(edited["decisions"]) > 1

    # A second machine resumes from the bucket: every stage reused.
    again = CLI(tmp_path / "homes" / "other")(
        "run",
        str(pipeline),
        "--output-root",
        str(out),
        "--cache-root",
        f"s3://{bucket}/team",
        "--resume",
        "--json",
        env=seaweedfs.env(),
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    assert set(json.loads(again.stdout)["decisions"]) == {"reused"}
