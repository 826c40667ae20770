"""What `run` tells its user besides the outcome: the text summary (`summary_lines`,
docs/operations.md "The run summary"), the failure line, hints and the module's
traceback on stderr. What the run collects for it (`RunNotes`: hints, warnings, main
outputs, `latest`) is app/run_guidance.py's.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from runjournal.app.errors import NO_WAIT_MESSAGE
from runjournal.app.run_guidance import RunNotes, main_outputs, remedy
from runjournal.cli.llm_wiring import llm_summary_line
from runjournal.cli.progress import clear_active
from runjournal.cli.style import Styler
from runjournal.domain.events import RunError
from runjournal.domain.redaction import safe_error_text

# The text summary shows this many warnings and main outputs, then a count of the rest.
SHOWN_WARNINGS = 5
SHOWN_OUTPUTS = 5
WARNING_WIDTH = 240


def print_traceback(text: str) -> None:
    """`-v`: the module's traceback on stderr, before the error line."""
    clear_active()
    print("runjournal: the module's traceback (redacted):", file=sys.stderr)
    print(text.rstrip("\n"), file=sys.stderr, flush=True)


def print_hint(message: str) -> None:
    clear_active()
    print(f"runjournal: hint: {safe_error_text(message, 1000)}", file=sys.stderr, flush=True)


def failure_line(doc: dict[str, Any], error: RunError, pipeline_arg: str) -> str:
    """`run X failed: step 'S' lane 'L' CODE: …` — the reason once, then what to do."""
    where = ""
    message = error.message
    if doc["status"] == "interrupted" and not error.step and message == "interrupted":
        # not `interrupted: interrupted` (issue 32): what stopped it, and how to go on
        return (
            f"run {doc['run_id']} interrupted by a signal; `runjournal run "
            f"{shlex.quote(pipeline_arg)} --resume` reuses what it finished"
        )
    if doc["status"] == "interrupted" and message == NO_WAIT_MESSAGE:
        return (
            f"run {doc['run_id']} {message}; `runjournal run {shlex.quote(pipeline_arg)} "
            '--resume` collects them (docs/operations.md "Batch runs")'
        )
    if error.step:
        code = error.reason_code.value if error.reason_code else "failed"
        cause = f" ({error.cause.value})" if error.cause else ""
        where = f"step '{error.step}' lane '{error.lane}' {code}{cause}: "
        message = remedy(error, pipeline_arg) or message
    line = f"run {doc['run_id']} {doc['status']}: {where}{message}"
    more = len(doc.get("failures") or ()) - 1
    if more > 0:  # --keep-going: not only the first failure (issue 32)
        line += f" (and {more} more failed stage(s): `runjournal explain {doc['run_id']}`)"
    return line


def _bounded(lines: list[str], total: int, shown: int, rest: str) -> list[str]:
    if total > shown:
        lines.append(f"    … and {total - shown} more {rest}")
    return lines


def warning_lines(warnings: list[dict[str, Any]]) -> list[str]:
    """At most SHOWN_WARNINGS warnings, one line each, then a count of the rest."""
    lines = []
    for w in warnings[:SHOWN_WARNINGS]:
        where = (w.get("step") or "run") + (f" · {w['lane']}" if w.get("lane") else "")
        lines.append(f"    {where}: {safe_error_text(str(w['message']), WARNING_WIDTH)}")
    return _bounded(lines, len(warnings), SHOWN_WARNINGS, "(all of them: report.json, --json)")


def summary_lines(doc: dict[str, Any], notes: RunNotes, paint: Styler) -> list[str]:
    """The text summary of a run (docs/operations.md "The run summary")."""
    decisions = ", ".join(f"{paint.code(k, k)} {v}" for k, v in doc["decisions"].items()) or "none"
    lines = [
        f"run {doc['run_id']} {paint.status(doc['status'], doc['status'])}",
        f"  decisions: {decisions}",
    ]
    if doc.get("not_started"):  # decided, never executed: the run stopped first
        never = ", ".join(f"{paint.code(k, k)} {v}" for k, v in doc["not_started"].items())
        lines.append(f"  not started: {never} (decided, never executed)")
    lines.append(f"  outputs:   {len(doc['outputs'])}")
    main = main_outputs(doc["outputs"], notes.sinks)
    for i, path in enumerate(main[:SHOWN_OUTPUTS]):
        lines.append(f"  {'main:' if i == 0 else '':<10} {path}")
    _bounded(lines, len(main), SHOWN_OUTPUTS, "main outputs (all files: --json)")
    lines.append(f"  run dir:   {doc['run_dir']}")
    if notes.latest:
        lines.append(f"  latest:    {notes.latest} -> {doc['run_id']}")
    if doc.get("manifest"):
        lines.append(f"  manifest:  {doc['manifest']}")
    if doc.get("report_html"):
        lines.append(f"  report:    {doc['report_html']}")
    if doc.get("debug_bundle"):
        lines.append(f"  debug:     {doc['debug_bundle']}")
    llm_line = llm_summary_line(doc["llm"]) if doc.get("llm") else None
    if llm_line:
        lines.append(f"  llm:       {llm_line}")
    roots = doc["roots"]
    lines.append(
        f"  roots:     output {roots['output']} · cache {roots['cache']} · debug {roots['debug']}"
    )
    lines.append(f"  journal:   {doc['journal']}")
    warnings = doc.get("warnings") or []
    if warnings:
        lines.append(f"  warnings:  {len(warnings)}")
        lines.extend(warning_lines(warnings))
    return lines
