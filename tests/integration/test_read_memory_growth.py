"""Memory of `gc --cache` and `explain` grows by a few bytes a checkpoint or decision, not
by hundreds, and `journal audit`'s replay not at all (issue 29: peak RSS at most 300 MB for
every command at 1M decisions; docs/performance.md "gc, audit and explain at scale").

Each is run in process under `tracemalloc` on a synthetic run of N lanes and of 4N; what
the larger peak adds over the smaller, per checkpoint (gc) or decision (explain), must
stay small. Before, gc held every name of the store (sorted), a key object per
referenced checkpoint and a dict of names (about 700 B a checkpoint), and explain a list
of fields and a chunk id's string per decision (about 230 B), and the audit's replay
every decision of the run with its lane's facts (about 2 KB a lane). No wall-clock bound.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from runjournal.adapters.cache_gc import WORKSPACES, RefIndex, Retention, collect
from runjournal.adapters.checkpoints import Workspace
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import JournalStore, open_journal
from runjournal.adapters.packed_store import PackedStore
from runjournal.adapters.run_directory_check import RunFacts
from runjournal.domain.audit import AuditReport, audit_run
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


def _journaled(tmp_path: Path, lanes: int) -> tuple[JournalStore, str]:
    """A run of `lanes` lanes of 8 chunks (10 decisions a lane) in a SQLite journal: the
    audit reads events decoded from their rows, as `journal audit` does."""
    run = syn.synthetic_run(syn.run_id_for(lanes), lanes=lanes, chunks=8)
    store = open_journal(str(tmp_path / f"audit-{lanes}.sqlite3"))
    store.append_events(run.run_id, run.events, batch=256)
    return store, run.run_id


def _audit_peak(tmp_path: Path, lanes: int) -> int:
    store, run_id = _journaled(tmp_path, lanes)
    reports: list[AuditReport] = []
    with store:
        peak = _traced_peak(lambda: reports.append(audit_run(store.events(run_id))))
    assert reports[0].ok and reports[0].decisions == 10 * lanes
    return peak


def test_audit_replay_memory_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """The replay lets a lane's decisions and facts go with its `ArtifactGenerated`, so
    auditing four times the lanes peaks about as high (about 1.3x: the decoder's pages
    and free lists); holding every decision made it about 3.5x."""
    small, large = _audit_peak(tmp_path, LANES // 2), _audit_peak(tmp_path, 2 * LANES)
    assert large < 2 * small, (small, large)


def _facts_peak(tmp_path: Path, lanes: int) -> int:
    store, run_id = _journaled(tmp_path, lanes)
    facts = RunFacts()

    def feed() -> None:
        for event in store.events(run_id):
            facts.feed(event)

    with store:
        peak = _traced_peak(feed)
    assert len(facts.outputs) == len(facts.artifacts) == lanes
    return peak


def test_audit_run_facts_hold_a_few_hundred_bytes_a_lane(tmp_path: Path) -> None:
    """What the run directory check keeps of a lane's artifact and output file is their
    name, version and packed digest (about 500 B a lane here), not the two events
    (about 800)."""
    lanes = (LANES // 2, 2 * LANES)
    small, large = (_facts_peak(tmp_path, n) for n in lanes)
    per_lane = (large - small) / (lanes[1] - lanes[0])
    assert per_lane < 650, (small, large, per_lane)
