"""A lane leases its stages as one lease of the lane (domain/leases.py `lane_lease`,
docs/operations.md "Concurrent runs").

A lane decides every extract before it executes one, so with a lease per stage it held a
lease per missing chunk at once, and the kernel walks a process's record locks on the
lease file on every lock: a 25 MB document (25,000 chunks) waited 39 s for its first
stage (issue 29); and each stage cost two `fcntl` calls on the scheduler's thread (issue
26). Here a lane of any size must hold one kernel lock while its stages run, and two runs
of the same lane must still never both execute a chunk.
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
from runjournal.domain.ports import CheckpointKey, StoreScope

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


def test_the_lease_is_the_lanes_whatever_the_stage() -> None:
    scope = StoreScope("sid", "d", "lid")
    lease = leases.lane_lease("s", "docs/a.md", scope)
    assert lease.chunk == leases.LANE_WIDE_CHUNK and lease.scope == scope
    assert lease.stage is leases.Stage.EXTRACT
    other = leases.lane_lease("s", "docs/b.md", scope)
    assert other != lease
    # the lease's place is no chunk's
    chunk = CheckpointKey("s", "docs/a.md", leases.Stage.EXTRACT, "ab" * 32, scope)
    assert lease.position != chunk.position


@pytest.mark.parametrize("chunks", [1, 4, 12])
def test_a_lane_holds_one_lock_whatever_its_size(tmp_path: Path, chunks: int) -> None:
    project = _project(tmp_path, {"doc.md": chunks})
    project.run(jobs=1)
    assert len(CALLS) == chunks
    # every extract of the lane ran under the one lane lock
    assert max(HELD) == 1


def test_two_lanes_hold_a_lock_each(tmp_path: Path) -> None:
    project = _project(tmp_path, {"a.md": 3, "b.md": 3})
    project.run(jobs=4)
    assert len(CALLS) == 6 and 1 <= max(HELD) <= 2
    assert _locks_held() == 0  # all released when the run ends


def test_a_second_run_of_a_lane_waits_and_reuses(tmp_path: Path) -> None:
    """Two runs of one lane at once in one process: each chunk executes once."""
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


def test_a_lane_takes_the_kernel_lock_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stages after the first share the lock it holds: a count, no `fcntl` (issue 26:
    two `fcntl` calls a stage on the scheduler's thread)."""
    taken: list[int] = []
    real = stage_leases._try_lock

    def counted(fd: int, offset: int) -> bool:
        taken.append(offset)
        return real(fd, offset)

    monkeypatch.setattr(stage_leases, "_try_lock", counted)
    project = _project(tmp_path, {"a.md": 4, "b.md": 3})
    project.run(jobs=1)
    assert len(CALLS) == 7
    assert len(taken) == len(set(taken)) == 2  # one lock a lane
