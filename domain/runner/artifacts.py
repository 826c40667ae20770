"""`Artifact`: a lane's generated artifact, its identity (`ArtifactRef`) and provenance."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from runjournal.domain.identity import ArtifactRef, sha256_hex
from runjournal.domain.modules import Module
from runjournal.domain.ports import Provenance, Spool


def _decoder(artifact_type: Any) -> Callable[[bytes], Any]:
    """One decoder per artifact type, shared by the lanes of its steps (not one per lane)."""
    try:
        return _shared_decoder(artifact_type)
    except TypeError:  # an unhashable type
        return functools.partial(msgspec.json.decode, type=artifact_type)


@functools.lru_cache(maxsize=64)
def _shared_decoder(artifact_type: Any) -> Callable[[bytes], Any]:
    return functools.partial(msgspec.json.decode, type=artifact_type)


@dataclass(slots=True)  # one per lane, held to the run's end (issue 29: peak RSS)
class Artifact:
    """A lane's generated artifact: its ref, canonical bytes, decoded value and warnings."""

    ref: ArtifactRef
    data: bytes
    held: Any  # the decoded value, while it is kept (`lean` lets it go)
    warnings: list[str]
    decode: Callable[[bytes], Any] | None = None  # after `lean`: how `value` is made again
    load: Callable[[], bytes] | None = None  # after `lean` with a spool: how `data` is read

    @property
    def value(self) -> Any:
        """The decoded value: the one kept, or decoded from the bytes each time it is
        asked for once the artifact is `lean`."""
        return self.held if self.decode is None else self.decode(self.payload())

    def payload(self) -> bytes:
        """The canonical bytes: `data`, or read back from the spool they were set aside in."""
        return self.data if self.load is None else self.load()

    def lean(self, artifact_type: Any, spool: Spool | None = None) -> Artifact:
        """This artifact without its decoded value, which `value` decodes again from the
        bytes when asked: a run holds every lane's artifact until its outputs are written,
        and the decoded form of a lane that no other step consumes is asked for once, by
        `outputs`, while it takes several times the bytes' memory (issue 29: peak RSS;
        docs/internals.md "The runner"). With a `spool` the bytes are set aside there
        too, and the artifact keeps only its ref and their handle."""
        decode = _decoder(artifact_type)
        if spool is None:
            return dataclasses.replace(self, held=None, decode=decode)
        load = functools.partial(spool.get, spool.put(self.data))
        return dataclasses.replace(self, data=b"", held=None, decode=decode, load=load)

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
        return cls(ref=ref, data=data, held=value, warnings=warnings)

    def provenance(self, module_fingerprint: str) -> Provenance:
        """What a normalize checkpoint records of its producer, checked on restore."""
        return Provenance.of(self.ref, module_fingerprint)
