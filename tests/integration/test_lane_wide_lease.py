"""A huge lane leases its extracts as one lease of the lane (domain/leases.py
`lease_key`, docs/operations.md "Concurrent runs").

A lane decides every extract before it executes one, so it held a lease per missing
chunk at once, and the kernel walks a process's record locks on the lease file on every
lock: a 25 MB document (25,000 chunks) waited 39 s for its first stage (issue 29). Here a
lane of more than `LANE_WIDE_CHUNKS` chunks must hold one kernel lock while its extracts
run, a smaller lane one per chunk, and two runs of the same huge lane must still never
both execute a chunk.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import runjournal
from runjournal.adapters import stage_leases
from runjournal.adapters.function_steps import chunk_step
from runjournal.domain import leases
from runjournal.domain.ports import CheckpointKey

HELD: list[int] = []  # kernel locks this process held, seen by each extract
CALLS: list[str] = []
SLOW: list[bool] = []
_calls_lock = threading.Lock()


def _locks_held() -> int:
    return sum(len(t.entries) for t in list(stage_leases._tables.values()))


@chunk_step
def seen(chunk: Any) -> dict[str, int]:
    with _calls_lock:
        HELD.append(_locks_held())
        CALLS.append(chunk.text)
    if SLOW:
        time.sleep(0.02)  # so that two runs of the lane overlap (no bound is asserted)
    return {"chars": len(chunk.text)}


def _pipeline(tmp_path: Path, paragraphs: dict[str, int]) -> runjournal.Pipeline:
    docs = tmp_path / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for name, n in paragraphs.items():
        text = "\n\n".join(f"Paragraph {i} of {name}, some words." for i in range(n))
        (docs / name).write_text(text + "\n")
    return runjournal.Pipeline(
        name="huge-lane",
        inputs=("docs/*.md",),
        steps=(runjournal.Step(id="seen", module=seen),),
        directory=str(tmp_path),
        chunking={"strategy": "paragraphs", "max_chars": 40},
    )


def _project(tmp_path: Path, paragraphs: dict[str, int], out: str = "out") -> runjournal.Project:
    return _open(_pipeline(tmp_path, paragraphs), tmp_path, out)


def _open(pipeline: runjournal.Pipeline, tmp_path: Path, out: str) -> runjournal.Project:
    return runjournal.Project.open(
        pipeline,
        output_root=str(tmp_path / out),
        cache_root=str(tmp_path / "cache"),
        progress=False,
    )


@pytest.fixture(autouse=True)
def _clear() -> None:
    HELD.clear()
    CALLS.clear()
    SLOW.clear()


def test_lease_key_is_the_lanes_above_the_threshold() -> None:
    chunk = "ab" * 32
    key = CheckpointKey("s", "docs/a.md", leases.Stage.EXTRACT, chunk)
    assert leases.lease_key(key, leases.LANE_WIDE_CHUNKS) == key
    wide = leases.lease_key(key, leases.LANE_WIDE_CHUNKS + 1)
    assert wide.chunk == leases.LANE_WIDE_CHUNK and wide.position != key.position
    merge = CheckpointKey("s", "docs/a.md", leases.Stage.MERGE)
    assert leases.lease_key(merge, 10**6) == merge  # merge and normalize: their own


def test_a_huge_lane_holds_one_lock_and_a_small_one_a_lock_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases, "LANE_WIDE_CHUNKS", 5)
    project = _project(tmp_path, {"big.md": 12})
    project.run(jobs=1)
    assert len(CALLS) == 12
    # every extract of the 12-chunk lane ran under the one lane-wide lock
    assert max(HELD) == 1
    HELD.clear()
    CALLS.clear()
    small = _project(tmp_path / "small", {"small.md": 4})
    small.run(jobs=1)
    assert len(CALLS) == 4 and max(HELD) == 4  # one per chunk, all decided first


def test_a_second_run_of_a_huge_lane_waits_and_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one huge lane at once in one process: each chunk executes once."""
    monkeypatch.setattr(leases, "LANE_WIDE_CHUNKS", 5)
    SLOW.append(True)
    pipeline = _pipeline(tmp_path, {"big.md": 12})
    project, second = _open(pipeline, tmp_path, "out"), _open(pipeline, tmp_path, "out2")
    errors: list[BaseException] = []

    def go(p: runjournal.Project) -> None:
        try:
            p.run(jobs=2)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(p,)) for p in (project, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(CALLS) == sorted(set(CALLS)) and len(CALLS) == 12
