"""Debug bundles (docs/internals.md "Debug bundles"): an opt-in `<debug root>/<run id>/` with
`summary/` and `trace/`.

The CLI allocates a bundle only when `--debug` asks for one, after the run id exists
and before the pipeline is resolved. `SummaryWriter` persists the redacted summary
documents; `TraceWriter` is the `TraceRecorder` port: JSON-lines records under
`trace/`. Everything crosses one boundary, `redact_obj`, before it is encoded, and the
writers never raise into the run: a failed write is kept as a `PersistenceFailure`
that the CLI reports (exit 3 when the run itself succeeded).

A bundle is marked `INCOMPLETE` from its allocation until `close()` finds every
requested write done, so a bundle left by a crash or a failed write says so itself.
Debug data is never read back: it is no checkpoint source and no cache input.

One module per job: `layout` (names and limits), `failures`, `redacted` (the redaction
boundary), `summary` (summary writing), `trace` (trace recording), `spans` (journal
spans), `llm_tracing` (LLM call metadata), `bundle` (allocation and finishing).
"""

from runjournal.adapters.debug_bundle.bundle import DebugBundle
from runjournal.adapters.debug_bundle.failures import (
    BundleAllocationError,
    DebugBundleError,
    PersistenceFailure,
)
from runjournal.adapters.debug_bundle.layout import (
    COMMAND,
    FAILURE,
    INCOMPLETE_MARKER,
    LLM_TEXT_FILE,
    RESOLUTION,
    RUN,
    SUMMARY_DIR,
    SUMMARY_FILES,
    TRACE_DIR,
    TRACE_FILE,
    WARNINGS,
)
from runjournal.adapters.debug_bundle.llm_tracing import TracingLLM, trace_llm_calls
from runjournal.adapters.debug_bundle.spans import JournalSpans
from runjournal.adapters.debug_bundle.summary import (
    SummaryWriter,
    command_payload,
    resolution_payload,
)
from runjournal.adapters.debug_bundle.trace import TraceWriter

__all__ = [
    "COMMAND",
    "FAILURE",
    "INCOMPLETE_MARKER",
    "LLM_TEXT_FILE",
    "RESOLUTION",
    "RUN",
    "SUMMARY_DIR",
    "SUMMARY_FILES",
    "TRACE_DIR",
    "TRACE_FILE",
    "WARNINGS",
    "BundleAllocationError",
    "DebugBundle",
    "DebugBundleError",
    "JournalSpans",
    "PersistenceFailure",
    "SummaryWriter",
    "TraceWriter",
    "TracingLLM",
    "command_payload",
    "resolution_payload",
    "trace_llm_calls",
]
