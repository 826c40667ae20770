"""Opening the journal a maintenance use-case works on, and what it is wired with.

`MaintenancePorts` is what `rebuild`, `gc`, `recover`, `export` and `import` are wired
with: made by the composition root only (cli/compose.py `maintenance_ports`), each a
factory. `existing_journal` opens the journal the settings name, or says there is none
(docs/configuration.md "Finding the project").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.app.errors import RunFailedError, UsageError

# The schemes of a PostgreSQL journal URL (as cli/settings/parsing.py `is_postgres_url`).
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class MaintenancePorts:
    """The collaborators of the maintenance use-cases (cli/compose.py `maintenance_ports`)."""

    journal_for: Callable[..., JournalStore]  # (config, *, read_only) -> an opened store
    open_root: Callable[..., Any]  # (path, *, create=False) -> FsRoot
    output_objects: Callable[[Any], Any]  # FsRoot of an output root -> OutputObjects
    projection_store: Callable[[JournalStore, Any], Any]  # (store, config) -> ProjectionStore
    export_signer: Callable[[], Any]  # the user's signing key for exports, or None


def journal_exists(url: str) -> bool:
    """A PostgreSQL journal is taken to exist; a SQLite one when its file does."""
    return url.startswith(_POSTGRES_SCHEMES) or os.path.exists(_sqlite_path(url))


def _sqlite_path(url: str) -> str:
    return url[len("sqlite:///") - 1 :] if url.startswith("sqlite:///") else url


def existing_journal(config: Any, ports: MaintenancePorts, *, read_only: bool) -> JournalStore:
    """The journal `config` names, opened; a `UsageError` when there is none yet."""
    if journal_exists(config.journal):
        try:
            return ports.journal_for(config, read_only=read_only)
        except JournalError as exc:
            raise RunFailedError(str(exc)) from None
    raise UsageError(
        f"no journal at {config.journal} (use --journal or --output-root, "
        "or run the command in the pipeline's directory)"
    )
