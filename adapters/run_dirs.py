"""Reaching a run's directory where the journal recorded it.

Commands that read or write run directories (`projections rebuild`, `gc`, `journal
audit`, `report`, `recover`) act on the `run_dir` the run's `RunAllocated` recorded, not
on `<current output root>/<run id>`, so they find the run whichever output root or
current directory they were started with (docs/operations.md "Where a run lives"). Only
a record `<absolute dir>/<run id>` counts (`recorded_run_parent`), and the run directory
is reached through the parent's `FsRoot`, never through a symlink.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Self

from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.domain.names import recorded_run_parent

__all__ = ["RunDirs"]


class RunDirs:
    """The directories holding run directories, each opened at most once, on first use."""

    def __init__(self, open_root: Callable[..., FsRoot]) -> None:
        """`open_root(path, *, create)` is the composition root's factory (cli/compose.py)."""
        self._open = open_root
        self._roots: dict[str, FsRoot | None] = {}

    def parent_of(self, run_id: str, run_dir: str) -> FsRoot | None:
        """The opened directory the record puts the run's directory in; None when the
        record does not pin one down or that directory cannot be opened (is gone)."""
        parent = recorded_run_parent(run_id, run_dir)
        if parent is None:
            return None
        if parent not in self._roots:
            try:
                self._roots[parent] = self._open(parent, create=False)
            except (FsError, OSError, ValueError):
                self._roots[parent] = None
        return self._roots[parent]

    def holding(self, run_id: str, run_dir: str) -> FsRoot | None:
        """`parent_of`, only when `<run id>` in it is a real directory (not a symlink)."""
        root = self.parent_of(run_id, run_dir)
        if root is None:
            return None
        try:
            root.subroot(run_id).close()
        except FsError:
            return None
        return root

    def close(self) -> None:
        for root in self._roots.values():
            if root is not None:
                root.close()
        self._roots.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
