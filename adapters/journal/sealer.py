"""Seals: signed checkpoints of a run's Merkle tree, made and checked (docs/operations.md
"Signed checkpoints", docs/internals.md "Merkle tree and signed checkpoints").

The tree's leaves are the run's events, each hashed as the chain's entry (run, version,
type, content), so the tree is the same however events were packed into rows, in
SQLite, PostgreSQL or an import; it adds the proofs a chain cannot give (a published
checkpoint is a prefix of today's history; one event is in it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec
from runjournal.domain.merkle import Frontier, root_of
from runjournal.domain.seal import origin
from runjournal.domain.signed_note import (
    Checkpoint,
    NoteError,
    checkpoint_text,
    parse_checkpoint,
    parse_note,
    signed_note,
)

if TYPE_CHECKING:
    from runjournal.adapters.signing import Signer, TrustedKey
    from runjournal.domain.events import RunSealed

__all__ = ["SealCheck", "SealStatus", "Sealer", "check_seals", "note_for"]


class Sealer:
    """What the journal seals runs with: a signer, loaded on first use, or none."""

    def __init__(self, load: Callable[[], Signer | None] = lambda: None) -> None:
        self._load = load
        self._signer: Signer | None = None
        self._loaded = False

    @property
    def signer(self) -> Signer | None:
        if not self._loaded:
            self._signer, self._loaded = self._load(), True
        return self._signer


def note_for(run_id: str, size: int, root: bytes, signer: Signer | None) -> str:
    """The checkpoint text, signed when there is a signer."""
    text = checkpoint_text(Checkpoint(origin=origin(run_id), size=size, root=root))
    return signed_note(text, [signer.sign(text)]) if signer is not None else text


def frontier_of(leaves: Sequence[bytes]) -> Frontier:
    frontier = Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    return frontier


class SealStatus(enum.StrEnum):
    SIGNED = "signed"  # every seal holds, the last covers every row, signed by a trusted key
    SEALED = "sealed"  # every seal holds and the last covers every row (not by a trusted key)
    UNSEALED = "unsealed"  # no seal, and none is due (older version, or still running)
    TAMPERED = "tampered"  # a seal that does not hold, or one that is due and missing


class SealCheck(msgspec.Struct, frozen=True, kw_only=True):
    status: SealStatus
    seals: int
    size: int  # events in the run's tree now
    root: str | None
    signers: list[str]  # names of the keys whose signatures verified
    problems: list[str]


def check_seals(
    run_id: str,
    leaves: list[bytes],
    seals: Sequence[RunSealed],
    *,
    due: bool,
    trusted: Sequence[TrustedKey],
    started: datetime | None,
) -> SealCheck:
    """Check a run's seals against its events' leaves.

    `due`: this run's writer always seals (and it ended); `trusted`: the keys the
    auditor knows, each of which signs every run started after it was made.
    """
    from runjournal.adapters.signing import trusted_key_for, verify

    problems: list[str] = []
    signers: list[str] = []
    size = len(leaves)
    root = root_of(leaves).hex() if leaves else None
    for seal in seals:
        where = f"seal {seal.originator_version} ({seal.reason.value})"
        try:
            text, signatures = parse_note(seal.note) if "\n\n" in seal.note else (seal.note, [])
            checkpoint = parse_checkpoint(text)
        except NoteError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if checkpoint.origin != origin(run_id):
            problems.append(f"{where}: it is a checkpoint of {checkpoint.origin!r}")
            continue
        if checkpoint.size != seal.size or checkpoint.root.hex() != seal.root:
            problems.append(f"{where}: its note and its recorded size or root differ")
        if checkpoint.size > len(leaves):
            problems.append(
                f"{where}: it covers {checkpoint.size} events, the run has {len(leaves)} "
                "(events were deleted)"
            )
        elif root_of(leaves[: checkpoint.size]) != checkpoint.root:
            problems.append(
                f"{where}: the run's first {checkpoint.size} events do not have its root hash "
                "(an event was changed, inserted, deleted or reordered)"
            )
        for signature in signatures:
            key = trusted_key_for(trusted, signature)
            if key is None:
                if trusted:
                    problems.append(
                        f"{where}: signed by {signature.name!r}, which is not a trusted key"
                    )
                continue
            if verify(key, text, signature):
                signers.append(signature.name)
            else:
                problems.append(f"{where}: the signature of {signature.name!r} does not verify")
    if due and (not seals or seals[-1].size != len(leaves)):
        covered = seals[-1].size if seals else 0
        problems.append(
            f"{len(leaves) - covered} event(s) at the end are covered by no seal, although "
            "this run's version always seals it (events appended, or its seal removed)"
        )
    for key in trusted:
        if (
            due
            and key.made is not None
            and started is not None
            and started >= key.made
            and key.key.name not in signers
        ):
            problems.append(
                f"not signed by {key.key.name!r}, which signs every run since "
                f"{key.made:%Y-%m-%dT%H:%M:%SZ}"
            )
    if problems:
        status = SealStatus.TAMPERED
    elif not seals:
        status = SealStatus.UNSEALED
    else:
        status = SealStatus.SIGNED if signers else SealStatus.SEALED
    return SealCheck(
        status=status,
        seals=len(seals),
        size=size,
        root=root,
        signers=sorted(set(signers)),
        problems=problems,
    )
