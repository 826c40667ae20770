"""The projection use-cases: `projections status` and `projections rebuild`
(docs/internals.md "Projections").

Both open the journal read-only and its materialised views through the composition
root's `projection_store`; the store and the journal are closed by one `ExitStack`. An
unknown projection name is a `UsageError`, a journal that cannot be read a
`RunFailedError`. Views that could not be written are part of the result
(`RebuildReport.failures`), not an error.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from runjournal.adapters.journal import JournalError
from runjournal.adapters.projection_store import (
    ProjectionStatus,
    RebuildResult,
    UnknownProjection,
)
from runjournal.app.errors import RunFailedError, UsageError
from runjournal.app.journals import MaintenancePorts, existing_journal


@dataclass
class ProjectionStatusReport:
    """Each materialised view: its version, scope, staleness and where it lives."""

    projections: list[ProjectionStatus] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        """`projections status --json`."""
        return {"projections": self.projections}


@dataclass
class RebuildReport:
    """What `projections rebuild` wrote: one `RebuildResult` per view rebuilt."""

    run_id: str | None
    projections: list[RebuildResult] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """The views (or runs of one) that could not be written, one line each."""
        return [line for r in self.projections for line in r.failures]

    @property
    def ok(self) -> bool:
        return not self.failures

    def document(self) -> dict[str, Any]:
        """`projections rebuild --json`."""
        return {"run_id": self.run_id, "projections": self.projections}


def projection_status(
    config: Any, ports: MaintenancePorts, *, name: str | None = None
) -> ProjectionStatusReport:
    """Whether each view (or the one `name`d) is stale; nothing is written."""
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(existing_journal(config, ports, read_only=True))
        projections = ports.projection_store(store, config)
        try:
            return ProjectionStatusReport(list(projections.status(name)))
        except UnknownProjection as exc:
            raise UsageError(str(exc)) from None
        except JournalError as exc:
            raise RunFailedError(str(exc)) from None


def rebuild_projections(
    config: Any, ports: MaintenancePorts, *, name: str | None = None, run: str | None = None
) -> RebuildReport:
    """Rebuild every view (or the one `name`d), for every run or the one `run` names (an
    id, a unique prefix or `latest`)."""
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(existing_journal(config, ports, read_only=True))
        projections = ports.projection_store(store, config)
        run_id = None
        if run is not None:
            try:
                run_id = store.resolve_run(run)
            except JournalError as exc:
                raise RunFailedError(str(exc)) from None
        try:
            results = projections.rebuild(name, run_id)
        except UnknownProjection as exc:
            raise UsageError(str(exc)) from None
        except JournalError as exc:
            raise RunFailedError(str(exc)) from None
    return RebuildReport(run_id, list(results))
