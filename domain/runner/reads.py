"""What each stage of a consumer lane reads of the artifacts it consumes, and its D.

A module may declare, per stage, the part of `ctx.consumed` the stage reads
(`Module.reads`). The stage then sees only that part, and its dependency digest D is
taken over the parts instead of the whole artifacts, so a producer artifact that
changed where the stage does not read keeps the stage's checkpoints (early cutoff).
The runner records each part's ref in `LaneResolved.reads`; the planner computes the
same from the checkpoints it reads, and the audit re-derives each stage's D from the
recorded refs (docs/modules.md "Declaring what a stage reads").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.domain.decisions import Stage
from runjournal.domain.identity import ArtifactRef, canonical_bytes, dependencies_digest, sha256_hex
from runjournal.domain.modules import Module, ModuleContractError, StageContext


class StageReads(msgspec.Struct, frozen=True):
    """One stage's view of what its lane consumes: what it sees and what D covers.

    `parts` is None when the stage reads every consumed artifact whole (D is then the
    lane's D); otherwise the refs of the parts it reads, each naming its producer's
    step, lane, kind, schema and media type with the part's own sha256 and size.
    """

    consumed: dict[str, dict[str, Any]]
    parts: list[ArtifactRef] | None
    digest: str


def declares_reads(module: Module) -> bool:
    """Whether the module overrides `Module.reads` (so the planner decodes what it consumes)."""
    return type(module).reads is not Module.reads


def whole(ctx: StageContext, deps: list[ArtifactRef]) -> StageReads:
    """A stage that reads every consumed artifact whole: D over the artifacts' refs."""
    return StageReads(ctx.consumed, None, dependencies_digest(deps))


def stage_reads(
    module: Module, stage: Stage, ctx: StageContext, deps: list[ArtifactRef]
) -> StageReads:
    """The module's declared view of `ctx.consumed` for `stage`, with its part refs and D.

    Raises what `reads` raises, and `ModuleContractError` for a view that names an
    artifact the lane does not consume; a part msgspec cannot encode raises its error.
    """
    if not declares_reads(module):
        return whole(ctx, deps)
    view = module.reads(stage.value, ctx)
    if view is None:
        return whole(ctx, deps)
    by_lane = {(d.step, d.lane): d for d in deps}
    consumed: dict[str, dict[str, Any]] = {}
    parts: list[ArtifactRef] = []
    for producer, lanes in view.items():
        seen = consumed.setdefault(str(producer), {})
        for lane, part in lanes.items():
            ref = by_lane.get((producer, lane))
            if ref is None:
                raise ModuleContractError(
                    f"reads({stage.value!r}) names {producer}/{lane}, which this lane "
                    "does not consume"
                )
            seen[lane] = part
            parts.append(part_ref(ref, part))
    parts.sort(key=lambda d: (d.step, d.lane))
    return StageReads(consumed, parts, dependencies_digest(parts))


def part_ref(ref: ArtifactRef, part: Any) -> ArtifactRef:
    """The ref of a part of an artifact: the producer's names, the part's canonical digest."""
    data = canonical_bytes(part)
    return msgspec.structs.replace(ref, sha256=sha256_hex(data), size=len(data))


def lane_reads(
    module: Module, ctx: StageContext, deps: list[ArtifactRef]
) -> dict[Stage, StageReads]:
    """Every stage's reads, in stage order (the first that raises stops here)."""
    return {stage: stage_reads(module, stage, ctx, deps) for stage in Stage}


def recorded_reads(reads: Mapping[Stage, StageReads]) -> dict[Stage, list[ArtifactRef]]:
    """What `LaneResolved.reads` records: the part refs of the stages that declare a part."""
    return {stage: r.parts for stage, r in reads.items() if r.parts is not None}
