"""A run holds the lane jobs of the lanes in its window, not one per lane of the corpus
(issue 29: peak RSS at most 300 MB at a million decisions).

The runner made every lane's job (its closure over the step, lane, chunks, identity and
the producer lanes it needs, about 1 KB a lane with its identity string and needs list)
before the first lane started, and the scheduler held them all until the run's end. Now
the runner makes each job as the scheduler draws it, in plan order, when a pass of the
ready lanes reaches it, and the scheduler lets it go once it is journaled
(docs/internals.md "The scheduler (`scheduler.py`)"). Counted here: the most lane jobs
alive at once, at two corpus sizes, for a cold run, a no-op resume and a run with
`--jobs 4`; before, it was every lane of the run (two a document).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import runjournal
from runjournal.cli import parallel
from runjournal.domain.runner import pipeline_runner
from runjournal.domain.runner.scheduler import LaneJob
from support.two_step_project import two_step_project

# Lane jobs alive at once, whatever the corpus's size: the scheduler's window, plus the
# finished lanes whose checkpoint writes wait in the write pool's window (at most a batch
# queued and a batch being written; docs/performance.md "Checkpoint writes in windows").
MOST_ALIVE = 24 + 2 * parallel._WRITE_BATCH


def _project(root: Path, docs: int) -> runjournal.Project:
    return two_step_project(
        root, docs, name="lane-window", text="document {}\n\nits second paragraph\n"
    )


def _most_alive(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[alive, most alive] lane jobs of the runner, counted as they are made and freed."""
    count = [0, 0]

    class Counted(LaneJob):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            count[0] += 1
            count[1] = max(count[1], count[0])

        def __del__(self) -> None:
            count[0] -= 1

    monkeypatch.setattr(pipeline_runner, "LaneJob", Counted)
    return count


@pytest.mark.parametrize("jobs", [1, 4])
def test_a_run_holds_a_window_of_lane_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    count = _most_alive(monkeypatch)
    for docs in (30, 150):
        project = _project(tmp_path / str(docs), docs)
        outputs: dict[str, str] = {}
        for resume in (False, True):
            count[:] = [0, 0]
            result = project.run(resume=resume, jobs=jobs)
            assert result.succeeded, result.document
            assert len(result.outputs) == 2 * docs
            digests = {name: o.sha256 for name, o in result.outputs.items()}
            assert outputs in ({}, digests)  # the resume's outputs are the cold run's
            outputs = digests
            assert count[1] <= MOST_ALIVE, (
                f"{count[1]} lane jobs alive at once in a run of {2 * docs} lanes "
                f"({'resume' if resume else 'cold'}, --jobs {jobs})"
            )
