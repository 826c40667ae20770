"""The one place that maps failures to exit codes and single-line messages."""

from __future__ import annotations

import enum
import sys

# Importing the redaction shapes and the progress display costs start-up time that
# `--version` and `--help` never need: both are imported when a message is printed.


def safe_error_text(message: str, limit: int) -> str:
    from runjournal.domain.redaction import safe_error_text as redact_bound

    return redact_bound(message, limit)


def clear_active() -> None:
    from runjournal.cli.progress import clear_active as clear

    clear()


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    NOT_PERSISTED = 3
    LEASED = 4  # --lease-wait fail: another run is executing a stage this run needs
    INTERNAL = 70  # a runjournal bug caught by its own check (sysexits' EX_SOFTWARE)
    INTERRUPTED = 130


class CliError(Exception):
    """An error the CLI reports as one line with a documented exit code."""

    def __init__(
        self,
        message: str,
        exit_code: ExitCode = ExitCode.USAGE,
        *,
        run_id: str | None = None,
        json_printed: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.run_id = run_id  # set once a run id was allocated (P2 and later)
        self.json_printed = json_printed  # the --json document is already on stdout


def error_document(message: str, exit_code: int, run_id: str | None = None) -> dict:
    """The one `--json` document of a command that failed before it had a result."""
    return {
        "status": _status(exit_code, run_id),
        "run_id": run_id,
        "exit_code": int(exit_code),
        "error": {
            "step": None,
            "lane": None,
            "reason_code": None,
            "message": safe_error_text(message, 1000),
        },
    }


def _status(exit_code: int, run_id: str | None) -> str:
    """`error` before a run exists; once allocated, the run's own status."""
    if not run_id:
        return "error"
    return "interrupted" if exit_code == ExitCode.INTERRUPTED else "failed"


def error_line(message: str) -> str:
    """`runjournal: error: <message>` — redacted, escaped, bounded, one line."""
    return f"runjournal: error: {safe_error_text(message, 1000)}"


def print_error(message: str) -> None:
    clear_active()  # a progress line on screen must not swallow the start of this one
    print(error_line(message), file=sys.stderr, flush=True)


def print_warning(message: str) -> None:
    clear_active()
    print(f"runjournal: warning: {safe_error_text(message, 1000)}", file=sys.stderr, flush=True)
