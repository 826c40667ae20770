"""What every projection is: a named, versioned, pure fold of a run's events into a view.

The same fold runs live (fed each event as the runner emits it) and on rebuild (fed
the events read back from the journal), so the two views are equal by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Protocol, TypeVar

from runjournal.domain.events import RunError, RunEvent


class Projection(Protocol):
    NAME: ClassVar[str]
    VERSION: ClassVar[int]

    def apply(self, event: RunEvent) -> None: ...

    def view(self) -> dict[str, Any]: ...


P = TypeVar("P", bound=Projection)


def fold(projection: P, events: Iterable[RunEvent]) -> P:
    for event in events:
        projection.apply(event)
    return projection


def storage_name(projection: type[Projection] | Projection) -> str:
    """The version is part of the view's storage name, so v2 can be built beside v1."""
    return f"{projection.NAME}.v{projection.VERSION}"


def error_view(error: RunError | None) -> dict[str, Any] | None:
    """A run's primary error as JSON data: step, lane, reason code and message only."""
    if error is None:
        return None
    return {
        "step": error.step,
        "lane": error.lane,
        "reason_code": error.reason_code.value if error.reason_code else None,
        "message": error.message,
    }
