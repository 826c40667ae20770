"""Chunk-plan keys, the cache mode, and the accepted chunk map's entry (docs/internals.md
"Chunk-plan store and accepted chunk map").

A chunk plan is source-addressed: its key is a digest of the source's content digest, the
chunking settings and the planner fingerprint, so a plan is shared by every run and every
pipeline that splits the same bytes the same way, and a planner change is a cold miss.
The key itself is built in ``runjournal.domain.identity`` (`plan_key`, re-exported here).
Pure: the store that keeps plans is ``runjournal.adapters.chunkplans``.
"""

from __future__ import annotations

import enum

import msgspec
from runjournal.domain.chunking import PLANNER_FINGERPRINT, ChunkingSettings
from runjournal.domain.identity import is_sha256_hex, plan_key

__all__ = [
    "CacheMode",
    "ChunkMapEntry",
    "PlanFacts",
    "is_plan_key",
    "is_sha256_hex",
    "plan_key",
]


class CacheMode(enum.StrEnum):
    """How a run uses the chunk-plan store; bypass means no store is constructed at all."""

    USE = "use"
    REFRESH = "refresh"
    READ_ONLY = "read-only"
    BYPASS = "bypass"


def is_plan_key(value: object) -> bool:
    """Whether `value` may be used as a plan key (and so as a file name in the store)."""
    return is_sha256_hex(value)


class PlanFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The facts a plan is keyed by, plus the source size; recorded in the plan's header."""

    source_sha256: str
    source_size: int
    settings: ChunkingSettings
    planner_fingerprint: str = PLANNER_FINGERPRINT

    def key(self) -> str:
        return plan_key(self.source_sha256, self.settings, self.planner_fingerprint)


class ChunkMapEntry(msgspec.Struct, frozen=True):
    """One accepted chunk of a run: id, source logical name, byte span, content digest."""

    chunk_id: str
    source: str
    start: int
    end: int
    sha256: str
