"""A project of two cheap function steps over N one-file documents: what the run-memory
and lane-window tests measure is the run's bookkeeping per lane, not its data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import runjournal
from runjournal.adapters.function_steps import chunk_step


@chunk_step
def size(chunk: Any) -> int:
    """A small artifact."""
    return len(chunk.text)


@chunk_step
def words(chunk: Any) -> int:
    return len(chunk.text.split())


def two_step_project(root: Path, docs: int, *, name: str, text: str) -> runjournal.Project:
    """`docs` documents under `root/docs` (`text` formatted with the document's number),
    steps `size` and `words`, caches and outputs under `root`."""
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        (root / "docs" / f"d{d:05d}.md").write_text(text.format(d))
    pipeline = runjournal.Pipeline(
        name=name,
        inputs=("docs/*.md",),
        steps=(
            runjournal.Step(id="size", module=size),
            runjournal.Step(id="words", module=words),
        ),
        directory=str(root),
    )
    return runjournal.Project.open(
        pipeline, output_root=str(root / "out"), cache_root=str(root / "cache"), progress=False
    )
