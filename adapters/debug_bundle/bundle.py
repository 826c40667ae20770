"""The bundle itself: allocation (all or nothing, marked INCOMPLETE) and finishing.

`close()` clears the marker only when every requested write succeeded.
"""

from __future__ import annotations

import os

import msgspec
from runjournal.adapters.debug_bundle.bundle_failures import (
    BundleAllocationError,
    PersistenceFailure,
    failure_of,
)
from runjournal.adapters.debug_bundle.layout import (
    BUNDLE_TARGET,
    INCOMPLETE_MARKER,
    LLM_TEXT_FILE,
    SUMMARY_DIR,
    TRACE_DIR,
)
from runjournal.adapters.debug_bundle.summary import SummaryWriter
from runjournal.adapters.debug_bundle.trace import TraceWriter
from runjournal.adapters.fsroot import AlreadyExists, FsRoot


class DebugBundle:
    """One run's allocated bundle: `summary/` always, `trace/` when trace was requested."""

    def __init__(
        self, *, path: str, run_id: str, root: FsRoot, summary: FsRoot, trace: FsRoot | None
    ) -> None:
        self.path = path
        self.run_id = run_id
        self._root = root
        self._summary_root = summary
        self._trace_root = trace
        self.summary = SummaryWriter(summary)
        self.trace: TraceWriter | None = TraceWriter(trace) if trace is not None else None
        # LLM prompt and reply text, beside the trace events (which carry digests only).
        self.llm_text: TraceWriter | None = (
            TraceWriter(trace, file_name=LLM_TEXT_FILE) if trace is not None else None
        )
        self._marker_failures: list[PersistenceFailure] = []
        self._closed = False

    @classmethod
    def allocate(cls, debug_root: FsRoot, run_id: str, *, trace: bool) -> DebugBundle:
        """Create `<debug root>/<run id>/` exclusively, marked INCOMPLETE, with its roots.

        `debug_root` is the invocation's one handle on the debug root (cli/compose.py
        opens it; it stays open). All or nothing: on a failure after the exclusive mkdir,
        the half-made bundle is removed again (it is ours); only if that removal fails too
        does it remain, still marked INCOMPLETE. Raises `BundleAllocationError`.
        """
        parent = debug_root
        planned = os.path.join(parent.path, run_id)
        opened: list[FsRoot] = []
        try:
            parent.mkdir(run_id, exclusive=True)
        except AlreadyExists as exc:  # not ours: never touch it
            raise BundleAllocationError(planned, str(exc), cleaned=True) from None
        except (OSError, ValueError) as exc:
            raise BundleAllocationError(planned, str(exc), cleaned=True) from None
        try:
            root = parent.subroot(run_id)
            opened.append(root)
            root.write_bytes(INCOMPLETE_MARKER, _marker_text(run_id), overwrite=False)
            root.mkdir(SUMMARY_DIR, exclusive=True)
            summary = root.subroot(SUMMARY_DIR)
            opened.append(summary)
            trace_root = None
            if trace:
                root.mkdir(TRACE_DIR, exclusive=True)
                trace_root = root.subroot(TRACE_DIR)
                opened.append(trace_root)
        except (OSError, ValueError) as exc:
            for fs in opened:
                fs.close()
            cleaned = True
            try:
                parent.remove_tree(run_id, missing_ok=True)
            except (OSError, ValueError):
                cleaned = False
            raise BundleAllocationError(planned, str(exc), cleaned=cleaned) from None
        return cls(path=root.path, run_id=run_id, root=root, summary=summary, trace=trace_root)

    @property
    def failures(self) -> list[PersistenceFailure]:
        trace = self.trace.failures if self.trace is not None else []
        text = self.llm_text.failures if self.llm_text is not None else []
        return [*self.summary.failures, *trace, *text, *self._marker_failures]

    def close(self) -> list[PersistenceFailure]:
        """Flush the trace; clear the INCOMPLETE marker only if nothing failed.

        Returns every persistence failure of the bundle (empty when it is complete).
        """
        if self._closed:
            return self.failures
        self._closed = True
        if self.llm_text is not None:
            self.llm_text.close()
        if self.trace is not None:
            self.trace.close()
            if self.trace.dropped and self.trace.failures:
                first = self.trace.failures[0]
                self.trace.failures[0] = msgspec.structs.replace(
                    first, message=f"{first.message} ({self.trace.dropped} record(s) lost)"
                )
        if not self.failures:
            try:
                self._root.remove(INCOMPLETE_MARKER)
            except (OSError, ValueError) as exc:
                self._marker_failures.append(failure_of(BUNDLE_TARGET, INCOMPLETE_MARKER, exc))
        for fs in (self._trace_root, self._summary_root, self._root):
            if fs is not None:
                fs.close()
        return self.failures


def _marker_text(run_id: str) -> bytes:
    return (
        f"debug bundle of run {run_id} is incomplete: the run has not finished writing it,\n"
        "or a write failed (see `runjournal journal show` for TerminalPersistenceFailed).\n"
    ).encode()
