"""The typed errors of the use-cases and of the Python API (docs/python-api.md "Errors").

Each names what went wrong in one line (`message`), the run it belongs to once one was
allocated (`run_id`), and the requested state that could not be written
(`persistence_errors`). The command line maps each class to its exit code in one table
(cli/exit_codes.py `EXIT_CODES`, docs/operations.md "Exit codes"); nothing here exits.
"""

from __future__ import annotations

import enum
from typing import Any


class RunjournalError(Exception):
    """Base of every error runjournal raises to a caller (never `SystemExit`)."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        persistence_errors: list[str] | None = None,
        document: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id  # set once a run id was allocated (P2 and later)
        self.persistence_errors = list(persistence_errors or [])
        self.document = document  # the run's own `--json` document, when it has one


class UsageError(RunjournalError):
    """A pipeline file, setting, option or input that cannot be used (exit 2)."""


class RunFailedError(RunjournalError):
    """The run could not be carried out: the journal failed, the cache was busy (exit 1)."""


class NotPersistedError(RunjournalError):
    """Requested state could not be written before the run could start (exit 3)."""


class RunInterruptedError(RunjournalError):
    """The run was interrupted before its stages ran (exit 130)."""


# The error message of a run that stopped once its LLM batches were submitted
# (`--no-wait`, docs/operations.md "Batch runs"); it ends interrupted.
NO_WAIT_MESSAGE = "stopped after submitting its LLM batches (--no-wait)"


class RunEnd(enum.Enum):
    """How a run that reached its stages ended; the CLI maps each to an exit code."""

    OK = "ok"
    FAILED = "failed"
    LEASED = "leased"  # --lease-wait fail: another run executes a stage this run needs
    INTERRUPTED = "interrupted"
    NOT_PERSISTED = "not_persisted"  # succeeded, but requested state was not written
    INTERNAL = "internal"  # a runjournal bug caught by its own check
