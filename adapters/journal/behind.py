"""`CommitBehind`: one journal batch committed on its own thread while the run goes on.

The scheduler's thread hands a full batch over and keeps deciding; it waits only when
the next batch is full and the previous one is still committing (at most one in flight),
or on an explicit flush. The checkpoint group sync runs on the same thread, before the
commit, so the durability order holds (docs/internals.md "Batching (`RunSession`)").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from runjournal.domain.events import RunEvent

__all__ = ["CommitBehind"]


class CommitBehind:
    """One batch in flight: `before` then `commit(events)` on a thread of its own."""

    def __init__(
        self,
        events: list[RunEvent],
        commit: Callable[[Sequence[RunEvent]], None],
        before: Callable[[], None] | None,
    ) -> None:
        self.events = events
        self._commit = commit
        self._before = before
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="runjournal-commit")
        self._thread.start()

    def _work(self) -> None:
        try:
            if self._before is not None:
                self._before()
            self._commit(self.events)
        except BaseException as exc:  # handed to the run's thread by `wait`
            self._error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Block until the batch is committed; raise what the commit raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
