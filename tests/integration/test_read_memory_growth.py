"""Memory of `gc --cache` and `explain` grows by a few bytes a checkpoint or decision, not
by hundreds (issue 29: peak RSS at most 300 MB for every command at 1M decisions;
docs/performance.md "gc, audit and explain at scale").

Each is run in process under `tracemalloc` on a synthetic run of N lanes and of 4N; what
the larger peak adds over the smaller, per checkpoint (gc) or decision (explain), must
stay small. Before, gc held every name of the store (sorted), a key object per
referenced checkpoint and a dict of names (about 700 B a checkpoint), and explain a list
of fields and a chunk id's string per decision (about 230 B). No wall-clock bound.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from runjournal.adapters.cache_gc import WORKSPACES, RefIndex, Retention, collect
from runjournal.adapters.checkpoints import Workspace
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.cache_refs import reference_facts, references
from runjournal.projections.base import fold
from runjournal.projections.reasons_report import ReasonReportProjection
from support import synthetic as syn

LANES = 1200  # N; the larger run has 4N


def _traced_peak(work) -> int:  # type: ignore[no-untyped-def]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _gc_peak(tmp_path: Path, lanes: int) -> tuple[int, int]:
    """(traced peak of collecting a cache of one run of `lanes` lanes, its checkpoints)."""
    run = syn.synthetic_run(syn.run_id_for(lanes), lanes=lanes, chunks=2)
    names = [
        f"{WORKSPACES}/{refs.pipeline}/{Workspace.checkpoint_name(key)}"
        for refs in references(run.events).values()
        for key in refs.checkpoints
    ]
    with FsRoot.open(tmp_path / f"cache-{lanes}", create=True) as root:
        store = PackedStore(root)
        store.put_many((name, b"checkpoint") for name in names)
        store.close()
        result = []

        def work() -> None:
            with RefIndex() as index:
                index.add_journal(reference_facts(iter(run.events)), own=True)
                index.finish()
                keep = Retention(epoch_ns=-1)
                result.append(collect(root, index, None, dry_run=True, keep=keep))

        peak = _traced_peak(work)
    assert result[0].removed == [] and result[0].size_before > 0  # all referenced
    return peak, len(names)


def test_gc_cache_memory_does_not_grow_with_the_checkpoints(tmp_path: Path) -> None:
    small, n_small = _gc_peak(tmp_path, LANES)
    large, n_large = _gc_peak(tmp_path, 4 * LANES)
    per_checkpoint = (large - small) / (n_large - n_small)
    assert per_checkpoint < 150, (small, large, per_checkpoint)  # about 85; was about 620


def _explain_peak(lanes: int) -> tuple[int, int]:
    run = syn.synthetic_run(syn.run_id_for(lanes), lanes=lanes, chunks=8)
    held: list[object] = []
    peak = _traced_peak(lambda: held.append(fold(ReasonReportProjection(), iter(run.events))))
    decisions = sum(v for v in held[0].head()["totals"].values())  # type: ignore[attr-defined]
    return peak, decisions


def test_explain_holds_a_few_bytes_a_decision() -> None:
    small, n_small = _explain_peak(LANES)
    large, n_large = _explain_peak(4 * LANES)
    per_decision = (large - small) / (n_large - n_small)
    assert per_decision < 115, (small, large, per_decision)  # about 85; was about 143
