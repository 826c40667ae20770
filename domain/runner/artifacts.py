"""`Artifact`: a lane's generated artifact, its identity (`ArtifactRef`) and provenance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runjournal.domain.identity import ArtifactRef, sha256_hex
from runjournal.domain.modules import Module
from runjournal.domain.ports import Provenance


@dataclass
class Artifact:
    """A lane's generated artifact: its ref, canonical bytes, decoded value and warnings."""

    ref: ArtifactRef
    data: bytes
    value: Any
    warnings: list[str]

    @property
    def step(self) -> str:
        return self.ref.step

    @property
    def lane(self) -> str:
        return self.ref.lane

    @classmethod
    def of(
        cls, module: Module, step: str, lane: str, data: bytes, value: Any, warnings: list[str]
    ) -> Artifact:
        ref = ArtifactRef(
            step=step,
            lane=lane,
            kind=module.artifact_kind,
            schema=module.schema,
            media_type=module.media_type,
            sha256=sha256_hex(data),
            size=len(data),
        )
        return cls(ref=ref, data=data, value=value, warnings=warnings)

    def provenance(self, module_fingerprint: str) -> Provenance:
        """What a normalize checkpoint records of its producer, checked on restore."""
        return Provenance.of(self.ref, module_fingerprint)
