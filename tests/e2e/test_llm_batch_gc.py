"""`gc --cache` collects the records of collected provider batches no kept run references
(issue 30; docs/operations.md "Cache retention", "Batch runs"): a record still in flight
is kept whatever the runs, one a kept run submitted or followed is kept, and the rest go."""

from __future__ import annotations

from pathlib import Path

from support.console import CLI
from support.llm_batch import BatchProject, batches
from support.llm_servers import start_fake_batch


def test_gc_cache_removes_collected_batch_records_no_kept_run_references(
    cli: CLI, tmp_path: Path
) -> None:
    project = BatchProject(cli, tmp_path, docs=2, chunks=2)
    records = tmp_path / "b" / "cache" / "llm" / "batches"

    def gc(keep: int) -> dict:
        proc, doc = cli.json(
            "gc", "--cache", "--keep", str(keep),
            "--output-root", str(tmp_path / "b" / "out"),
            "--cache-root", str(tmp_path / "b" / "cache"),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return doc["cache"]["batches"]

    with start_fake_batch() as fake:
        proc, _ = project.run("b", fake.url, "--llm-mode", "batch", "--no-wait")
        assert proc.returncode == 130, proc.stderr
        [record] = [p.stem for p in records.glob("*.json")]
        # in flight: kept even when no run is kept (a --resume polls it)
        assert gc(0) == {"removed": [], "kept": 1}
        proc, _ = project.run("b", fake.url, "--llm-mode", "batch", "--resume")
        assert proc.returncode == 0, proc.stderr
        assert len(batches(fake)) == 1
    # collected, and the kept (newest) run followed it
    assert gc(1) == {"removed": [], "kept": 1}
    # collected, and no run is kept: it goes
    assert gc(0) == {"removed": [record], "kept": 0}
    assert list(records.glob("*.json")) == []
