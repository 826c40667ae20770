"""A run holds a handle and a digest a source for its planned chunks, not the chunks
(issue 29: peak RSS at most 300 MB at a million decisions).

Between planning and a lane's start each source's chunks were held packed, 80 bytes a
chunk, for the whole run. With the run's spool they are set aside there as the source is
planned (`SourceChunks.spilled`, domain/runner/plans.py), read back when a lane starts
and checked against their digest (docs/internals.md "Input stat cache"). Measured with
`tracemalloc`: what the run holds a source, with 40 chunks a source.
"""

from __future__ import annotations

import gc
import hashlib
import tracemalloc

import pytest
from runjournal.adapters.spool import FileSpool
from runjournal.domain.modules import Chunk
from runjournal.domain.runner.plans import SourceChunks

SOURCES, CHUNKS = 300, 40
PER_SOURCE = 400  # bytes held a source; its 40 chunks packed are 3,200


def _chunks(source: str) -> list[Chunk]:
    out = []
    for c in range(CHUNKS):
        text = f"{source} chunk {c}".encode()
        digest = hashlib.sha256(text).hexdigest()
        ident = hashlib.sha256(b"id" + text).hexdigest()
        out.append(Chunk(id=ident, source=source, start=c, end=c + 1, text="", sha256=digest))
    return out


def test_spilled_chunks_cost_a_handle_and_a_digest() -> None:
    planned = {f"d{s:04d}.md": _chunks(f"d{s:04d}.md") for s in range(SOURCES)}
    spool = FileSpool.open(None)
    try:
        gc.collect()
        tracemalloc.start()
        try:
            held = [SourceChunks(name, chunks).spilled(spool) for name, chunks in planned.items()]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert size / SOURCES < PER_SOURCE, f"{size / SOURCES:.0f} B a source"
        for chunks in held:  # read back: equal to the ones planned
            assert chunks.get() == planned[chunks.source]
            assert len(chunks) == CHUNKS
    finally:
        spool.close()


def test_chunks_changed_in_the_spool_are_refused() -> None:
    class Spool:
        def __init__(self) -> None:
            self.data: list[bytes] = []

        def put(self, data: bytes) -> int:
            self.data.append(data)
            return len(self.data) - 1

        def get(self, handle: int) -> bytes:
            return self.data[handle]

    spool = Spool()
    chunks = SourceChunks("d.md", _chunks("d.md")).spilled(spool)
    spool.data[0] = spool.data[0][:-1] + b"\x00"
    with pytest.raises(OSError, match="changed"):
        chunks.get()
