"""Module calls that can leave the coordinator (docs/internals.md "Executors").

`--executor processes|dask` runs module calls in other processes, possibly on other
machines. What travels is plain data, never a closure: a `StageTask` (where to find the
module, the stage's input as canonical bytes, the stage context's data) goes out, a
`StageReply` (the value's canonical bytes, or the error's text) comes back, and the
coordinator decodes the bytes with its own module's codec before accepting them
(`StageCall.accept`). The coordinator stays the only writer of the journal and the
checkpoints: a worker only computes.

`encode_stage_value` is the one step both ends share, so a call's bytes (and so its
digest, checkpoint and decisions) are the same wherever it ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from runjournal.domain.decisions import Stage
from runjournal.domain.identity import ArtifactRef, canonical_bytes
from runjournal.domain.llm import FailureCause
from runjournal.domain.modules import Chunk, Normalized
from runjournal.domain.pipeline import ModuleShipment
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


class StageTask(msgspec.Struct, frozen=True):
    """One module call as a worker runs it; exactly one of the inputs is set per stage."""

    module: ModuleShipment
    stage: Stage
    chunk_id: str
    context: TaskContext
    chunk: Chunk | None = None  # extract
    parts: list[bytes] = msgspec.field(default_factory=list)  # merge: extract results
    merged: bytes | None = None  # normalize: the merged value


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
