"""A lane reused as a whole: every checkpoint loaded in one call, no decision walked.

Before a resumed lane walks its stages (`LaneRun._run`), `reuse_lane` asks the loader
for all of the lane's checkpoints at once (`LaneLoaderPort.load_lane`: one index read,
one read and one digest check per record). When every one is present under the lane's
own scope, records this run's lane identity and exactly the current digests of its stage
(S, input, D), each decision the walk would take is a plain reuse
(`domain/lane_reuse.py` `plain_reuse`), so the lane is journaled as the one
`lane_reused` call a buffered lane's plain reuses are replayed as
(`BufferedRecorder.replay_summarized`), with the same items in the same order, and
its artifact is the normalize checkpoint's payload. Anything else (a missing, corrupt
or unreadable record, another identity, a digest that differs) returns None and the
lane walks its stages as it always did, so what is detected and recomputed is the walk's
(docs/internals.md "Reusing a lane as a whole").

Pure: the loader is a port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import msgspec
from runjournal.domain.decisions import Stage, StageDigests
from runjournal.domain.identity import codec_id, sequence_digest
from runjournal.domain.lane_reuse import Reused, ReusedStage, ReusedUsage
from runjournal.domain.modules import Chunk
from runjournal.domain.ports import CheckpointKey, CheckpointRecord
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import is_interrupt, module_warnings
from runjournal.domain.runner.ledger import BufferedRecorder

if TYPE_CHECKING:
    from runjournal.domain.runner.lanes import LaneRun


class LaneLoaderPort(Protocol):
    """A loader that reads a lane's checkpoints in one call."""

    def load_lane(
        self, keys: list[CheckpointKey], codecs: list[str], payloads: list[bool]
    ) -> list[CheckpointRecord] | None:
        """Each key's record, verified as `load` verifies it (`payloads[i]` False: its
        payload neither read nor hashed, as `load(payload=False)`), when every key has
        its own intact record of its codec; None otherwise."""
        ...


def whole_lane_loader(run: LaneRun) -> LaneLoaderPort | None:
    """The loader a lane may be reused as a whole through, or None: a resumed, unforced
    lane whose records are held for replay (the journal then summarizes them)."""
    loader = run.services.loader
    if loader is None or run.forced or not run.resumed:
        return None
    if not isinstance(run.ledger.journal, BufferedRecorder):
        return None
    return getattr(loader, "load_lane", None) and loader  # type: ignore[return-value]


def reuse_lane(run: LaneRun, chunks: list[Chunk]) -> Artifact | None:
    """The lane's artifact with every stage reused and journaled as one summary; None
    (nothing journaled) when any stage would not be a plain reuse."""
    loader = whole_lane_loader(run)
    if loader is None:
        return None
    step, module, scopes, lid = run.step, run.module, run.scopes, run.lid
    step_id, lane = step.id, run.lane
    defers = run.defers
    keys = [
        CheckpointKey(step_id, lane, Stage.EXTRACT, c.id, scopes[Stage.EXTRACT]) for c in chunks
    ]
    keys.append(CheckpointKey(step_id, lane, Stage.MERGE, "", scopes[Stage.MERGE]))
    keys.append(CheckpointKey(step_id, lane, Stage.NORMALIZE, "", scopes[Stage.NORMALIZE]))
    n = len(chunks)
    extract_codec = codec_id(module, Stage.EXTRACT)
    codecs = [extract_codec] * n
    codecs += [codec_id(module, Stage.MERGE), codec_id(module, Stage.NORMALIZE)]
    payloads = [not defers] * (n + 1) + [True]
    records = loader.load_lane(keys, codecs, payloads)
    if records is None or len(records) != n + 2:
        return None
    components = step.components
    reads = run.reads
    items: list[Reused] = []
    add = items.append
    d = reads[Stage.EXTRACT].digest or ""
    outputs: list[str] = []
    for chunk, record in zip(chunks, records, strict=False):
        cid = chunk.id
        recorded = record.digests  # `StageDigests(components, cid, d)`, field by field
        if (
            record.lane_identity != lid
            or recorded.input != cid
            or recorded.dependencies != d
            or recorded.components != components
        ):
            return None
        outputs.append(record.output_sha256)
        add(ReusedStage(Stage.EXTRACT, cid, cid, d))
        if record.usage:
            add(ReusedUsage(Stage.EXTRACT, cid, record.usage))
    merge, norm = records[n], records[n + 1]
    stage_input = sequence_digest(outputs)
    for stage, record in ((Stage.MERGE, merge), (Stage.NORMALIZE, norm)):
        d = reads[stage].digest or ""
        if record.lane_identity != lid or record.digests != StageDigests(
            components, stage_input, d
        ):
            return None
        add(ReusedStage(stage, "", stage_input, d))
        if record.usage:
            add(ReusedUsage(stage, "", record.usage))
        stage_input = record.output_sha256
    try:  # what the walk's reused normalize does; a failure there: the walk says it
        value = msgspec.json.decode(norm.payload, type=module.artifact_type)
        warnings = module_warnings(norm.warnings)
    except BaseException as exc:
        if is_interrupt(exc):
            raise
        return None
    run.ledger.journal.lane_reused(step=step_id, lane=lane, stages=items)
    return Artifact.of(module, step_id, lane, norm.payload, value, warnings)
