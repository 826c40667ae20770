"""Stage leases: one run executes a stage at a time (docs/operations.md "Concurrent runs").

Before a run executes a stage it could reuse on a resume, it takes the stage's lease in
the cache root. A second run that needs the same stage waits for the lease, then looks
the checkpoint up again and reuses what the first run wrote: an LLM step is not
deterministic, so two runs must not both pay for it. The lease is the checkpoint's place
(`CheckpointKey` with its scope), so only the runs that would write the same checkpoint
contend. Reused stages take no lease.
"""

from __future__ import annotations

from typing import Protocol

import msgspec
from runjournal.domain.decisions import Stage
from runjournal.domain.events import LeaseWaitOutcome
from runjournal.domain.ports import CheckpointKey

__all__ = [
    "LANE_WIDE_CHUNK",
    "LANE_WIDE_CHUNKS",
    "Lease",
    "LeaseRefused",
    "LeaseWait",
    "LeaseWaitOutcome",
    "StageLeases",
    "lease_key",
]

# A lane of more chunks than this leases its extracts as one lease of the lane
# (docs/operations.md "Concurrent runs"). A lane decides every extract before it executes
# any, so it holds a lease per missing chunk at once, and the kernel keeps a process's
# record locks on a file in one list it walks on every lock: 25,000 leases of a 25 MB
# document made each cost O(held), and its first stage came after 39 s (issue 29).
LANE_WIDE_CHUNKS = 1024
# The pseudo-chunk whose checkpoint place is the lane-wide lease: no chunk's sha256.
LANE_WIDE_CHUNK = "0" * 64


def lease_key(key: CheckpointKey, lane_chunks: int) -> CheckpointKey:
    """The lease a stage takes: its own place, or for an extract of a lane of more than
    `LANE_WIDE_CHUNKS` chunks the lane's (the same step identity and D, whatever the
    document's version, so two runs of the lane still never execute a chunk both)."""
    if key.stage is Stage.EXTRACT and lane_chunks > LANE_WIDE_CHUNKS:
        return msgspec.structs.replace(key, chunk=LANE_WIDE_CHUNK)
    return key


class LeaseWait(msgspec.Struct, frozen=True):
    """A wait for a lease another run held: who held it and how the wait ended."""

    holder: str  # the other run's id, or "pid N" when it cannot be named
    outcome: LeaseWaitOutcome


class LeaseRefused(Exception):
    """`lease_wait = fail`: another run holds the lease, and this run does not wait."""

    def __init__(self, key: CheckpointKey, holder: str) -> None:
        where = f"step '{key.step}' lane '{key.lane}' {key.stage.value}"
        if key.chunk == LANE_WIDE_CHUNK:
            where += "s"
        elif key.chunk:
            where += f" chunk {key.chunk[:12]}"
        super().__init__(
            f"{where} is being executed by run {holder}; not waiting for it (--lease-wait fail)"
        )
        self.key = key
        self.holder = holder


class Lease(Protocol):
    """A taken lease (or a pass without one); `release` is idempotent."""

    def release(self) -> None: ...


class StageLeases(Protocol):
    """The run's leases on stages it executes (an adapter over the cache root)."""

    def acquire(self, key: CheckpointKey) -> tuple[Lease, LeaseWait | None]:
        """Take `key`'s lease, waiting while another run holds it.

        Returns the lease and, when another run held it, how the wait ended (None: it
        was free, or this run already holds it for a twin stage). Raises `LeaseRefused`
        instead of waiting when the run was told not to wait.
        """
        ...

    def try_acquire(self, key: CheckpointKey) -> Lease | None:
        """Take `key`'s lease if it is free, never waiting (None: another run holds it).

        For a stage that executes whatever it finds (a run that does not resume, a forced
        step): it holds the lease so a resuming run waits for it, and waits for nobody.
        """
        ...
