"""Trace recording: `TraceWriter`, the `TraceRecorder` port as JSON lines under `trace/`."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from runjournal.adapters.debug_bundle.bundle_failures import PersistenceFailure, failure_of
from runjournal.adapters.debug_bundle.layout import (
    MAX_TRACE_RECORD_BYTES,
    TRACE_FILE,
    TRACE_FLUSH_EVERY,
    TRACE_TARGET,
)
from runjournal.adapters.debug_bundle.redacted import line_encoder, redacted_json
from runjournal.adapters.fsroot import FsRoot
from runjournal.domain.redaction import redact_text


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class TraceWriter:
    """The `TraceRecorder` port on `trace/events.jsonl`: one redacted JSON object a line.

    Records are buffered and appended in batches (one fsync per batch). Thread-safe:
    modules may record from parallel extract workers. The first failed append is kept
    and later records are counted as dropped; `record` never raises into the run.
    """

    def __init__(
        self,
        root: FsRoot,
        *,
        clock: Callable[[], str] = _now_iso,
        flush_every: int = TRACE_FLUSH_EVERY,
        max_record_bytes: int = MAX_TRACE_RECORD_BYTES,
        file_name: str = TRACE_FILE,
    ) -> None:
        self._root = root
        self._file = file_name
        self._clock = clock
        self._flush_every = max(1, flush_every)
        self._max_record = max_record_bytes
        self._lock = threading.Lock()
        self._buffer: list[bytes] = []
        self._seq = 0
        self._closed = False
        self.dropped = 0
        self.failures: list[PersistenceFailure] = []

    @property
    def records(self) -> int:
        return self._seq

    def record(self, kind: str, name: str, data: Mapping[str, Any]) -> None:
        try:
            body = redacted_json(dict(data))
        except Exception as exc:  # material that cannot even be copied: say so, redacted
            body = {"unrecordable": redact_text(f"{type(exc).__name__}: {exc}")}
        with self._lock:
            if self._closed:
                return  # late material (after the run's end) has nowhere to go
            if self.failures:
                self.dropped += 1
                return
            self._seq += 1
            line = {
                "seq": self._seq,
                "time": self._clock(),
                "kind": redact_text(str(kind)),
                "name": redact_text(str(name)),
                "data": body,
            }
            encoded = line_encoder.encode(line)
            if len(encoded) > self._max_record:
                line["data"] = {
                    "omitted": "record too large",
                    "bytes": len(encoded),
                    "sha256": hashlib.sha256(encoded).hexdigest(),
                }
                encoded = line_encoder.encode(line)
            self._buffer.append(encoded + b"\n")
            if len(self._buffer) >= self._flush_every:
                self._flush_locked()

    def flush(self) -> bool:
        with self._lock:
            return self._flush_locked()

    def close(self) -> bool:
        """Flush what is buffered; later records are ignored. True if nothing failed."""
        with self._lock:
            ok = self._flush_locked()
            self._closed = True
            return ok and not self.failures

    def _flush_locked(self) -> bool:
        if self.failures:
            self.dropped += len(self._buffer)
            self._buffer.clear()
            return False
        if not self._buffer:
            return True
        data = b"".join(self._buffer)
        pending = len(self._buffer)
        self._buffer.clear()
        try:
            self._root.append_line(self._file, data)
        except (OSError, ValueError) as exc:
            self.dropped += pending
            self.failures.append(failure_of(TRACE_TARGET, self._file, exc))
            return False
        return True
