"""The one place that maps failures to exit codes and single-line messages."""

from __future__ import annotations

import enum
import sys

from runjournal.app.errors import (
    NotPersistedError,
    RunEnd,
    RunFailedError,
    RunInterruptedError,
    RunjournalError,
    UsageError,
)

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


class CliError(RunjournalError):
    """An error the CLI reports as one line with a documented exit code."""

    def __init__(
        self,
        message: str,
        exit_code: ExitCode = ExitCode.USAGE,
        *,
        run_id: str | None = None,
        json_printed: bool = False,
    ) -> None:
        super().__init__(message, run_id=run_id)  # run_id: once allocated (P2 and later)
        self.exit_code = exit_code
        self.json_printed = json_printed  # the --json document is already on stdout


# The one error table: each typed error of the use-cases (app/errors.py) and each way a
# run that reached its stages ended, with its documented exit code
# (docs/operations.md "Exit codes").
EXIT_CODES: dict[type[RunjournalError], ExitCode] = {
    UsageError: ExitCode.USAGE,
    RunFailedError: ExitCode.FAILED,
    NotPersistedError: ExitCode.NOT_PERSISTED,
    RunInterruptedError: ExitCode.INTERRUPTED,
}
RUN_END_CODES: dict[RunEnd, ExitCode] = {
    RunEnd.OK: ExitCode.OK,
    RunEnd.FAILED: ExitCode.FAILED,
    RunEnd.LEASED: ExitCode.LEASED,
    RunEnd.INTERRUPTED: ExitCode.INTERRUPTED,
    RunEnd.NOT_PERSISTED: ExitCode.NOT_PERSISTED,
    RunEnd.INTERNAL: ExitCode.INTERNAL,
}


def exit_code_of(exc: RunjournalError) -> ExitCode:
    """The exit code of a typed error: a CliError carries its own, the rest are in the table."""
    if isinstance(exc, CliError):
        return exc.exit_code
    for kind in type(exc).__mro__:
        if kind in EXIT_CODES:
            return EXIT_CODES[kind]
    return ExitCode.FAILED


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
