"""Stage leases: one run executes a stage at a time (docs/operations.md "Concurrent runs").

Before a run executes a stage it could reuse on a resume, it takes the stage's lease in
the cache root. A second run that needs the same stage waits for the lease, then looks
the checkpoint up again and reuses what the first run wrote: an LLM step is not
deterministic, so two runs must not both pay for it. The lease is the lane's (`lane_lease`:
the place of its extracts, `CheckpointKey` with their scope), taken by each of its stages
that executes and held by the lane until it ends, so only the runs that would write
checkpoints of the same lane contend. Reused stages take no lease.
"""

from __future__ import annotations

from typing import Protocol

import msgspec
from runjournal.domain.decisions import Stage
from runjournal.domain.events import LeaseWaitOutcome
from runjournal.domain.ports import CheckpointKey, StoreScope

__all__ = [
    "LANE_WIDE_CHUNK",
    "Lease",
    "LeaseRefused",
    "LeaseWait",
    "LeaseWaitOutcome",
    "StageLeases",
    "lane_lease",
]

# The pseudo-chunk of a lane's lease: no chunk's sha256.
LANE_WIDE_CHUNK = "0" * 64


def lane_lease(step: str, lane: str, scope: StoreScope | None) -> CheckpointKey:
    """The lease every stage of a lane takes: the place of the lane's extracts (`scope`,
    the extract stage's: its step identity and D, whatever the document's version).

    A later stage's scope covers the extract's D (docs/internals.md "Checkpoint store"),
    so two runs that would write the same checkpoint of any stage of the lane take this
    same lease. One lease a lane rather than one a stage: a lane takes the kernel's lock
    once, and its other stages count on it (a twin's share, no system call), where each
    stage cost two `fcntl` calls on the scheduler's thread (docs/performance.md "A lease
    per lane, intents written a batch at a time"); and a lane of 25,000 chunks holds one
    lock, not one per chunk (issue 29).
    """
    return CheckpointKey(step, lane, Stage.EXTRACT, LANE_WIDE_CHUNK, scope)


class LeaseWait(msgspec.Struct, frozen=True):
    """A wait for a lease another run held: who held it and how the wait ended."""

    holder: str  # the other run's id, or "pid N" when it cannot be named
    outcome: LeaseWaitOutcome


class LeaseRefused(Exception):
    """`lease_wait = fail`: another run holds the lease, and this run does not wait."""

    def __init__(self, key: CheckpointKey, holder: str) -> None:
        where = f"step '{key.step}' lane '{key.lane}'"
        if key.chunk != LANE_WIDE_CHUNK:
            where += f" {key.stage.value}"
        if key.chunk and key.chunk != LANE_WIDE_CHUNK:
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
