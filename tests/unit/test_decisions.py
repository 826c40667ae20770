"""The pure decision function: docs/operations.md "Decision order", one rule at a time."""

from __future__ import annotations

import pytest
from runjournal.domain.decisions import (
    CheckpointState,
    PredecessorState,
    Stage,
    StageDigests,
    StageFacts,
    decide_stage,
    recorded_differences,
    with_differences,
)
from runjournal.domain.identity import COMPONENT_ORDER, LaneComponents
from runjournal.domain.reasons import CATEGORY_OF, DESCRIPTIONS, ReasonCode, bound_utf8, detail_for

BASE = LaneComponents(*(f"{n}-digest" for n in COMPONENT_ORDER))
CURRENT = StageDigests(BASE, "input", "deps")


def facts(**kw):
    kw.setdefault("stage", Stage.MERGE)
    kw.setdefault("resumed", True)
    kw.setdefault("checkpoint", CheckpointState.PRESENT)
    kw.setdefault("current", CURRENT)
    kw.setdefault("recorded", CURRENT)
    return StageFacts(**kw)


def changed(**comp):
    values = {n: getattr(BASE, n) for n in COMPONENT_ORDER}
    values.update(comp)
    return LaneComponents(**values)


def test_unchanged_is_reused():
    assert decide_stage(facts()) is ReasonCode.REUSED


@pytest.mark.parametrize(
    ("component", "code"),
    [
        ("config", ReasonCode.CONFIG_CHANGED),
        ("module", ReasonCode.MODULE_CHANGED),
        ("validators", ReasonCode.VALIDATOR_CHANGED),
        ("references", ReasonCode.REFERENCES_CHANGED),
        ("overrides", ReasonCode.OVERRIDES_CHANGED),
        ("profile", ReasonCode.PROFILE_CHANGED),
        ("profile_source", ReasonCode.PROFILE_SOURCE_CHANGED),
    ],
)
def test_each_component_names_its_code(component, code):
    rec = StageDigests(changed(**{component: "old"}), "input", "deps")
    assert decide_stage(facts(recorded=rec)) is code


def test_order_first_component_wins():
    rec = StageDigests(changed(config="x", profile="y"), "other", "other")
    assert decide_stage(facts(recorded=rec)) is ReasonCode.CONFIG_CHANGED
    rec = StageDigests(changed(profile="y"), "other", "other")
    assert decide_stage(facts(recorded=rec)) is ReasonCode.PROFILE_CHANGED


def test_input_then_dependencies():
    rec = StageDigests(BASE, "old", "old")
    assert decide_stage(facts(recorded=rec)) is ReasonCode.STAGE_INPUT_CHANGED
    assert decide_stage(facts(recorded=rec, stage=Stage.EXTRACT)) is ReasonCode.INPUT_CHANGED
    rec = StageDigests(BASE, "input", "old")
    assert decide_stage(facts(recorded=rec)) is ReasonCode.DEPENDENCY_INVALIDATED


def test_lane_only_extract_is_input_changed_unless_a_component_changed():
    lane = StageDigests(BASE, "merge-input", "deps")
    f = facts(stage=Stage.EXTRACT, checkpoint=CheckpointState.LANE_ONLY, recorded=lane)
    assert decide_stage(f) is ReasonCode.INPUT_CHANGED
    lane = StageDigests(changed(module="old"), "merge-input", "deps")
    f = facts(stage=Stage.EXTRACT, checkpoint=CheckpointState.LANE_ONLY, recorded=lane)
    assert decide_stage(f) is ReasonCode.MODULE_CHANGED


@pytest.mark.parametrize(
    ("state", "code"),
    [
        (CheckpointState.MISSING, ReasonCode.CHECKPOINT_MISSING),
        (CheckpointState.CORRUPT, ReasonCode.CHECKPOINT_CORRUPT),
        (CheckpointState.SCHEMA_UNSUPPORTED, ReasonCode.SCHEMA_UNSUPPORTED),
        (CheckpointState.CODEC_MISMATCH, ReasonCode.CODEC_MISMATCH),
    ],
)
def test_checkpoint_states(state, code):
    assert decide_stage(facts(checkpoint=state, recorded=None)) is code


def test_forced_and_not_resumed_come_first():
    rec = StageDigests(changed(config="x"), "old", "old")
    assert decide_stage(facts(forced=True, recorded=rec)) is ReasonCode.FORCED_RECOMPUTE
    assert decide_stage(facts(resumed=False, recorded=rec)) is ReasonCode.NOT_RESUMED
    assert decide_stage(facts(failed=True, forced=True)) is ReasonCode.STAGE_FAILED


