"""Where a stage's checkpoint lives: the one place its scope and key are built.

A checkpoint is stored under its step identity (a digest of S), the D of what the stage
and the stages before it in the lane read, and the lane identity (docs/internals.md
"Checkpoint store"). The runner, the planner, the cache's reference walk and the
checkpoint store all build scopes here, so they agree on where a stage's result is.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from runjournal.domain.decisions import Stage
from runjournal.domain.identity import (
    LaneComponents,
    scope_dependencies,
    sha256_hex,
    step_identity,
)
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, StoreScope

_STAGES = tuple(Stage)


@functools.lru_cache(maxsize=64)
def cached_step_identity(components: LaneComponents) -> str:
    """`step_identity(components)`, cached: every checkpoint of a step carries the same S,
    and a resume compares it once per checkpoint it reads."""
    return step_identity(components)


def stage_scopes(
    components: LaneComponents,
    stage_digests: Sequence[str | None],
    lane_identity: str,
    unknown: str = "",
) -> dict[Stage, StoreScope]:
    """Each stage's scope from the D of what each stage reads (extract, merge, normalize).

    A stage's D directory covers its own D and those before it, since its input came from
    them. A D that is not known yet (None: a producer that may execute) makes that stage's
    and every later stage's directory `unknown`, the value a caller predicts under (the
    planner's "under every D stored" pass, docs/operations.md "`plan`").
    """
    sid = cached_step_identity(components)
    scopes: dict[Stage, StoreScope] = {}
    known: list[str] = []
    for i, (stage, digest) in enumerate(zip(_STAGES, stage_digests, strict=True)):
        if digest is None or len(known) < i:
            scopes[stage] = StoreScope(sid, unknown, lane_identity)
            continue
        known.append(digest)
        scopes[stage] = StoreScope(sid, scope_dependencies(known), lane_identity)
    return scopes


def checkpoint_key(
    step: str, lane: str, stage: Stage, chunk: str, scopes: dict[Stage, StoreScope]
) -> CheckpointKey:
    """The key a stage's checkpoint is looked up and written under."""
    return CheckpointKey(step, lane, stage, chunk, scopes[stage])


def scope_of(record: CheckpointRecord) -> StoreScope:
    """The scope a record is stored under: the facts its own header carries."""
    return StoreScope(
        cached_step_identity(record.digests.components),
        record.digests.dependencies,
        record.lane_identity,
    )


def call_scope_identity(scope: StoreScope) -> str:
    """What a stage's stored LLM replies are keyed under: its step identity and D (a
    reply is reusable by any lane asking the same request in the same scope)."""
    return sha256_hex(f"{scope.step_identity}\n{scope.dependencies}".encode())
