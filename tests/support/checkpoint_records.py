"""`CheckpointRecord`s for the checkpoint store tests (adapters/checkpoints.py): a payload
and its digest, and the stage digests of a given set of lane components."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from runjournal.domain.decisions import StageDigests
from runjournal.domain.identity import LaneComponents
from runjournal.domain.ports import CheckpointRecord, Provenance

IDENTITY = "1" * 64
CODEC = "terms:normalize:v1"
PAYLOAD = b'{"terms":["alpha","beta"]}'


def record_maker(components: LaneComponents) -> Callable[..., CheckpointRecord]:
    """`make_record(payload, codec_id=, lane_identity=, warnings=, provenance=, digests=)`
    whose digests default to `components`, input `2` * 64 and no dependencies."""

    def make_record(
        payload: bytes = PAYLOAD,
        *,
        codec_id: str = CODEC,
        lane_identity: str = IDENTITY,
        warnings: list[str] | None = None,
        provenance: Provenance | None = None,
        digests: StageDigests | None = None,
    ) -> CheckpointRecord:
        return CheckpointRecord(
            codec_id=codec_id,
            lane_identity=lane_identity,
            digests=digests or StageDigests(components, "2" * 64, ""),
            output_sha256=hashlib.sha256(payload).hexdigest(),
            payload=payload,
            warnings=warnings if warnings is not None else ["short paragraph"],
            provenance=provenance,
        )

    return make_record