@pytest.mark.parametrize(
    ("state", "code"),
    [
        (PredecessorState.RESTORED, ReasonCode.PREDECESSOR_REUSED),
        (PredecessorState.MISSING, ReasonCode.PREDECESSOR_MISSING),
        (PredecessorState.IDENTITY_MISMATCH, ReasonCode.PREDECESSOR_IDENTITY_MISMATCH),
        (PredecessorState.CORRUPT, ReasonCode.PREDECESSOR_CORRUPT),
        (PredecessorState.PROVENANCE_INVALID, ReasonCode.PREDECESSOR_PROVENANCE_INVALID),
    ],
)
def test_predecessor_states(state, code):
    assert decide_stage(facts(predecessor=state, stage=Stage.NORMALIZE)) is code


def test_differences_round_trip_rebuilds_recorded():
    rec = StageDigests(changed(overrides="o", references="r"), "old-in", "deps")
    f = facts(recorded=rec)
    diffs = recorded_differences(f)
    assert diffs == {"overrides": "o", "references": "r", "input": "old-in"}
    assert with_differences(CURRENT, diffs) == rec
    assert recorded_differences(facts()) == {}


def test_every_code_has_category_and_bounded_detail():
    for code in ReasonCode:
        assert code in CATEGORY_OF
        assert DESCRIPTIONS[code]
        assert len(detail_for(code).encode()) <= 240


def test_bound_utf8_cuts_on_character_boundary_and_normalizes():
    text = "é" * 200  # 400 bytes as NFC
    out = bound_utf8(text, 241)
    assert len(out.encode()) <= 241 and out == "é" * 120
    assert bound_utf8("e\u0301") == "é"


def test_stage_decided_fields_and_facts_round_trip():
    from datetime import UTC, datetime
    from uuid import uuid4

    from runjournal.domain.events import StageDecided

    rec = StageDigests(changed(references="r"), "old", "deps")
    for f in (facts(recorded=rec), facts(checkpoint=CheckpointState.CORRUPT, recorded=None)):
        code = decide_stage(f)
        event = StageDecided(
            originator_id=uuid4(),
            originator_version=2,
            timestamp=datetime.now(UTC),
            **StageDecided.fields("s", "l", "", f, code),
        )
        assert event.code is code and event.category is CATEGORY_OF[code]
        assert event.facts(BASE) == f
        assert decide_stage(event.facts(BASE)) is code


def test_decide_stage_follows_decision_order_pairwise():
    """For each pair of codes in DECISION_ORDER, when both rules apply the earlier wins."""
    from runjournal.domain.decisions import _COMPONENT_CODES, DECISION_ORDER

    def apply(code, kw):
        if code is ReasonCode.FORCED_RECOMPUTE:
            kw["forced"] = True
        elif code is ReasonCode.NOT_RESUMED:
            kw["resumed"] = False
        elif code in (
            ReasonCode.CHECKPOINT_MISSING,
            ReasonCode.CHECKPOINT_CORRUPT,
            ReasonCode.SCHEMA_UNSUPPORTED,
            ReasonCode.CODEC_MISMATCH,
        ):
            state = {
                ReasonCode.CHECKPOINT_MISSING: CheckpointState.MISSING,
                ReasonCode.CHECKPOINT_CORRUPT: CheckpointState.CORRUPT,
                ReasonCode.SCHEMA_UNSUPPORTED: CheckpointState.SCHEMA_UNSUPPORTED,
                ReasonCode.CODEC_MISMATCH: CheckpointState.CODEC_MISMATCH,
            }[code]
            kw.setdefault("checkpoint", state)
            kw["recorded"] = None
        elif code in (ReasonCode.INPUT_CHANGED, ReasonCode.STAGE_INPUT_CHANGED):
            kw["rec_input"] = "old"
        elif code is ReasonCode.DEPENDENCY_INVALIDATED:
            kw["rec_deps"] = "old"
        elif code is not ReasonCode.REUSED:
            name = {v: k for k, v in _COMPONENT_CODES.items()}[code]
            kw.setdefault("changed", {})[name] = "old"

    ordinary = list(DECISION_ORDER)
    for i, first in enumerate(ordinary):
        for second in ordinary[i + 1 :]:
            kw: dict = {}
            apply(first, kw)
            apply(second, kw)
            stage = Stage.EXTRACT if ReasonCode.INPUT_CHANGED in (first, second) else Stage.MERGE
            if ReasonCode.STAGE_INPUT_CHANGED in (first, second) and stage is Stage.EXTRACT:
                continue
            recorded = kw.pop("recorded", "keep")
            rec = StageDigests(
                changed(**kw.pop("changed", {})),
                kw.pop("rec_input", "input"),
                kw.pop("rec_deps", "deps"),
            )
            f = facts(stage=stage, recorded=rec if recorded == "keep" else None, **kw)
            assert decide_stage(f) is first, (first, second)
