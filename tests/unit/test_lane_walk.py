"""The lane walk both the runner and the planner answer (domain/lane_walk.py).

Driven with made-up lookups and outputs: the order of turns, the lane-only substitution,
each stage's input from what the stages before it produced, and that the runner and the
planner take their order from this walk rather than a walk of their own.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from runjournal.domain.checkpoint_scope import stage_scopes
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents, scope_dependencies, sequence_digest
from runjournal.domain.lane_walk import (
    Decide,
    Look,
    Settle,
    recorded_digests,
    stage_facts,
    walk_lane,
)
from runjournal.domain.ports import CheckpointRecord

ROOT = pathlib.Path(__file__).resolve().parents[2]
LID = "a" * 64
COMPONENTS = LaneComponents(**{name: "x" for name in LaneComponents.__struct_fields__})


def record(lane_identity: str = LID, output: str = "o" * 64) -> CheckpointRecord:
    return CheckpointRecord(
        codec_id="c",
        lane_identity=lane_identity,
        digests=StageDigests(COMPONENTS, "in", "dep"),
        output_sha256=output,
        payload=b"{}",
    )


def drive(
    chunks: list[str],
    merge: tuple[CheckpointState, Any],
    extract: dict[str, tuple[CheckpointState, Any]],
    reused: set[int],
    executed: dict[int, str | None],
) -> list[Any]:
    """Answer every turn; return the turns seen (Decide turns with the answer given)."""
    walk = walk_lane(LID, chunks)
    seen: list[Any] = []
    answer: Any = None
    index = 0
    while True:
        try:
            turn = walk.send(answer)
        except StopIteration:
            return seen
        seen.append(turn)
        if isinstance(turn, Look):
            if turn.stage is Stage.MERGE:
                answer = merge
            elif turn.stage is Stage.EXTRACT:
                answer = extract.get(turn.chunk, (CheckpointState.MISSING, None))
            else:
                answer = (CheckpointState.MISSING, None)
        elif isinstance(turn, Settle):
            answer = [executed.get(i) for i in turn.misses]
        elif turn.stage is Stage.EXTRACT:
            answer = f"{index:064d}" if index in reused else None
            index += 1
        elif turn.stage is Stage.MERGE:
            answer = "m" * 64
        else:
            answer = None


def test_order_merge_looked_up_first_then_each_chunk_then_merge_and_normalize() -> None:
    turns = drive(["c1", "c2"], (CheckpointState.MISSING, None), {}, {0, 1}, {})
    kinds = [(type(t).__name__, t.stage.value, t.chunk) for t in turns]
    assert kinds == [
        ("Look", "merge", ""),
        ("Look", "extract", "c1"),
        ("Decide", "extract", "c1"),
        ("Look", "extract", "c2"),
        ("Decide", "extract", "c2"),
        ("Decide", "merge", ""),
        ("Look", "normalize", ""),
        ("Decide", "normalize", ""),
    ]
    merge = turns[5]
    assert merge.stage_input == sequence_digest([f"{0:064d}", f"{1:064d}"])
    assert turns[-1].stage_input == "m" * 64  # normalize reads what merge produced


def test_extract_missing_in_a_changed_lane_is_compared_with_the_merge_record() -> None:
    old = record(lane_identity="b" * 64)
    turns = drive(["c1"], (CheckpointState.PRESENT, old), {}, set(), {0: "e" * 64})
    decide = next(t for t in turns if isinstance(t, Decide) and t.stage is Stage.EXTRACT)
    assert decide.state is CheckpointState.LANE_ONLY and decide.record is old
    assert decide.fallback is old


def test_extract_missing_in_an_unchanged_lane_stays_missing() -> None:
    same = record(lane_identity=LID)
    turns = drive(["c1"], (CheckpointState.PRESENT, same), {}, set(), {0: "e" * 64})
    decide = next(t for t in turns if isinstance(t, Decide) and t.stage is Stage.EXTRACT)
    assert decide.state is CheckpointState.MISSING and decide.record is None


@given(
    chunks=st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=8),
    reused=st.sets(st.integers(0, 7)),
    unknown=st.sets(st.integers(0, 7)),
)
def test_settle_asks_only_for_the_misses_and_merge_input_follows(
    chunks: list[str], reused: set[int], unknown: set[int]
) -> None:
    executed = {i: (None if i in unknown else f"{i:064x}") for i in range(len(chunks))}
    turns = drive(chunks, (CheckpointState.MISSING, None), {}, reused, executed)
    misses = [i for i in range(len(chunks)) if i not in reused]
    settles = [t for t in turns if isinstance(t, Settle)]
    assert [s.misses for s in settles] == ([misses] if misses else [])
    outputs = [f"{i:064d}" if i in reused else executed[i] for i in range(len(chunks))]
    merge = next(t for t in turns if isinstance(t, Decide) and t.stage is Stage.MERGE)
    if None in outputs:
        assert merge.stage_input is None  # the planner's upstream-pending case
    else:
        assert merge.stage_input == sequence_digest(outputs)
    decided = [t.chunk for t in turns if isinstance(t, Decide) and t.stage is Stage.EXTRACT]
    assert decided == chunks  # repeated chunks are each decided, in order


def test_lane_only_facts_use_the_extracts_own_dependencies() -> None:
    old = record(lane_identity="b" * 64)
    facts = stage_facts(
        stage=Stage.EXTRACT,
        components=COMPONENTS,
        stage_input="c1",
        dependencies="own",
        state=CheckpointState.LANE_ONLY,
        record=old,
        forced=False,
        resumed=True,
    )
    assert facts.recorded is not None and facts.recorded.dependencies == "own"
    assert recorded_digests(CheckpointState.LANE_ONLY, old, None) == old.digests


def test_stage_scopes_cover_earlier_stages_and_unknown_ds() -> None:
    known = stage_scopes(COMPONENTS, ["d1", "d2", "d3"], LID)
    assert known[Stage.EXTRACT].dependencies == "d1"
    assert known[Stage.NORMALIZE].dependencies == scope_dependencies(["d1", "d2", "d3"])
    partly = stage_scopes(COMPONENTS, ["d1", None, "d3"], LID, unknown="u")
    assert partly[Stage.EXTRACT].dependencies == "d1"
    assert partly[Stage.MERGE].dependencies == "u" and partly[Stage.NORMALIZE].dependencies == "u"


def _calls(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_runner_and_planner_walk_the_same_lane_and_build_no_scope_of_their_own() -> None:
    for module in ("domain/runner/lanes.py", "domain/planner.py"):
        calls = _calls(ROOT / module)
        assert "LaneWalk" in calls, module
        assert "stage_scopes" in calls, module
        assert "StoreScope" not in calls, module  # scopes are built in checkpoint_scope.py
        assert "lane_only_digests" not in calls, module  # the substitution is the walk's
    for module in ("domain/runner/restore.py", "domain/planner.py"):
        assert "restoration" in _calls(ROOT / module) or module.endswith("restore.py")
    assert "load_accepted_artifact" not in _calls(ROOT / "domain/planner.py")
