"""Selective recomputation: restoring a required step's lane from its accepted artifact."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
from runjournal.domain.decisions import (
    CheckpointState,
    PredecessorState,
    Stage,
    StageDigests,
    StageFacts,
)
from runjournal.domain.identity import codec_id
from runjournal.domain.pipeline import ResolvedStep
from runjournal.domain.ports import CheckpointLoaderPort, CheckpointRecord
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import is_interrupt, module_warnings
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.stage_failures import StageFailure


class Restoration(NamedTuple):
    """What restoring a lane's accepted artifact found, and the facts it is decided from."""

    state: PredecessorState
    record: CheckpointRecord | None
    artifact: Artifact | None  # only when the state is RESTORED
    facts: StageFacts


def restoration(
    loader: CheckpointLoaderPort | None, step: ResolvedStep, lane: str, lid: str
) -> Restoration:
    """The restore checks of a required step's lane (docs/operations.md "Selective
    recomputation"): the accepted normalize checkpoint, its value decoded by the module's
    codec, its provenance matching the producer. The runner and the planner both ask here."""
    module = step.module
    codec = codec_id(module, Stage.NORMALIZE)
    state = PredecessorState.MISSING
    record = None
    value: Any = None
    if loader is not None:
        restored = loader.load_accepted_artifact(step.id, lane, lid, codec)
        state, record = restored.state, restored.record
    if state is PredecessorState.RESTORED and record is not None:
        try:
            value = msgspec.json.decode(record.payload, type=module.artifact_type)
        except BaseException as exc:  # the codec refused it, or the module's type raised
            if is_interrupt(exc):
                raise
            state = PredecessorState.CORRUPT
    artifact: Artifact | None = None
    if state is PredecessorState.RESTORED and record is not None:
        warnings = module_warnings(record.warnings)  # bounded if recorded before
        artifact = Artifact.of(module, step.id, lane, record.payload, value, warnings)
        if record.provenance != artifact.provenance(module.fingerprint):
            state = PredecessorState.PROVENANCE_INVALID
            artifact = None
    facts = StageFacts(
        stage=Stage.NORMALIZE,
        resumed=loader is not None,
        predecessor=state,
        checkpoint=CheckpointState.PRESENT
        if state is PredecessorState.RESTORED
        else CheckpointState.NOT_LOOKED_UP,
        current=StageDigests(step.components, "", ""),
    )
    return Restoration(state, record, artifact, facts)


def restore_lane(
    ledger: RunLedger,
    loader: CheckpointLoaderPort | None,
    step: ResolvedStep,
    lane: str,
    lid: str,
) -> Artifact:
    """Restore an unforced step's accepted normalize artifact, or fail naming the reason."""
    found = restoration(loader, step, lane, lid)
    code = ledger.decide(step.id, lane, "", found.facts)
    if found.artifact is None:
        raise StageFailure(
            step.id,
            lane,
            code,
            f"required predecessor step '{step.id}' lane '{lane}' cannot be restored: {code.value}",
        )
    ledger.artifact(found.artifact, restored=True)
    return found.artifact
