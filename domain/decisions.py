"""The one pure function that decides every stage, and the facts it decides from.

The runner builds `StageFacts`, calls `decide_stage`, and records the facts in the
`StageDecided` event; the journal audit rebuilds the same facts from the events and
calls the same function, so any difference between a recorded code and its facts shows.
"""

from __future__ import annotations

import enum

import msgspec
from runjournal.domain.identity import COMPONENT_ORDER, LaneComponents
from runjournal.domain.reasons import ReasonCode


class Stage(enum.StrEnum):
    EXTRACT = "extract"
    MERGE = "merge"
    NORMALIZE = "normalize"


class CheckpointState(enum.StrEnum):
    """What the loader found for the stage's scope (typed at the validation site)."""

    NOT_LOOKED_UP = "not_looked_up"
    MISSING = "missing"
    # No checkpoint for this chunk, but the lane was recorded before (its merge
    # checkpoint carries the recorded components): the chunk's bytes are new.
    LANE_ONLY = "lane_only"
    PRESENT = "present"
    CORRUPT = "corrupt"
    SCHEMA_UNSUPPORTED = "schema_unsupported"
    CODEC_MISMATCH = "codec_mismatch"


class PredecessorState(enum.StrEnum):
    """Outcome of restoring a required producer's accepted normalize artifact."""

    RESTORED = "restored"
    MISSING = "missing"
    IDENTITY_MISMATCH = "identity_mismatch"
    CORRUPT = "corrupt"
    PROVENANCE_INVALID = "provenance_invalid"


class StageDigests(msgspec.Struct, frozen=True):
    """The compared components of one stage: S, the stage input and D."""

    components: LaneComponents
    input: str
    dependencies: str


class StageFacts(msgspec.Struct, frozen=True, kw_only=True):
    stage: Stage
    forced: bool = False
    resumed: bool = False
    failed: bool = False
    predecessor: PredecessorState | None = None
    checkpoint: CheckpointState = CheckpointState.NOT_LOOKED_UP
    current: StageDigests
    recorded: StageDigests | None = None


_COMPONENT_CODES: dict[str, ReasonCode] = {
    "config": ReasonCode.CONFIG_CHANGED,
    "module": ReasonCode.MODULE_CHANGED,
    "validators": ReasonCode.VALIDATOR_CHANGED,
    "references": ReasonCode.REFERENCES_CHANGED,
    "overrides": ReasonCode.OVERRIDES_CHANGED,
    "profile": ReasonCode.PROFILE_CHANGED,
    "profile_source": ReasonCode.PROFILE_SOURCE_CHANGED,
}

_CHECKPOINT_CODES: dict[CheckpointState, ReasonCode] = {
    CheckpointState.MISSING: ReasonCode.CHECKPOINT_MISSING,
    CheckpointState.NOT_LOOKED_UP: ReasonCode.CHECKPOINT_MISSING,
    CheckpointState.CORRUPT: ReasonCode.CHECKPOINT_CORRUPT,
    CheckpointState.SCHEMA_UNSUPPORTED: ReasonCode.SCHEMA_UNSUPPORTED,
    CheckpointState.CODEC_MISMATCH: ReasonCode.CODEC_MISMATCH,
}

_PREDECESSOR_CODES: dict[PredecessorState, ReasonCode] = {
    PredecessorState.RESTORED: ReasonCode.PREDECESSOR_REUSED,
    PredecessorState.MISSING: ReasonCode.PREDECESSOR_MISSING,
    PredecessorState.IDENTITY_MISMATCH: ReasonCode.PREDECESSOR_IDENTITY_MISMATCH,
    PredecessorState.CORRUPT: ReasonCode.PREDECESSOR_CORRUPT,
    PredecessorState.PROVENANCE_INVALID: ReasonCode.PREDECESSOR_PROVENANCE_INVALID,
}

REUSE_CODES = frozenset({ReasonCode.REUSED, ReasonCode.PREDECESSOR_REUSED})

# docs/operations.md "Decision order": the first rule that applies wins (input_changed is the
# extract stage's name for stage_input_changed). docs/operations.md lists the same order; a test
# compares.
DECISION_ORDER: tuple[ReasonCode, ...] = (
    ReasonCode.FORCED_RECOMPUTE,
    ReasonCode.NOT_RESUMED,
    ReasonCode.CHECKPOINT_MISSING,
    ReasonCode.CHECKPOINT_CORRUPT,
    ReasonCode.SCHEMA_UNSUPPORTED,
    ReasonCode.CODEC_MISMATCH,
    *(_COMPONENT_CODES[name] for name in COMPONENT_ORDER),
    ReasonCode.INPUT_CHANGED,
    ReasonCode.STAGE_INPUT_CHANGED,
    ReasonCode.DEPENDENCY_INVALIDATED,
    ReasonCode.REUSED,
)


def decide_stage(facts: StageFacts) -> ReasonCode:
    """docs/operations.md "Decision order": the first rule that applies wins."""
    if facts.failed:
        return ReasonCode.STAGE_FAILED
    if facts.predecessor is not None:
        return _PREDECESSOR_CODES[facts.predecessor]
    if facts.forced:
        return ReasonCode.FORCED_RECOMPUTE
    if not facts.resumed:
        return ReasonCode.NOT_RESUMED
    if facts.checkpoint in _CHECKPOINT_CODES:
        return _CHECKPOINT_CODES[facts.checkpoint]
    recorded = facts.recorded
    if recorded is None:
        return ReasonCode.CHECKPOINT_MISSING
    current = facts.current
    if recorded.components != current.components:  # one C-level comparison when equal
        for name in COMPONENT_ORDER:
            if getattr(recorded.components, name) != getattr(current.components, name):
                return _COMPONENT_CODES[name]
    if facts.checkpoint is CheckpointState.LANE_ONLY or recorded.input != current.input:
        if facts.stage is Stage.EXTRACT:
            return ReasonCode.INPUT_CHANGED
        return ReasonCode.STAGE_INPUT_CHANGED
    if recorded.dependencies != current.dependencies:
        return ReasonCode.DEPENDENCY_INVALIDATED
    return ReasonCode.REUSED


def recorded_differences(facts: StageFacts) -> dict[str, str]:
    """The recorded digests that differ from the current ones (what an event stores)."""
    rec = facts.recorded
    if rec is None or rec == facts.current:  # a reused stage: nothing differs
        return {}
    cur = facts.current
    out: dict[str, str] = {}
    for name in COMPONENT_ORDER:
        value = getattr(rec.components, name)
        if value != getattr(cur.components, name):
            out[name] = value
    if rec.input != cur.input:
        out["input"] = rec.input
    if rec.dependencies != cur.dependencies:
        out["dependencies"] = rec.dependencies
    return out


def lane_only_digests(merge_recorded: StageDigests, dependencies: str) -> StageDigests:
    """The recorded digests of an extract with no checkpoint, from its lane's merge record.

    The merge records its own D, which is not the extract's when a module declares what
    each stage reads; the decision never reaches D (`lane_only` is `input_changed`), so
    the extract's current D stands in and no false "dependencies differ" is recorded.
    """
    return msgspec.structs.replace(merge_recorded, dependencies=dependencies)


def with_differences(current: StageDigests, differences: dict[str, str]) -> StageDigests:
    """Rebuild the recorded digests from the current ones and the stored differences."""
    comp = {
        name: differences.get(name, getattr(current.components, name)) for name in COMPONENT_ORDER
    }
    return StageDigests(
        components=LaneComponents(**comp),
        input=differences.get("input", current.input),
        dependencies=differences.get("dependencies", current.dependencies),
    )
