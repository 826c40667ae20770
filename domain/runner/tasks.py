"""Module calls that can leave the coordinator (docs/internals.md "Executors").

`--executor processes|dask` runs module calls in other processes, possibly on other
machines. What travels is plain data, never a closure: a `StageTask` (where to find the
module, the stage's input as canonical bytes, the stage context's data) goes out, a
`StageReply` (the value's canonical bytes, or the error's text) comes back, and the
coordinator decodes the bytes with its own module's codec before accepting them
(`StageCall.accept`). The coordinator stays the only writer of the journal and the
checkpoints: a worker only computes. With a cache root every machine reaches (an
`s3://` bucket) the executor fills in a call's `CheckpointTarget`: the worker then writes
the extract or merge checkpoint itself and reads the checkpoints it needs from the bucket
(`PartRef`), and the reply carries only what the coordinator journals
(`StoredCheckpoint`): no payload round-trip through the coordinator (docs/internals.md
"Object-storage cache").

`encode_stage_value` is the one step both ends share, so a call's bytes (and so its
digest, checkpoint and decisions) are the same wherever it ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from runjournal.domain.decisions import Stage, StageDigests
from runjournal.domain.identity import ArtifactRef, canonical_bytes
from runjournal.domain.llm import FailureCause
from runjournal.domain.modules import Chunk, Normalized
from runjournal.domain.pipeline import ModuleShipment
from runjournal.domain.ports import CheckpointKey
from runjournal.domain.runner.boundary import module_warnings


class ConsumedData(msgspec.Struct, frozen=True):
    """A producer step's artifacts as a consumer reads them: decoded by its module's codec,
    then, for a module that declares `reads`, cut to the stage's part as the coordinator
    cuts it (`stage_reads`, the same module code on the same values)."""

    module: ModuleShipment
    artifacts: dict[str, bytes]  # lane -> the artifact's canonical bytes
    refs: dict[str, ArtifactRef]  # lane -> the artifact's ref


class TaskContext(msgspec.Struct, frozen=True):
    """The data of a lane's `StageContext` (no LLM runtime: LLM-backed steps stay home)."""

    step: str
    lane: str
    params: dict[str, Any]
    references: dict[str, str]
    overrides: dict[str, str]
    consumed: dict[str, ConsumedData]
    trace: bool = False  # collect `ctx.trace` records and send them back


class SharedCache(msgspec.Struct, frozen=True):
    """A cache root every worker reaches itself: the bucket's identity (never a
    credential: a worker has its own) and the pipeline's workspace in it. Set on a task
    by an executor whose cache root is a bucket."""

    url: str  # s3://bucket/prefix
    endpoint: str
    pipeline: str


class CheckpointTarget(msgspec.Struct, frozen=True):
    """What a worker writes for its call in the `SharedCache`: the checkpoint's key and
    every field of its record but the payload (the lane's, known before the call)."""

    key: CheckpointKey
    codec_id: str
    lane_identity: str
    digests: StageDigests


class PartRef(msgspec.Struct, frozen=True):
    """A checkpoint a worker reads from the bucket itself: its key, codec and the output
    digest the coordinator journaled (what it must hold)."""

    key: CheckpointKey
    codec_id: str
    sha256: str


class StoredCheckpoint(msgspec.Struct, frozen=True):
    """What a worker wrote: the envelope's sha256 and size (as a recorder returns them)
    and the payload's. `error` is set when it could not be verified or written."""

    sha256: str
    size: int
    output_sha256: str
    output_size: int
    error: str | None = None


class StageTask(msgspec.Struct, frozen=True):
    """One module call as a worker runs it; exactly one of the inputs is set per stage."""

    module: ModuleShipment
    stage: Stage
    chunk_id: str
    context: TaskContext
    chunk: Chunk | None = None  # extract
    parts: list[bytes] = msgspec.field(default_factory=list)  # merge: extract results
    merged: bytes | None = None  # normalize: the merged value
    cache: SharedCache | None = None  # the worker reads and writes checkpoints there
    checkpoint: CheckpointTarget | None = None  # with `cache`: write the result's checkpoint
    part_refs: list[PartRef | None] = msgspec.field(default_factory=list)  # merge: read these
    merged_ref: PartRef | None = None  # normalize: read the merged value there


class StageReply(msgspec.Struct, frozen=True):
    """What a worker sends back: the value's canonical bytes, or why there is none.

    `error` is the module's exception as `Type: message` (unredacted: the coordinator
    redacts and bounds it as it does a local one); `cause` is set when the failure is the
    worker's rather than the module's (`module_unavailable`, `worker_lost`).
    """

    data: bytes | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    error: str | None = None
    cause: FailureCause | None = None
    traceback: str | None = None
    trace: list[tuple[str, Any]] = msgspec.field(default_factory=list)
    stored: StoredCheckpoint | None = None  # written by the worker: `data` is then None


def encode_stage_value(stage: Stage, value: Any) -> tuple[bytes, list[str]]:
    """A module's return value as it is kept: canonical bytes, and normalize's warnings.

    Raises whatever the module's value makes fail (the caller's boundary catches it).
    """
    if stage is Stage.NORMALIZE:
        if not isinstance(value, Normalized):
            raise TypeError("normalize() must return Normalized(value, warnings)")
        return canonical_bytes(value.value), module_warnings(value.warnings)
    return canonical_bytes(value), []


@dataclass
class StageCall:
    """One module call as the scheduler submits it.

    Calling it runs the module here (the thread executor). `task` builds the call's
    `StageTask` for a worker, or is None when the call must run in the coordinator (an
    LLM-backed step, whose endpoint limits are the coordinator's; a module with no
    shipment). `accept` turns a worker's reply into the same outcome a local call
    returns, decoding with the coordinator's codec; both are used on the scheduler's thread.
    """

    run: Callable[[], Any]
    task: Callable[[], StageTask] | None = None
    accept: Callable[[StageReply], Any] | None = None

    def __call__(self) -> Any:
        return self.run()
