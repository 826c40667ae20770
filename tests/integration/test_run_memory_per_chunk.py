"""What a run holds per chunk and per decision until its end is small (issue 29: peak RSS
at most 300 MB at a million decisions).

A run held, for its whole length, every chunk of every input as an object with hex ids
(about 350 bytes a chunk), the last decision of every stage scope in the `Run`
aggregate's ordering state (about 120 bytes a decision), each lane job's `__dict__` and
the closure that starts it, and a chunk map entry per chunk built at its end whether or
not it is written. Now the chunks wait packed (80 bytes a chunk) until their lane starts,
a lane's decisions are let go with its artifact, and the chunk map is made only when it
is written (docs/performance.md "A corpus at scale:", its paragraph "Peak RSS per
document: the run's own bookkeeping"). The peak traced by `tracemalloc`, at two corpus
sizes in this process, must grow by less than 300 bytes a chunk (one decision each, plus
a lane's normalize), for a cold run and a no-op resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import runjournal
from runjournal.adapters import packed_store
from runjournal.adapters.function_steps import chunk_step
from support.traced import shrink_bounded_caches, traced_run_peak

CHUNKS = 40  # a document's paragraphs, one chunk each
SMALL, LARGE = 30, 120  # documents
PER_CHUNK = 300  # bytes the peak may grow by per chunk


@chunk_step
def size(chunk: Any) -> int:
    """A small artifact: what is measured is the run's bookkeeping, not its data."""
    return len(chunk.text)


def _project(root: Path, docs: int) -> runjournal.Project:
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        paragraphs = [f"document {d} paragraph {p} " * 3 for p in range(CHUNKS)]
        (root / "docs" / f"d{d:04d}.md").write_text("\n\n".join(paragraphs) + "\n")
    pipeline = runjournal.Pipeline(
        name="memory-chunks",
        inputs=("docs/*.md",),
        steps=(runjournal.Step(id="size", module=size),),
        directory=str(root),
        chunking={"strategy": "paragraphs", "max_chars": 80},
    )
    return runjournal.Project.open(
        pipeline, output_root=str(root / "out"), cache_root=str(root / "cache"), progress=False
    )


def _peaks(root: Path, docs: int) -> tuple[int, int, int]:
    project = _project(root, docs)
    cold, first = traced_run_peak(project, resume=False)
    resumed, again = traced_run_peak(project, resume=True)
    assert set(again.decisions) == {"reused"}, again.decisions
    decisions = sum(first.decisions.values())
    assert decisions == sum(again.decisions.values())
    return cold, resumed, decisions


def test_peak_memory_grows_by_little_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What is bounded, by a size a corpus this small does not reach, is made small here so
    # the sizes measured are past it: the events of reuse summaries a resume holds until
    # their batch commits, the lanes held for one block summary, the sealed blocks held
    # decompressed, the open segment whose index rows are kept until it seals, the
    # directories a store created, the directory ids it remembers and its packed path
    # components.
    shrink_bounded_caches(monkeypatch)
    init = packed_store.PackedStore.__init__

    def small_segments(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("segment_limit", 256 << 10)
        init(self, *args, **kwargs)

    monkeypatch.setattr(packed_store.PackedStore, "__init__", small_segments)
    cold_a, resumed_a, decisions_a = _peaks(tmp_path / "small", SMALL)
    cold_b, resumed_b, decisions_b = _peaks(tmp_path / "large", LARGE)
    chunks = (LARGE - SMALL) * CHUNKS
    assert decisions_b - decisions_a >= chunks  # one extract decision a chunk at least
    for what, a, b in (("cold run", cold_a, cold_b), ("no-op resume", resumed_a, resumed_b)):
        per_chunk = (b - a) / chunks
        # before: 523 B a chunk cold and 685 B resumed (the chunk objects, the aggregate's
        # decisions, lane jobs, the chunk map at the end); after: about 150 and 180 B
        assert per_chunk < PER_CHUNK, (
            f"{what}: the peak grew {per_chunk:.0f} B per chunk ({a} B at {SMALL} documents "
            f"of {CHUNKS} chunks, {b} B at {LARGE})"
        )
