"""The audit use-case: `journal audit RUN` (docs/internals.md "`journal audit RUN`").

Re-decides every recorded stage decision of a run from its facts (`domain/audit.py`),
verifies its hash chain, its Merkle tree and signed checkpoints, and its run directory;
the result is typed (`AuditResult`, its `document` the `journal audit --json` document).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.adapters.journal.chain import ChainReport, ChainStatus
from runjournal.adapters.journal.sealer import SealCheck, check_seals
from runjournal.adapters.run_directory_check import (
    RunDirectoryCheck,
    RunFacts,
    check_run_directory,
)
from runjournal.adapters.signing import TrustedKey
from runjournal.app.errors import RunFailedError
from runjournal.app.queries import resolve_run
from runjournal.domain.audit import AuditReport, audit_run
from runjournal.domain.events import RunAllocated, RunEvent, RunTerminated
from runjournal.domain.seal import writes_seals


class IntegrityCheck(enum.StrEnum):
    """Which integrity check found a problem (the word printed before the event type)."""

    CHAIN = "chain"
    CHECKPOINT = "checkpoint"
    RUN_DIRECTORY = "run directory"


class IntegrityProblem(NamedTuple):
    version: int
    event: str
    check: IntegrityCheck
    message: str


def chain_stripped(chain: ChainReport, allocated: RunAllocated | None) -> bool:
    """An unchained run whose writer always chains (docs/operations.md "Signed
    checkpoints"): its links were removed, it was not recorded without them."""
    return (
        chain.status is ChainStatus.UNCHAINED
        and allocated is not None
        and writes_seals(allocated.tool_version)
    )


def _tampering(
    chain: ChainReport,
    run_dir: RunDirectoryCheck,
    seals: SealCheck,
    allocated: RunAllocated | None,
) -> list[IntegrityProblem]:
    found = [
        IntegrityProblem(b.version, b.event, IntegrityCheck.CHAIN, b.message) for b in chain.breaks
    ]
    if chain_stripped(chain, allocated):
        assert allocated is not None
        found.append(
            IntegrityProblem(
                1,
                "RunAllocated",
                IntegrityCheck.CHAIN,
                f"no row carries a chain link, but runjournal {allocated.tool_version} always "
                "writes the chain: it was stripped",
            )
        )
    found += [
        IntegrityProblem(0, "RunSealed", IntegrityCheck.CHECKPOINT, m) for m in seals.problems
    ]
    found += [
        IntegrityProblem(p.version, p.event, IntegrityCheck.RUN_DIRECTORY, p.message)
        for p in run_dir.problems
    ]
    return found


def _document(
    report: AuditReport,
    chain: ChainReport,
    run_dir: RunDirectoryCheck,
    clean: bool,
    seals: SealCheck,
) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "verdict": "ok" if clean else "different",
        "events": report.events,
        "decisions": report.decisions,
        "differences": [
            {
                "version": d.version,
                "step": d.step,
                "lane": d.lane,
                "stage": d.stage,
                "chunk": d.chunk or None,
                "recorded": d.recorded.value,
                "redecided": d.redecided.value,
                "problem": d.problem.value,
                "detail": d.detail,
            }
            for d in report.differences
        ],
        "violations": [
            {"version": v.version, "event": v.event, "message": v.message}
            for v in report.violations
        ],
        "chain": {
            "status": chain.status.value,
            "events": chain.events,
            "head": chain.head,
            "breaks": [
                {"version": b.version, "event": b.event, "message": b.message} for b in chain.breaks
            ],
        },
        "checkpoints": {
            "status": seals.status.value,
            "seals": seals.seals,
            "tree_size": seals.size,
            "root": seals.root,
            "signed_by": seals.signers,
            "problems": seals.problems,
        },
        "run_directory": {
            "status": run_dir.status.value,
            "path": run_dir.path,
            "files_checked": run_dir.files_checked,
            "problems": [
                {"version": p.version, "event": p.event, "message": p.message}
                for p in run_dir.problems
            ],
        },
    }


@dataclass
class AuditResult:
    """What `journal audit` found: the re-decided run, its chain, seals and directory."""

    run_id: str
    report: AuditReport
    chain: ChainReport
    run_dir: RunDirectoryCheck
    seals: SealCheck
    allocated: RunAllocated | None
    tampering: list[IntegrityProblem]

    @property
    def clean(self) -> bool:
        return self.report.ok and not self.tampering

    @property
    def document(self) -> dict[str, Any]:
        """`journal audit --json`'s document (the Python API's `Project.audit`)."""
        return _document(self.report, self.chain, self.run_dir, self.clean, self.seals)


def audit(
    store: JournalStore, run: str, trusted: Sequence[TrustedKey], *, open_root: Any
) -> AuditResult:
    """Re-decide every recorded decision of RUN and verify its chain, tree, seals and
    run directory (docs/internals.md "`journal audit RUN`"); `open_root` opens the run
    directory's root (the composition root's factory)."""
    facts = RunFacts()
    run_id = resolve_run(store, run)
    try:  # streamed: the audit and the run directory's facts see each event once
        report = audit_run(_fed(store.projected_events(run_id), facts))
        chain = store.verify_chain(run_id)
        seals = check_run_seals(store, run_id, facts.allocated, facts.terminal, trusted)
    except JournalError as exc:
        raise RunFailedError(f"cannot replay run {run_id}: {exc}") from None
    run_dir = check_run_directory(facts, open_root=open_root)
    tampering = _tampering(chain, run_dir, seals, facts.allocated)
    return AuditResult(run_id, report, chain, run_dir, seals, facts.allocated, tampering)


def check_run_seals(
    store: JournalStore,
    run_id: str,
    allocated: RunAllocated | None,
    terminal: RunTerminated | None,
    trusted: Sequence[TrustedKey],
) -> SealCheck:
    """The run's seals checked against its events; due when its writer always seals and it
    ended."""
    due = allocated is not None and terminal is not None and writes_seals(allocated.tool_version)
    return check_seals(
        run_id,
        store.tree_leaves(run_id),
        store.seals(run_id),
        due=due,
        trusted=trusted,
        started=allocated.timestamp if allocated is not None else None,
    )


def _fed(events: Iterator[RunEvent], facts: RunFacts) -> Iterator[RunEvent]:
    for event in events:
        facts.feed(event)
        yield event
