"""The bundle's layout: directory and file names, targets, format version, limits.

docs/internals.md "Debug bundles" (its "Layout").
"""

from __future__ import annotations

from typing import Final

SUMMARY_DIR: Final = "summary"
TRACE_DIR: Final = "trace"
TRACE_FILE: Final = "events.jsonl"
LLM_TEXT_FILE: Final = "llm-text.jsonl"  # prompt and reply text (docs/internals.md)
INCOMPLETE_MARKER: Final = "INCOMPLETE"

COMMAND: Final = "command.json"
RESOLUTION: Final = "resolution.json"
RUN: Final = "run.json"
WARNINGS: Final = "warnings.json"
FAILURE: Final = "failure.json"
SUMMARY_FILES: Final = (COMMAND, RESOLUTION, RUN, WARNINGS, FAILURE)

SUMMARY_TARGET: Final = "debug_summary"
TRACE_TARGET: Final = "debug_trace"
BUNDLE_TARGET: Final = "debug_bundle"

FORMAT_VERSION: Final = 1
TRACE_FLUSH_EVERY: Final = 64
MAX_TRACE_RECORD_BYTES: Final = 256 * 1024
