"""What a run holds per document is small and does not hold the documents (issue 29: peak
RSS at most 300 MB at a million decisions).

A run used to hold every input's bytes twice (read, and as chunk text) and every lane's
artifact until it wrote its outputs at the end, so its peak grew by about three times
each document's size. Now the inputs are read again when an extract needs them, and the
artifacts no step consumes and the output files wait in the run's spool (adapters/
spool.py) until P5 places them one at a time (docs/internals.md "Run outputs as links").
The peak traced by `tracemalloc`, measured at two corpus sizes in this process, must grow
by much less than one document's size per document, for a cold run and a no-op resume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import runjournal
from runjournal.adapters.function_steps import chunk_step
from support.traced import traced_run_peak

PARAGRAPHS = 2
PARAGRAPH = 24_000  # bytes: a document is about 48 KB, its artifact about as much
SMALL, LARGE = 100, 300


@chunk_step
def keep(chunk: Any) -> list[str]:
    """An artifact the size of the document: the chunks' text, in order."""
    return [chunk.text]


def _project(root: Path, docs: int) -> runjournal.Project:
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        paragraphs = [(f"d{d} p{p} " * PARAGRAPH)[:PARAGRAPH] for p in range(PARAGRAPHS)]
        (root / "docs" / f"d{d:04d}.md").write_text("\n\n".join(paragraphs) + "\n")
    pipeline = runjournal.Pipeline(
        name="memory",
        inputs=("docs/*.md",),
        steps=(runjournal.Step(id="keep", module=keep),),
        directory=str(root),
        chunking={"strategy": "paragraphs", "max_chars": PARAGRAPH + 100},
    )
    return runjournal.Project.open(
        pipeline, output_root=str(root / "out"), cache_root=str(root / "cache"), progress=False
    )


def _peaks(root: Path, docs: int) -> tuple[int, int]:
    project = _project(root, docs)
    cold, first = traced_run_peak(project, resume=False)
    resumed, again = traced_run_peak(project, resume=True)
    assert set(again.decisions) == {"reused"}, again.decisions
    # the outputs are the bytes they always were, the resume's the same as the cold run's
    outputs = first.outputs
    name = next(n for n in sorted(outputs) if n.startswith("artifacts/keep/docs__d0000.md"))
    text = (root / "docs" / "d0000.md").read_text()
    assert "".join(json.loads(outputs[name].read_bytes())) == text
    for key, output in outputs.items():
        digest = hashlib.sha256(output.read_bytes()).hexdigest()
        assert hashlib.sha256(again.outputs[key].read_bytes()).hexdigest() == digest
    return cold, resumed


def test_peak_memory_grows_by_much_less_than_a_document_per_document(tmp_path: Path) -> None:
    small = _peaks(tmp_path / "small", SMALL)
    large = _peaks(tmp_path / "large", LARGE)
    document = PARAGRAPHS * PARAGRAPH
    for what, a, b in zip(("cold run", "no-op resume"), small, large, strict=True):
        per_document = (b - a) / (LARGE - SMALL)
        # before: about 3 documents' bytes per document (input, chunk text, artifact);
        # now a few KB of names, digests and offsets
        assert per_document < document / 2, (
            f"{what}: the peak grew {per_document:.0f} B per document of {document} B "
            f"({a} B at {SMALL} documents, {b} B at {LARGE})"
        )
