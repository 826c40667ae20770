"""`domain/cache_refs.py` `with_summarized`: a run journaled as block summaries references
exactly the checkpoints of the units its blocks name, and finding them walks the source
run's checkpoints once, not once per block (that was blocks x checkpoints: quadratic in
the corpus, docs/performance.md "gc, audit and explain at scale")."""

from __future__ import annotations

from datetime import UTC, datetime

from runjournal.domain.cache_refs import RunReferences, with_summarized
from runjournal.domain.decisions import Stage
from runjournal.domain.events import BlockKind
from runjournal.domain.ports import CheckpointKey, StoreScope

SCOPE = StoreScope("a" * 32, "", "b" * 64)


class _CountedKeys(set):  # type: ignore[type-arg]
    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().__iter__()


def _keys(step: str, lane: str) -> list[CheckpointKey]:
    return [CheckpointKey(step, lane, Stage.EXTRACT, f"{n:064x}", SCOPE) for n in range(2)] + [
        CheckpointKey(step, lane, Stage.MERGE, "", SCOPE)
    ]


def test_blocks_reference_their_units_checkpoints_walking_the_source_once() -> None:
    when = datetime(2026, 12, 1, tzinfo=UTC)
    lanes = [f"docs/d{n}.md" for n in range(30)]
    cold = RunReferences(run_id="cold", pipeline="p", started=when)
    cold.checkpoints = _CountedKeys(
        k for step in ("a", "b") for lane in lanes for k in _keys(step, lane)
    )
    cold.lane_order = {"a": list(lanes), "b": list(lanes)}
    resumed = RunReferences(run_id="resumed", pipeline="p", started=when)
    # blocks of 3 units of step a, from unit 3 on, and one of step b's first unit
    resumed.blocks = [("cold", BlockKind.LANES, "a", first, 3) for first in range(3, 30, 3)]
    resumed.blocks.append(("cold", BlockKind.LANES, "b", 0, 1))
    with_summarized([cold, resumed])
    expected = {k for lane in lanes[3:] for k in _keys("a", lane)} | set(_keys("b", lanes[0]))
    assert resumed.checkpoints == expected
    assert cold.checkpoints.walks <= 1  # was once per block (10)
