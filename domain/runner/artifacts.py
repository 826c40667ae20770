"""`Artifact`: a lane's generated artifact, its provenance and its dependency fingerprint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runjournal.domain.identity import DependencyFingerprint, sha256_hex
from runjournal.domain.modules import Module
from runjournal.domain.ports import Provenance


@dataclass
class Artifact:
    """A lane's generated artifact: identity, canonical bytes and decoded value."""

    step: str
    lane: str
    kind: str
    schema: str
    media_type: str
    data: bytes
    sha256: str
    value: Any
    warnings: list[str]

    @property
    def size(self) -> int:
        return len(self.data)

    @classmethod
    def of(
        cls, module: Module, step: str, lane: str, data: bytes, value: Any, warnings: list[str]
    ) -> Artifact:
        return cls(
            step=step,
            lane=lane,
            kind=module.artifact_kind,
            schema=module.schema,
            media_type=module.media_type,
            data=data,
            sha256=sha256_hex(data),
            value=value,
            warnings=warnings,
        )

    def provenance(self, module_fingerprint: str) -> Provenance:
        """What a normalize checkpoint records of its producer, checked on restore."""
        return Provenance(
            step=self.step,
            lane=self.lane,
            module_fingerprint=module_fingerprint,
            kind=self.kind,
            schema=self.schema,
            media_type=self.media_type,
            sha256=self.sha256,
            size=self.size,
        )

    def fingerprint(self) -> DependencyFingerprint:
        return DependencyFingerprint(
            step=self.step,
            lane=self.lane,
            kind=self.kind,
            schema=self.schema,
            media_type=self.media_type,
            sha256=self.sha256,
            size=self.size,
        )
