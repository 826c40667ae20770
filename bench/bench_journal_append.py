"""Journal append cost: RunSession.decided of 10,000 StageDecided events in batches of 256.

Compares against raw sqlite3 inserts of the same encoded rows (same table shape, WAL,
one transaction per batch) measured in the same run, so the ratio is machine-neutral.

    .venv/bin/python bench/bench_journal_append.py [--events N] [--batch B]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runjournal.adapters.journal import RunSession, open_journal
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests, StageFacts
from runjournal.domain.identity import LaneComponents
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.run import Run

LANES = 8
COMPONENTS = LaneComponents(*(c * 64 for c in "cmvrops"))


def _decision(i: int) -> dict[str, Any]:
    """`RunSession.decided`'s arguments: a reused merge of one of LANES lanes."""
    current = StageDigests(COMPONENTS, f"{i:064x}", "d" * 64)
    facts = StageFacts(
        stage=Stage.MERGE,
        resumed=True,
        checkpoint=CheckpointState.PRESENT,
        current=current,
        recorded=current,
    )
    lane = f"lane-{i % LANES}"
    return {
        "step": "normalize",
        "lane": lane,
        "chunk": f"c{i:05d}",
        "facts": facts,
        "code": ReasonCode.REUSED,
    }


def _resolve_lanes(session: RunSession) -> None:
    """Each lane's LaneResolved, which the aggregate wants before its decisions."""
    for n in range(LANES):
        session.lane_resolved(
            step="normalize",
            lane=f"lane-{n}",
            components=COMPONENTS,
            lane_identity="l" * 64,
            dependencies=[],
            chunks=1,
            forced=False,
            reads={},
        )


def _allocation(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "pipeline": "bench",
        "pipeline_file": "/bench/pipeline.toml",
        "argv": ["run", "pipeline.toml", "--resume"],
        "tool_version": "0.1.0",
        "run_dir": f"/out/runs/{run_id}",
        "output_root": "/out",
        "cache_root": "/cache",
        "workspace": None,
        "debug_bundle": None,
        "host": "bench",
        "pid": 1,
        "process_start": 0.0,
    }


def bench_library(directory: Path, n: int, batch: int) -> tuple[float, float, list[Any]]:
    """Returns (total seconds, seconds spent recording without commits, stored rows)."""
    store = open_journal(str(directory / "journal.sqlite3"))
    try:
        fields = [_decision(i) for i in range(n)]
        run = Run.allocate(lambda: datetime.now(UTC), **_allocation("bench-run"))
        session = store.session(run, batch_size=batch)
        _resolve_lanes(session)
        session.flush()
        started = time.perf_counter()
        for f in fields:
            session.decided(**f)
        session.flush()
        total = time.perf_counter() - started

        # The same decisions with commits deferred: what recording itself costs.
        run2 = Run.allocate(lambda: datetime.now(UTC), **_allocation("bench-run-2"))
        session2 = store.session(run2, batch_size=n + LANES + 1)
        _resolve_lanes(session2)
        started = time.perf_counter()
        for f in fields:
            session2.decided(**f)
        emit_only = time.perf_counter() - started
        session2.flush()

        mapper = store._app.mapper
        stored = [mapper.to_stored_event(e) for e in list(store.events("bench-run"))[1 + LANES :]]
        return total, emit_only, stored
    finally:
        store.close()


def bench_raw(directory: Path, stored: list[Any], batch: int) -> float:
    db = sqlite3.connect(directory / "raw.sqlite3", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
            "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
        )
        rows = [(s.originator_id.hex, s.originator_version, s.topic, s.state) for s in stored]
        started = time.perf_counter()
        for i in range(0, len(rows), batch):
            db.execute("BEGIN")
            db.executemany("INSERT INTO stored_events VALUES (?,?,?,?)", rows[i : i + batch])
            db.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rj-bench-") as tmp:
        total, emit_only, stored = bench_library(Path(tmp), args.events, args.batch)
        raw = bench_raw(Path(tmp), stored, args.batch)
    n = args.events
    state_bytes = sum(len(s.state) for s in stored) / len(stored)
    print(f"events: {n}, batch: {args.batch}, mean state: {state_bytes:.0f} bytes")
    print(f"journal (emit + save): {n / total:,.0f} events/s, {total / n * 1e6:.1f} us/event")
    print(f"  emit alone (no commit): {emit_only / n * 1e6:.1f} us/event")
    print(f"raw sqlite3 inserts:   {n / raw:,.0f} events/s, {raw / n * 1e6:.1f} us/event")
    print(f"ratio journal/raw throughput: {raw / total:.2f}x")


if __name__ == "__main__":
    main()
