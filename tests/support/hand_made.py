"""Recording any event by its type, for tests that build runs by hand.

The product records through typed methods only (docs/internals.md "Recording a run
(`RunRecorder`)"); a test that needs an event no typed method makes (an abandoned
terminal event, a warning with no step, an invariant the aggregate must refuse) goes
through the session's own redaction and `Run.trigger` here, in one place.
"""

from __future__ import annotations

from typing import Any

from runjournal.adapters.journal.session import RunSession
from runjournal.domain.events import RunEvent


def emit(session: RunSession, event_type: type[RunEvent], **fields: Any) -> None:
    """Record one event of `event_type` on `session`, as the typed methods do."""
    session._trigger(event_type, **fields)
