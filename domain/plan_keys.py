"""Chunk-plan keys, the cache mode, and the accepted chunk map's entry (docs/internals.md
"Chunk-plan store and accepted chunk map").

A chunk plan is source-addressed: its key is a digest of the source's content digest, the
chunking settings and the planner fingerprint, so a plan is shared by every run and every
pipeline that splits the same bytes the same way, and a planner change is a cold miss.
Pure: the store that keeps plans is ``runjournal.adapters.chunkplans``.
"""

from __future__ import annotations

import enum
import hashlib
import re

import msgspec
from runjournal.domain.chunking import PLANNER_FINGERPRINT, ChunkingSettings

__all__ = [
    "CacheMode",
    "ChunkMapEntry",
    "PlanFacts",
    "is_plan_key",
    "is_sha256_hex",
    "plan_key",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_ENCODER = msgspec.json.Encoder(order="deterministic")


class CacheMode(enum.StrEnum):
    """How a run uses the chunk-plan store; bypass means no store is constructed at all."""

    USE = "use"
    REFRESH = "refresh"
    READ_ONLY = "read-only"
    BYPASS = "bypass"


class _KeyMaterial(msgspec.Struct, frozen=True):
    """What a plan key hashes; field names are part of the key, so never rename them."""

    planner_fingerprint: str
    settings: ChunkingSettings
    source_sha256: str


def is_sha256_hex(value: object) -> bool:
    """A 64-character lowercase hex digest (the only form keys and digests take)."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def is_plan_key(value: object) -> bool:
    """Whether `value` may be used as a plan key (and so as a file name in the store)."""
    return is_sha256_hex(value)


def plan_key(
    source_sha256: str,
    settings: ChunkingSettings,
    planner_fingerprint: str = PLANNER_FINGERPRINT,
) -> str:
    """sha256 over the canonical JSON of the three facts that determine a plan."""
    if not is_sha256_hex(source_sha256):
        raise ValueError("source_sha256 must be 64 lowercase hex characters")
    if not isinstance(settings, ChunkingSettings):
        raise TypeError("settings must be ChunkingSettings")
    if not isinstance(planner_fingerprint, str) or not planner_fingerprint:
        raise ValueError("planner_fingerprint must be a non-empty string")
    settings.validate()
    material = _KeyMaterial(planner_fingerprint, settings, source_sha256)
    return hashlib.sha256(_ENCODER.encode(material)).hexdigest()


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
