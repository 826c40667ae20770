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

from runjournal.adapters.lazy_exports import lazy_exports

# Imported on first use: a run without `--debug` loads only what it uses (`spans`).
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "DebugBundle": "bundle",
        "BundleAllocationError": "bundle_failures",
        "DebugBundleError": "bundle_failures",
        "PersistenceFailure": "bundle_failures",
        "COMMAND": "layout",
        "FAILURE": "layout",
        "INCOMPLETE_MARKER": "layout",
        "LLM_TEXT_FILE": "layout",
        "RESOLUTION": "layout",
        "RUN": "layout",
        "SUMMARY_DIR": "layout",
        "SUMMARY_FILES": "layout",
        "TRACE_DIR": "layout",
        "TRACE_FILE": "layout",
        "WARNINGS": "layout",
        "TracingLLM": "llm_tracing",
        "trace_llm_calls": "llm_tracing",
        "JournalSpans": "spans",
        "SummaryWriter": "summary",
        "command_payload": "summary",
        "resolution_payload": "summary",
        "TraceWriter": "trace",
    },
)

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
