"""What a no-op resume holds per lane and per output file until its end is small (issue 29:
peak RSS at most 300 MB at a million decisions).

At the end of a run every output file was held several times over: a `SpooledOutput`
with a hex digest and a bound reader, a dict of three keys in each of the run's three
folds (the manifest's, the report's and the manifest check's), the manifest check made
both manifests' views (a dict per output each), and `manifest.json`, `report.json` and
`run --json` were each encoded whole; a resume also held each lane of the run its reuse
summaries name as a key of two strings and a `SourceLane` with a hex digest. Now the
folds keep a tuple an output, the check compares the folds' rows, the documents are
written one output at a time, the spooled outputs keep their digest's 32 bytes and the
spool's handle and are let go once recorded, and the summaries' source lanes are two
small byte strings each (docs/performance.md "gc, audit and explain at scale", its
paragraph "Peak RSS per document: the run's end"). Documents of one short paragraph and
two steps, so a document is two lanes and two output files and its chunks add little:
the peak traced by `tracemalloc` of a no-op resume, at two corpus sizes in this process,
grew about 8.8 KB a document before, about 5.2 KB after; the test fails above 7 KB.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import runjournal
from support.traced import shrink_bounded_caches, traced_run_peak
from support.two_step_project import two_step_project

SMALL, LARGE = 100, 400  # documents
PER_DOCUMENT = 7_000  # bytes the no-op resume's peak may grow by per document


def _project(root: Path, docs: int) -> runjournal.Project:
    return two_step_project(
        root, docs, name="memory-lanes", text="document {} with one paragraph\n"
    )


def _resumed_peak(root: Path, docs: int) -> tuple[int, dict[str, str]]:
    project = _project(root, docs)
    _, first = traced_run_peak(project, resume=False)
    resumed, again = traced_run_peak(project, resume=True)
    assert set(again.decisions) == {"reused"}, again.decisions
    assert len(again.outputs) == 2 * docs
    # the resume's outputs are the cold run's, byte for byte
    digests = {name: o.sha256 for name, o in again.outputs.items()}
    assert digests == {name: o.sha256 for name, o in first.outputs.items()}
    return resumed, digests


def test_a_no_op_resume_holds_little_per_lane_and_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What is bounded, by a size a corpus this small does not reach, is made small so
    # both sizes are past it (as tests/integration/test_run_memory_per_chunk.py does).
    shrink_bounded_caches(monkeypatch)
    a, _ = _resumed_peak(tmp_path / "small", SMALL)
    b, _ = _resumed_peak(tmp_path / "large", LARGE)
    per_document = (b - a) / (LARGE - SMALL)
    assert per_document < PER_DOCUMENT, (
        f"a no-op resume's peak grew {per_document:.0f} B per document of two lanes and two "
        f"outputs ({a} B at {SMALL} documents, {b} B at {LARGE})"
    )
