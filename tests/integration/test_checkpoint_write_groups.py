"""A `--jobs N` run's checkpoint writes to a local cache root are written in windows, not
one transaction per reply (docs/internals.md "The scheduler (`scheduler.py`)",
docs/performance.md "Checkpoint writes in windows").

Replies that arrive one by one used to cost an index transaction each: the write pool's
threads wrote what was queued as soon as a write came, and the scheduler waited for a
lane's writes when it journaled it. Counted here, with the window stretched so that only
a full batch (64 writes), a waiter (the run's end) or `close` writes: a bound of one
transaction per lane plus one holds whatever the timing. No wall-clock bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from runjournal.adapters.checkpoints import CheckpointRecorder
from runjournal.cli import parallel
from support.inprocess import InProcess
from support.llm_servers import fake_key_env, start_fake, write_chunked_project

DOCS, CHUNKS, JOBS = 12, 4, 8
LATENCY = 0.05  # replies spread out, as against a real endpoint


def test_checkpoint_writes_cost_a_transaction_per_lane_not_per_reply(
    invoke: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the window only bounds how late a write may be: stretched, it never writes here
    monkeypatch.setattr(parallel, "LOCAL_WRITE_WINDOW", 3600.0, raising=False)
    for name, value in fake_key_env().items():
        monkeypatch.setenv(name, value)
    batches: list[int] = []
    write_many = CheckpointRecorder.write_many

    def counted(self: CheckpointRecorder, items: list[Any]) -> Any:
        batches.append(len(items))
        return write_many(self, items)

    monkeypatch.setattr(CheckpointRecorder, "write_many", counted)
    with start_fake(latency=LATENCY) as fake:
        args = write_chunked_project(tmp_path / "project", fake.url, docs=DOCS, chunks=CHUNKS)
        args += ["--output-root", str(tmp_path / "out"), "--cache-root", str(tmp_path / "cache")]
        result = invoke(*args, "--jobs", str(JOBS), "--no-progress", "--json")
    assert result.exit_code == 0, result.output[-2000:]
    doc = json.loads(result.stdout)
    assert doc["llm"]["spent"]["calls"] == DOCS * CHUNKS
    assert not doc["persistence_errors"]
    # every stage of every lane written: its extracts, the merge and the normalize
    assert sum(batches) == DOCS * (CHUNKS + 2)
    # not one per reply (main: 40 to 43 transactions for these 72 writes; now 2, a full
    # batch and the rest at the end): one per lane and one more at most, whatever the timing
    assert len(batches) <= DOCS + 1, f"{len(batches)} transactions: {batches}"
