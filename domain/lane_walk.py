"""One lane's stages in the order they are decided: the walk the runner and the planner share.

A lane is extract per chunk, then merge, then normalize (docs/internals.md "The runner").
`walk_lane` is a pure generator that says what to look up and what to decide, in that
order, and carries each stage's input from what the stages before it produced:

- `Look(stage, chunk)` asks for the stage's checkpoint: send back `(state, record)`.
- `Decide(stage, chunk, stage_input, state, record)` asks for the decision: send back
  the stage's output digest, or None when it is not known yet (the stage executes).
- `Settle(misses)` comes once after the extracts were decided, when some executed: send
  back their output digests in the same order (None for one still unknown).

The runner (domain/runner/lanes.py) answers by executing what it decides; the planner
(domain/planner.py) answers with predictions. What the walk settles for both: the merge
checkpoint is looked up first, because a chunk with no checkpoint in a lane whose
recorded identity changed is "new bytes" (the lane-only substitution); an unknown extract
output makes the merge input unknown; normalize is looked up after merge produced.
`stage_facts` builds the facts `decide_stage` decides from (docs/operations.md
"Decision order").
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any, NamedTuple

from runjournal.domain.decisions import (
    CheckpointState,
    Stage,
    StageDigests,
    StageFacts,
    lane_only_digests,
)
from runjournal.domain.identity import LaneComponents, sequence_digest
from runjournal.domain.ports import CheckpointRecord


class Look(NamedTuple):
    """Look the stage's checkpoint up: answered with `(CheckpointState, record | None)`."""

    stage: Stage
    chunk: str


class Decide(NamedTuple):
    """Decide the stage: answered with its output digest, None while unknown.

    `stage_input` is None when an earlier stage's output is not known (the planner's
    upstream-pending case). `fallback` is the lane's merge record an extract with no
    checkpoint of its own is compared against (the lane-only substitution), kept so a
    caller that looks the stage up again (after a lease wait) substitutes the same way.
    """

    stage: Stage
    chunk: str
    stage_input: str | None
    state: CheckpointState
    record: CheckpointRecord | None
    fallback: CheckpointRecord | None = None


class Settle(NamedTuple):
    """The extracts that execute (chunk indices): answered with their output digests."""

    misses: list[int]


Turn = Look | Decide | Settle


def walk_lane(lane_identity: str, chunk_ids: Sequence[str]) -> Generator[Turn, Any, None]:
    """The lane's lookups and decisions, in the order every caller takes them."""
    merge_state, merge_record = yield Look(Stage.MERGE, "")
    fallback = lane_only_source(merge_state, merge_record, lane_identity)
    outputs: list[str | None] = []
    for chunk in chunk_ids:
        state, record = yield Look(Stage.EXTRACT, chunk)
        state, record = with_lane_only(state, record, fallback)
        outputs.append((yield Decide(Stage.EXTRACT, chunk, chunk, state, record, fallback)))
    misses = [i for i, out in enumerate(outputs) if out is None]
    if misses:
        settled = yield Settle(misses)
        for i, out in zip(misses, settled, strict=True):
            outputs[i] = out
    known = [out for out in outputs if out is not None]
    extract_digest = sequence_digest(known) if len(known) == len(outputs) else None
    merged = yield Decide(Stage.MERGE, "", extract_digest, merge_state, merge_record)
    norm_state, norm_record = yield Look(Stage.NORMALIZE, "")
    yield Decide(Stage.NORMALIZE, "", merged, norm_state, norm_record)


class LaneWalk:
    """`walk_lane` as a loop: iterate its turns, `answer` each before taking the next.

    walk = LaneWalk(lane_identity, chunk_ids)
    for turn in walk:
        walk.answer(...)  # a turn left unanswered is answered None
    """

    def __init__(self, lane_identity: str, chunk_ids: Sequence[str]) -> None:
        self._walk = walk_lane(lane_identity, chunk_ids)
        self._answer: Any = None

    def __iter__(self) -> Iterator[Turn]:
        while True:
            try:
                turn = self._walk.send(self._answer)
            except StopIteration:
                return
            self._answer = None
            yield turn

    def answer(self, value: Any) -> None:
        self._answer = value


def lane_only_source(
    merge_state: CheckpointState, merge_record: CheckpointRecord | None, lane_identity: str
) -> CheckpointRecord | None:
    """The merge record a chunk with no checkpoint is compared against, or None.

    A chunk with no checkpoint is "new bytes" (`input_changed`) only when the lane's
    recorded identity differs, i.e. its sources or components changed since; in an
    unchanged lane a missing file is just `checkpoint_missing`.
    """
    if (
        merge_state is CheckpointState.PRESENT
        and merge_record is not None
        and merge_record.lane_identity != lane_identity
    ):
        return merge_record
    return None


def with_lane_only(
    state: CheckpointState, record: CheckpointRecord | None, fallback: CheckpointRecord | None
) -> tuple[CheckpointState, CheckpointRecord | None]:
    """An extract's lookup, with the lane-only substitution when its checkpoint is missing."""
    if state is CheckpointState.MISSING and fallback is not None:
        return CheckpointState.LANE_ONLY, fallback
    return state, record


def stage_facts(
    *,
    stage: Stage,
    components: LaneComponents,
    stage_input: str,
    dependencies: str | None,
    state: CheckpointState,
    record: CheckpointRecord | None,
    forced: bool,
    resumed: bool,
    recorded: StageDigests | None = None,
) -> StageFacts:
    """The facts a stage is decided from.

    `recorded` overrides the record's digests (`recorded_digests`), for a caller that
    decides one stage under several values an unknown output may take (the planner).
    """
    if recorded is None:
        recorded = recorded_digests(state, record, dependencies)
    return StageFacts(
        stage=stage,
        forced=forced,
        resumed=resumed,
        checkpoint=state,
        current=StageDigests(components, stage_input, dependencies or ""),
        recorded=recorded,
    )


def recorded_digests(
    state: CheckpointState, record: CheckpointRecord | None, dependencies: str | None
) -> StageDigests | None:
    """What a stage's checkpoint recorded; a lane-only extract is compared with its lane's
    merge record under the extract's own D, when that D is known."""
    if record is None:
        return None
    if state is CheckpointState.LANE_ONLY and dependencies is not None:
        return lane_only_digests(record.digests, dependencies)
    return record.digests
